"""Flax ViT ``.npz`` archives: big_vision's plain ViT (SigLIP image towers included), its NaFlex tower
(SigLIP 2 NaFlex) and the original vit_jax / AugReg layout.

Both store flax parameters flattened with ``/`` (optionally under ``params/`` or ``opt/target/``; a
two-tower SigLIP file holds the image tower under ``params/img/`` or ``img/``), with HWIO patch
kernels, per-head (D, heads, head_dim) attention kernels and (in, out) Dense kernels. They differ
only in the block module names and in where the learned table lives and whether it has a
class-token slot; each flavour is a row of names below.
"""
import re
from typing import Any, Dict, Optional, Tuple

from ..config import SimpleViTConfig
from ..parts import MapPool
from .fills import copy, dense_patch_kernel, flatten_grid_table, fuse_head_bias, fuse_heads, hwio_to_oihw, merge_heads, \
    transpose
from .naflex_reader import NaFlexReader
from .preprocessing import assumed_preprocessing
from .source import Rule, SourceCheckpoint
from .stores import TensorStore

__all__ = ['FlaxCheckpoint', 'BigVisionCheckpoint', 'BigVisionNaFlexCheckpoint', 'VitJaxCheckpoint']

_BLOCK_RE = re.compile(r'^Transformer/encoderblock_(\d+)/')
_SCAN = 'Transformer/encoderblock/'

# Our key -> flax names under the prefix; {b} is the block's module path, the other fields are a flavour's names.
_TABLE: Dict[str, Rule] = {
    'patch_embed.proj.weight': Rule(('embedding/kernel',), hwio_to_oihw),
    'patch_embed.proj.bias': Rule(('embedding/bias',)),
    'cls_token': Rule(('cls',)),
    'pos_embed': Rule(('{pos}',)),
    'blocks.{i}.norm1.weight': Rule(('{b}{ln1}/scale',)),
    'blocks.{i}.norm1.bias': Rule(('{b}{ln1}/bias',)),
    'blocks.{i}.attn.qkv.weight': Rule(tuple(f'{{b}}{{attn}}/{n}/kernel' for n in ('query', 'key', 'value')),
                                       fuse_heads),
    'blocks.{i}.attn.qkv.bias': Rule(tuple(f'{{b}}{{attn}}/{n}/bias' for n in ('query', 'key', 'value')),
                                     fuse_head_bias),
    'blocks.{i}.attn.proj.weight': Rule(('{b}{attn}/out/kernel',), merge_heads),
    'blocks.{i}.attn.proj.bias': Rule(('{b}{attn}/out/bias',)),
    'blocks.{i}.norm2.weight': Rule(('{b}{ln2}/scale',)),
    'blocks.{i}.norm2.bias': Rule(('{b}{ln2}/bias',)),
    'blocks.{i}.mlp.fc1.weight': Rule(('{b}{mlp}/Dense_0/kernel',), transpose),
    'blocks.{i}.mlp.fc1.bias': Rule(('{b}{mlp}/Dense_0/bias',)),
    'blocks.{i}.mlp.fc2.weight': Rule(('{b}{mlp}/Dense_1/kernel',), transpose),
    'blocks.{i}.mlp.fc2.bias': Rule(('{b}{mlp}/Dense_1/bias',)),
    'norm.weight': Rule(('Transformer/encoder_norm/scale',)),
    'norm.bias': Rule(('Transformer/encoder_norm/bias',)),
    'pre_logits.fc.weight': Rule(('pre_logits/kernel',), transpose),
    'pre_logits.fc.bias': Rule(('pre_logits/bias',), copy),
    'head.weight': Rule(('head/kernel',), transpose),
    'head.bias': Rule(('head/bias',)),
    # big_vision's MAPHead as timm's AttentionPoolLatent; {map} is 'MAPHead_0/', or '' in old files.
    'attn_pool.latent': Rule(('{map}probe',)),
    'attn_pool.q.weight': Rule(('{map}MultiHeadDotProductAttention_0/query/kernel',), fuse_heads),
    'attn_pool.q.bias': Rule(('{map}MultiHeadDotProductAttention_0/query/bias',), fuse_head_bias),
    'attn_pool.kv.weight': Rule(tuple(f'{{map}}MultiHeadDotProductAttention_0/{n}/kernel' for n in ('key', 'value')),
                                fuse_heads),
    'attn_pool.kv.bias': Rule(tuple(f'{{map}}MultiHeadDotProductAttention_0/{n}/bias' for n in ('key', 'value')),
                              fuse_head_bias),
    'attn_pool.proj.weight': Rule(('{map}MultiHeadDotProductAttention_0/out/kernel',), merge_heads),
    'attn_pool.proj.bias': Rule(('{map}MultiHeadDotProductAttention_0/out/bias',)),
    'attn_pool.norm.weight': Rule(('{map}LayerNorm_0/scale',)),
    'attn_pool.norm.bias': Rule(('{map}LayerNorm_0/bias',)),
    'attn_pool.mlp.fc1.weight': Rule(('{map}MlpBlock_0/Dense_0/kernel',), transpose),
    'attn_pool.mlp.fc1.bias': Rule(('{map}MlpBlock_0/Dense_0/bias',)),
    'attn_pool.mlp.fc2.weight': Rule(('{map}MlpBlock_0/Dense_1/kernel',), transpose),
    'attn_pool.mlp.fc2.bias': Rule(('{map}MlpBlock_0/Dense_1/bias',)),
}
# big_vision's NaFlex tower: a Dense over P-P-C flattened patches, and a (G, G, D) learned table.
_NAFLEX_TABLE: Dict[str, Rule] = dict(
    _TABLE, **{'patch_embed.proj.weight': Rule(('embedding/kernel',), dense_patch_kernel),
               'pos_embed': Rule(('pos_embedding',), flatten_grid_table)})


def _under_prefix(table: Dict[str, Rule]) -> Dict[str, Rule]:
    """The table's names as templates under the reader's prefix ``{p}``."""
    return {key: Rule(tuple('{p}' + name for name in rule.sources), rule.fill) for key, rule in table.items()}


def _prefix_of(store: TensorStore, prefixes: Tuple[str, ...]) -> Optional[str]:
    """The first of ``prefixes`` the ViT's patch embedding sits under, None if none."""
    return next((prefix for prefix in prefixes if f'{prefix}embedding/kernel' in store), None)


def is_flat_patch_kernel(store: TensorStore, prefix: Optional[str]) -> bool:
    """Whether a big_vision archive's patch kernel is a (P*P*C, D) Dense (a NaFlex tower's), under the ``prefix``
    hint, else under the first of the usual prefixes that holds one."""
    found = _prefix_of(store, (prefix,) if prefix else FlaxCheckpoint.PREFIXES)
    return found is not None and len(store.shape(f'{found}embedding/kernel')) == 2


class FlaxCheckpoint(SourceCheckpoint):
    """A flax ViT parameter archive; subclasses give the flavour's names."""

    _RANGE = 'big_vision and vit_jax feed pixels in [-1, 1]'
    PREPROCESSING_DEFAULTS = assumed_preprocessing(
        'bilinear', 0.875, 'center', 'an .npz records no preprocessing; the simple_vit default', _RANGE)
    # SigLIP evaluates the whole image resized to the model's size: resize(size)|value_range(-1, 1).
    SIGLIP_PREPROCESSING = assumed_preprocessing(
        'bilinear', 1.0, 'squash', "an .npz records no preprocessing; big_vision SigLIP's "
        'resize(size)|value_range(-1, 1)', _RANGE)

    RULES = _under_prefix(_TABLE)
    PREFIXES = ('', 'params/', 'opt/target/', 'params/img/', 'img/')
    # The flavour: block module names, the learned table's key, whether that table has a cls slot.
    NAMES: Dict[str, str] = {}
    POS_CLS_SLOT = False
    # Position embedding when the archive holds no table (None: the table is required).
    DEFAULT_POS_EMBED: Optional[str] = None
    UNSUPPORTED = {
        'conv_root': 'hybrid ResNet-ViT checkpoints (ResNet stem) are not supported',
    }

    def _local(self, name: str) -> str:
        return self._prefix + name

    def _find_prefix(self, hint: Optional[str]) -> str:
        candidates = (hint,) if hint else self.PREFIXES
        prefix = _prefix_of(self._store, candidates)
        if prefix is not None:
            return prefix
        raise self._error(
            'not a ViT parameter archive: no patch embedding found (if the ViT sits deeper, give the key prefix '
            "it sits under, e.g. 'params/img/')", key=f'{candidates[0]}embedding/kernel', needs='prefix')

    def _infer(self, hints: Dict[str, Any]) -> SimpleViTConfig:
        self._prefix = self._find_prefix(hints.get('prefix'))
        local = {n[len(self._prefix):] for n in self._candidates()}
        self._refuse_unsupported(local)
        self._map = self._map_head(local)
        self._note_skipped()
        kernel_key = self._local('embedding/kernel')
        patch_h, patch_w, in_chans, dim = self._patch_kernel(kernel_key, self._shape(kernel_key), hints)
        self._check_dims(kernel_key, width=dim, img_size=max(patch_h, patch_w))
        class_token = 'cls' in local
        slot = self.POS_CLS_SLOT and class_token
        pos_embed = self._position(local, dim, (patch_h, patch_w), class_token, slot, hints)
        depth = self._depth(local)
        num_heads = self._heads(dim, depth, hints)
        names = self._fields(0)
        fc1_key = '{p}{b}{mlp}/Dense_0/kernel'.format(**names)
        mlp_dim = self._shape(fc1_key)[-1]
        self._check_dims(fc1_key, mlp=mlp_dim)
        rep_size = self._shape(self._local('pre_logits/kernel'))[-1] if 'pre_logits/kernel' in local else None
        num_classes = self._shape(self._local('head/kernel'))[-1] if 'head/kernel' in local else 0
        self._check_dims(self._local('head/kernel'), classes=num_classes, width=rep_size)
        if self.grid is not None:
            img_size: Any = (self.grid[0] * patch_h, self.grid[1] * patch_w)
        else:
            img_size = self._unrecorded('img_size', hints, 224, 'the archive has no position table, so its image '
                                        'size is not recorded (a sin-cos table fits any size)')
        return SimpleViTConfig.of(
            img_size=img_size,
            patch_size=(patch_h, patch_w),
            in_chans=in_chans,
            num_classes=num_classes,
            global_pool='map' if self._map is not None else 'token' if class_token else 'avg',
            embed_dim=dim,
            depth=depth,
            num_heads=num_heads,
            mlp_dim=mlp_dim,
            qkv_bias='{b}{attn}/query/bias'.format(**names) in local,
            class_token=class_token,
            pos_embed=pos_embed,
            pos_embed_cls_slot=slot and pos_embed == 'learn',
            pos_embed_resample=self._resample_rule((patch_h, patch_w), class_token),
            patch_embed=self.PATCH_EMBED,
            rep_size=rep_size,
            # flax nn.gelu defaults to the tanh approximation in both big_vision and vit_jax.
            act_layer=hints.get('act_layer') or 'gelu_tanh',
            norm_eps=hints.get('norm_eps') or 1e-6,
            # big_vision's patch conv is VALID; a SigLIP tower's nominal size (384 at patch 14) relies on it
            grid_mode='crop' if self._map is not None else None,
        )

    def _patch_kernel(self, key: str, kernel: Tuple[int, ...], hints: Dict[str, Any]) -> Tuple[int, int, int, int]:
        """(P, P, C, D) of the HWIO patch kernel."""
        if len(kernel) != 4:
            raise self._error('patch embedding kernel must be (P, P, C, D)', key=key, shapes=(kernel,))
        return kernel

    def _resample_rule(self, patch: Tuple[int, int], class_token: bool) -> str:
        """How this framework resizes a learned table: big_vision's and vit_jax's load-time zoom."""
        return 'bigvision'

    def _preprocessing_defaults(self) -> Dict[str, Tuple[Any, str]]:
        return self.SIGLIP_PREPROCESSING if isinstance(self.config.head.pool, MapPool) else self.PREPROCESSING_DEFAULTS

    def _map_head(self, local: set) -> Optional[str]:
        """Where the MAP head's names start ('MAPHead_0/', or '' for the old inlined layout), None without one.

        Before ``MAPHead_0`` existed, the probe, attention, LayerNorm and MLP of the head sat at the top
        of the tower; big_vision's ``vit.fix_old_checkpoints`` moves them, and so does this mapping.
        """
        if 'MAPHead_0/probe' in local:
            return 'MAPHead_0/'
        return '' if 'probe' in local else None

    def _note_skipped(self) -> None:
        """One line naming what the file holds besides the image tower (a SigLIP text tower, ``t``, ``b``)."""
        others = [n for n in self._store.names() if not n.startswith(self._prefix)]
        if others and self._prefix:
            outer = self._prefix.rstrip('/').rpartition('/')[0]
            tops = sorted({n[len(outer) + 1 if outer else 0:].split('/')[0] for n in others})
            self.notes.append(f'read the image tower under {self._prefix!r}; skipped {len(others)} other arrays '
                              f'({", ".join(tops[:6])}: e.g. a text tower and its logit scale and bias), which '
                              'the image model does not use')

    def _refuse_unsupported(self, local: set) -> None:
        for name in local:
            for marker, reason in self.UNSUPPORTED.items():
                if name.startswith(marker):
                    raise self._error(reason, key=self._local(name))

    def _position(self, local: set, dim: int, patch: Tuple[int, int], class_token: bool, slot: bool,
                  hints: Dict[str, Any]) -> str:
        """The position embedding: a stored learned table (its grid set on ``self.grid``) or the default."""
        pos_embed = hints.get('pos_embed')
        pos_key = self._local(self.NAMES['pos'])
        if self.NAMES['pos'] not in local:
            pos_embed = pos_embed or self.DEFAULT_POS_EMBED
            if pos_embed is None:
                raise self._error('missing key', key=pos_key)
            return pos_embed
        if pos_embed not in (None, 'learn'):
            raise self._error(f'the checkpoint has a learned position table, not pos_embed={pos_embed!r}', key=pos_key)
        self._check_token_table(pos_key, dim, patch, class_token=class_token, slot=slot, img_size=hints.get('img_size'))
        return 'learn'

    def _depth(self, local: set) -> int:
        """Blocks: one module per block, or one scanned module whose every array has the same leading depth axis."""
        self._scanned = f'{_SCAN}{self.NAMES["ln1"]}/scale' in local
        if self._scanned:
            scale_key = self._local(f'{_SCAN}{self.NAMES["ln1"]}/scale')
            scale = self._shape(scale_key)
            if len(scale) != 2:
                raise self._error('scanned parameters need a leading depth axis', key=scale_key,
                                  shapes=(scale, ('depth', 'width')))
            self._check_dims(scale_key, depth=scale[0])
            depth = scale[0]
            for name in sorted(n for n in local if n.startswith(_SCAN)):
                shape = self._shape(self._local(name))
                if not shape or shape[0] != depth:
                    raise self._error(f'a scanned array stacks {shape[0] if shape else 0} layers where '
                                      f'{scale_key} stacks {depth}: every array of a scanned encoder has the same '
                                      'depth', key=self._local(name), shapes=(shape, (depth, '...')))
        else:
            depth = self._block_count([int(m.group(1)) for m in map(_BLOCK_RE.match, local) if m],
                                      lambda i: self._local(f'Transformer/encoderblock_{i}'))
        if depth == 0:
            raise self._error('no encoder blocks found', key=self._local('Transformer/encoderblock_0'))
        return depth

    def _heads(self, dim: int, depth: int, hints: Dict[str, Any]) -> int:
        """The head count, read off block 0's (width, heads, head_dim) query kernel and checked against every
        attention array the file stores: each block's and the MAP head's, kernels and biases."""
        query_key = '{p}{b}{attn}/query/kernel'.format(**self._fields(0))
        query = self._shape(query_key)[1 if self._scanned else 0:]
        if len(query) != 3 or query[0] != dim or query[1] * query[2] != dim:
            raise self._error('attention kernel must be (width, heads, head_dim) with heads * head_dim = width',
                              key=query_key, shapes=(query, (dim, 'H', 'hd')))
        num_heads = query[1]
        if hints.get('num_heads') not in (None, num_heads):
            raise self._error(f'num_heads={hints["num_heads"]} (given) contradicts the attention kernel '
                              f'({num_heads} heads)', key=query_key)
        self._check_dims(query_key, heads=num_heads)
        blocks = [0] if self._scanned else range(depth)
        attns = [('{b}{attn}/'.format(**self._fields(i)), 1 if self._scanned else 0) for i in blocks]
        if self._map is not None:
            attns.append((f'{self._map}MultiHeadDotProductAttention_0/', 0))
        for attn, lead in attns:
            self._check_attention(attn, lead, dim, num_heads, query_key)
        return num_heads

    def _check_attention(self, attn: str, lead: int, dim: int, heads: int, first: str) -> None:
        """Each array of one attention module has ``heads`` heads: flax's shapes record the count, and a file whose
        arrays disagree describes no network that one count reproduces."""
        head_dim = dim // heads
        want = {'query/kernel': (dim, heads, head_dim), 'key/kernel': (dim, heads, head_dim),
                'value/kernel': (dim, heads, head_dim), 'out/kernel': (heads, head_dim, dim),
                'query/bias': (heads, head_dim), 'key/bias': (heads, head_dim), 'value/bias': (heads, head_dim)}
        for part, shape in want.items():
            key = self._local(attn + part)
            if part.endswith('bias') and key not in self._store:
                continue
            got = self._shape(key)[lead:]
            if got != shape:
                stored = got[0 if part.startswith('out') or part.endswith('bias') else 1] if len(got) == len(shape) \
                    else None
                held = f'stores {stored} heads' if stored is not None else f'is not {len(shape)}-dimensional'
                raise self._error(f'this attention array {held}, where {first} has {heads} heads of {head_dim}: every '
                                  'attention in the file (each block\'s and the MAP head\'s) must have the same count',
                                  key=key, shapes=(got, shape))

    def _fields(self, block: Optional[int]) -> Dict[str, Any]:
        return dict(self.NAMES, p=self._prefix, b=_SCAN if self._scanned else f'Transformer/encoderblock_{block}/',
                    map=self._map or '')

    def _scan_index(self, block: Optional[int]) -> Optional[int]:
        return block if self._scanned else None

    def _build_plan(self, layout):
        plan = super()._build_plan(layout)
        if self._scanned:  # param-major: each stacked array is used by consecutive items, then released once
            plan.sort(key=lambda item: (item.sources, item.index) if item.index is not None else ((), 0))
        return plan


class BigVisionCheckpoint(FlaxCheckpoint):
    """big_vision ``models/vit.py``: a learned table is the top-level ``pos_embedding`` without a cls slot;
    without it the model uses the fixed 2D sin-cos table, which is never stored."""
    format = 'bigvision'
    NAMES = dict(ln1='LayerNorm_0', attn='MultiHeadDotProductAttention_0', ln2='LayerNorm_1', mlp='MlpBlock_0',
                 pos='pos_embedding')
    POS_CLS_SLOT = False
    DEFAULT_POS_EMBED = 'sincos'

    def _resample_rule(self, patch: Tuple[int, int], class_token: bool) -> str:
        """FlexiViT's own run-time rule for an archive in the published FlexiViT layout, else big_vision's zoom.

        The signature of ``proj/flexi``'s published files: the "underlying" 32x32 kernel, a 7x7 table
        without a cls slot, and [CLS] pooling. Its model PI-resizes the kernel and resizes the table with
        ``jax.image.resize`` at run time, which is what a conversion to another patch size must reproduce.
        """
        if patch == (32, 32) and self.grid == (7, 7) and class_token:
            self.notes.append("a FlexiViT archive (a 32x32 kernel, a 7x7 table, [CLS] pooling): its table and "
                              "kernel are resized with FlexiViT's own rule (jax.image.resize, PI-resize), as "
                              'its model does')
            return 'flexi'
        return 'bigvision'


class VitJaxCheckpoint(FlaxCheckpoint):
    """vit_jax / AugReg ``models_vit.py``: the table is added after the class token is prepended, so it
    carries a cls slot whenever ``cls`` exists."""
    format = 'vitjax'
    NAMES = dict(ln1='LayerNorm_0', attn='MultiHeadDotProductAttention_1', ln2='LayerNorm_2', mlp='MlpBlock_3',
                 pos='Transformer/posembed_input/pos_embedding')
    POS_CLS_SLOT = True


class BigVisionNaFlexCheckpoint(NaFlexReader, BigVisionCheckpoint):
    """big_vision's NaFlex tower (SigLIP 2 NaFlex): a Dense over P-P-C flattened patches and a (G_h, G_w, D)
    table, resized to each image's grid with FlexiViT's rule."""
    RULES = _under_prefix(_NAFLEX_TABLE)

    def _patch_kernel(self, key: str, kernel: Tuple[int, ...], hints: Dict[str, Any]) -> Tuple[int, int, int, int]:
        """(P, P, C, D) of the Dense kernel (P*P*C, D): C is not recorded, so 3 is assumed unless given."""
        flat, dim = kernel
        patch, in_chans = self._flat_patch(key, flat, kernel, hints, 'a NaFlex patch kernel is (P*P*C, width) and '
                                           'records neither P nor C; 3 channels and a square patch assumed')
        return patch, patch, in_chans, dim

    def _position(self, local: set, dim: int, patch: Tuple[int, int], class_token: bool, slot: bool,
                  hints: Dict[str, Any]) -> str:
        """The (G_h, G_w, D) table, resized per image with FlexiViT's rule; sets ``self.grid``."""
        self._check_grid_table(self._local('pos_embedding'), dim)
        self.notes.append("a big_vision NaFlex tower: its table is resized to each image's grid with "
                          'jax.image.scale_and_translate (bilinear, half-pixel, antialiased), the flexi rule')
        return 'learn'

    def _resample_rule(self, patch: Tuple[int, int], class_token: bool) -> str:
        return 'flexi'
