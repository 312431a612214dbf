"""timm-layout checkpoints: timm ``vit_*`` VisionTransformer weights and our own Hub folders.

Files: ``.pth``/``.pth.tar``/``.bin`` pickles (raw or wrapped in ``state_dict``/``model``/EMA
keys, as timm's training script writes them) and ``.safetensors``; or a Hub folder with
``config.json`` (``architecture`` + ``model_args``) next to its weights. Tensor names are already ours, so every
rule is a copy; the work is knowing the architecture: a ``simple_vit_*`` folder's config is read back into a
``SimpleViTConfig``; a timm ``vit_*`` one is rebuilt on the meta device (its parts checked by ``timm_parts``) to
read the settings no tensor records, and held against the tensors (``timm_build``); a bare state dict needs the head
count (``_heads``: the one head-count policy, ``SourceCheckpoint._head_count``). timm's other families read on this reader: ``timm_naflex`` (NaFlexVit), ``timm_eva`` (Eva), ``beit``.
"""
import os
import re
from typing import Any, Dict, Optional, Sequence, Tuple

import torch.nn as nn

from ..config import ARGUMENT_NAMES, SimpleViTConfig
from ..model_table import MODELS, heads_for_width
from ..errors import ViTVariantsError
from ..parts import Learned
from .preprocessing import (assumed_preprocessing, checked_input_size,
                            imagenet_preprocessing)
from .timm_blocks import PLAIN, block_settings, layout_of
from .timm_build import Built, TimmFolder
from .timm_parts import ATTN_NORM, MLP_NORM, QK_NORM, VIT_PARTS, refuse_unexpressed

__all__ = ['TimmCheckpoint']

_BLOCK_RE = re.compile(r'^blocks\.(\d+)\.')
# timm VisionTransformer features without a SimpleVisionTransformer equivalent, by tensor name.
_UNSUPPORTED = (
    (re.compile(r'^attn_pool\.pos_embed$'), 'an attention pool with its own position table is not supported'),
)

# DeiT v1 (facebookresearch/deit): its releases are ``{'model': state_dict}`` of timm's VisionTransformer, or of its
# DistilledVisionTransformer (a ``dist_token`` after [CLS], a table with 2 prefix slots, ``head_dist``).
_DEIT_WHY = ("a state dict does not record its architecture; told by DeiT's {'model': ...} wrapper and its file name "
             'or distillation token')
_DEIT_PREPROCESSING = imagenet_preprocessing(0.875, "not recorded by the checkpoint; DeiT's eval (main.py "
                                             '--eval-crop-ratio 0.875, bicubic, ImageNet mean and std)')
_DISTILLED_PREPROCESSING = imagenet_preprocessing(0.9, "not recorded by the checkpoint; timm's deit_* default")


class TimmCheckpoint(TimmFolder):
    """timm ``vit_*`` weights and our own folders: every tensor is ours under the same name (the default rule)."""
    format = 'timm'
    PREPROCESSING_DEFAULTS = assumed_preprocessing('bicubic', 0.9, 'center',
                                                   "not recorded by the checkpoint; timm's vit_* default")
    KIND = 'VisionTransformer'  # the timm class whose defaults a bare state dict is read with
    KERNEL, CLS, REG = 'patch_embed.proj.weight', 'cls_token', 'reg_token'
    # Settings a config.json's architecture records and a state dict does not, with timm's defaults for the latter.
    SETTINGS = {'global_pool': None, 'act_layer': 'gelu', 'norm_eps': 1e-6}
    _reg_slots = False  # whether the table has rows for the registers (``_position``)
    ALWAYS_CROPS = False  # whether the patch embedding drops the pixels the patch does not divide, whatever the pool
    _deit = False  # read as DeiT's own release format (set by ``_infer``)


    def _foreign_facts(self, arch: str, args: Dict[str, Any]) -> Dict[str, Any]:
        """Settings no tensor records, read off a meta-device build of a timm ``vit_*`` architecture."""
        model = self._meta_build(arch, args)
        refuse_unexpressed(model, VIT_PARTS, arch, self._config_path, frozenset({ATTN_NORM, MLP_NORM, QK_NORM}))
        blocks = model.blocks
        if not len(blocks):
            raise ViTVariantsError(f'{arch} with these model_args has no transformer blocks', path=self._config_path,
                                   key='architecture')
        if model.global_pool not in ('token', 'avg', 'map', ''):
            raise ViTVariantsError(f"global_pool={model.global_pool!r} is not supported (token, avg, map or '')",
                                   path=self._config_path, key='global_pool')
        try:
            block = block_settings(blocks[0])
        except ViTVariantsError as e:
            raise ViTVariantsError(str(e), path=self._config_path, key='architecture') from None
        facts = dict(global_pool=model.global_pool, layout=layout_of(blocks[0]),
                     pool_include_prefix=bool(getattr(model, 'pool_include_prefix', False)),
                     built=Built.of_vit(arch, args, model, block, self._classes is not None),
                     # final_norm=False (InternViT, RADIO): no norm after the blocks, before or after the pool
                     final_norm=not (isinstance(model.norm, nn.Identity) and isinstance(model.fc_norm, nn.Identity)),
                     **block)
        if '_clip_' in arch:
            self._clip_note(arch, block['act_layer'])
        return dict(facts, **self._embedding_facts(model, arch))

    def _embedding_facts(self, model: nn.Module, arch: str) -> Dict[str, Any]:
        """What the patch embedding and table of the build record beyond their tensors."""
        if getattr(model, 'embeds', None) is not None:
            raise self._error(f"{arch} is timm's NaFlexVit, whose weights sit under embeds.*, and these have none",
                              key=self._prefix + 'embeds.proj.weight')
        rows = not getattr(model, 'no_embed_class', False)  # timm's table then has a row for every prefix token
        return dict(img_size=tuple(model.patch_embed.img_size),
                    pos_embed_cls_slot=rows and getattr(model, 'cls_token', None) is not None,
                    pos_embed_reg_slots=rows and getattr(model, 'reg_token', None) is not None,
                    pos_embed='learn' if getattr(model, 'pos_embed', None) is not None else 'none')

    def _clip_note(self, arch: str, act: str) -> None:
        """What was detected for a timm CLIP tower, and how its activation was decided."""
        tag = str((self.source_config.get('pretrained_cfg') or {}).get('tag') or '')
        note = f'detected: a timm CLIP image tower ({arch}); QuickGELU: {act} read from the architecture name'
        if act != 'quick_gelu' and tag.startswith(('openai', 'metaclip', 'dfn')):
            note += (f"; its .{tag} weights were trained with QuickGELU (timm: 'natively QuickGELU, use quickgelu "
                     "model variant for original results'), so this computes what timm's GELU model does, not the "
                     'original; --act-layer quick_gelu gives the original')
        self.notes.append(note)

    # -- inference --------------------------------------------------------------------------------------
    def _infer(self) -> SimpleViTConfig:
        self._prefix = self.options.prefix or ''
        local = {n[len(self._prefix):] for n in self._candidates()}
        if not local:
            raise self._error('no tensors found' + (f' under prefix {self._prefix!r}' if self._prefix else ''))
        arch, args = self._architecture()
        # DeiT's own releases: no config or training args, the state dict under 'model', a DeiT file name or the
        # distillation token only DeiT trains (a DDP checkpoint under 'model' is timm's training format too)
        self._deit = arch is None and self._store.wrapped_in() == 'model' and (
            'dist_token' in local or os.path.basename(self._store.files[0]).lower().startswith('deit'))
        names = self.source_config.get('label_names')
        if isinstance(names, list) and names:
            self.label_names = [str(n) for n in names]
        if arch is not None and arch in MODELS:
            return self._ours(arch, args)
        # a foreign state dict's features we do not express (our own folder's model_args say which it has)
        for name in sorted(local):
            for pattern, reason in _UNSUPPORTED:
                if pattern.search(name):
                    raise self._error(reason, key=self._prefix + name)
        self._refuse_beyond(local)
        if arch is None and self._deit:
            self._unrecorded('architecture', None, "DeiT's DistilledVisionTransformer" if 'dist_token' in local else
                             "DeiT's VisionTransformer (timm's)", _DEIT_WHY)
        elif arch is None:
            self._unrecorded('architecture', None, f'{self.KIND}Distilled' if 'dist_token' in local else self.KIND,
                             "a state dict does not record its architecture; timm models whose RoPE stores no tensor "
                             "(EVA02, Perception Encoder) have the same keys")
        return self._from_tensors(local, self._foreign_facts(arch, args) if arch else {})

    def _preprocessing_defaults(self) -> Dict[str, Tuple[Any, str]]:
        """DeiT's eval transform for its own releases, timm's deit_* one for a distilled state dict, else timm's."""
        if self._deit:
            return _DEIT_PREPROCESSING
        return _DISTILLED_PREPROCESSING if self.config.tokens.dist else self.PREPROCESSING_DEFAULTS

    def _ours(self, arch: str, args: Dict[str, Any]) -> SimpleViTConfig:
        """A simple_vit folder: its config.json is the config (the entrypoint's defaults fill any gaps)."""
        args = dict(args)
        args.pop('dtype', None)  # the weights' dtype (read off the tensors), not an architectural field
        if 'num_classes' not in args and isinstance(self.source_config.get('num_classes'), int):
            args['num_classes'] = self.source_config['num_classes']
        args.update({k: getattr(self.options, k) for k in ('act_layer', 'norm_eps') if getattr(self.options, k)})
        unknown = sorted(set(args) - ARGUMENT_NAMES)
        if unknown:
            raise ViTVariantsError(f'unknown model argument(s) {unknown} for {arch}', path=self._config_path,
                                   key=f'model_args.{unknown[0]}')
        try:
            config = MODELS[arch].config(**args)
        except ViTVariantsError as e:
            raise ViTVariantsError(e.reason, path=self._config_path, key=f'model_args.{e.key}') from None
        if self.options.num_heads not in (None, config.num_heads):
            raise ViTVariantsError(f'num_heads={self.options.num_heads} (given) contradicts config.json '
                                   f'({config.num_heads} '
                                   'heads)', path=self._config_path, key='num_heads')
        head = self._prefix + 'head.weight'
        rows = self._store.shape(head)[0] if head in self._store else 0
        if rows != config.num_classes:  # else timm would build another head and load it fresh (random)
            raise ViTVariantsError(f'num_classes {config.num_classes} contradicts the weights: {head} holds {rows} '
                                   f'classes {self._store.shape(head) if rows else "(no head)"}',
                                   path=self._config_path, key='model_args.num_classes')
        checked_input_size((self.source_config.get('pretrained_cfg') or {}).get('input_size'), config.in_chans,
                           self._config_path, 'pretrained_cfg.input_size')
        if config.position(Learned) is not None:
            self.grid = config.grid_size
        return config

    def _refuse_beyond(self, local: set) -> None:
        """Refuse tensors of features this family does not express, beyond ``_UNSUPPORTED``."""

    def _from_tensors(self, local: set, facts: Dict[str, Any]) -> SimpleViTConfig:
        """A timm ``vit_*`` state dict (with ``facts`` from its config.json when there is one)."""
        p = self._prefix
        dim, in_chans, patch_h, patch_w = self._patch_kernel(facts)
        self._check_dims(p + self.KERNEL, width=dim, img_size=max(patch_h, patch_w))
        class_token = self.CLS in local
        dist_token = bool(self._token_count(p + 'dist_token', dim, 'a distillation token'))
        if dist_token and self._shape(p + 'dist_token')[1] != 1:
            raise self._error('DeiT has one distillation token', key=p + 'dist_token',
                              shapes=(self._shape(p + 'dist_token'), (1, 1, dim)))
        pos_embed, slot = self._position(local, dim, (patch_h, patch_w), class_token, facts)
        depth = self._block_count([int(m.group(1)) for m in map(_BLOCK_RE.match, local) if m],
                                  lambda i: f'{p}blocks.{i}')
        if not depth:
            raise self._error('no transformer blocks found', key=p + 'blocks.0.attn.qkv.weight')
        layout = facts.get('layout', PLAIN)
        block = lambda part, name: f'blocks.0.{layout.key(part, name)}'  # noqa: E731
        # the MLP's first layer: its own fc1, or the rows before q, k and v of a fused input projection
        fc1 = p + (block('attn', 'in_proj.weight') if layout.fused else block('mlp', 'fc1.weight'))
        fc1_width = mlp_dim = self._shape(fc1)[0] - (3 * dim if layout.fused else 0)
        if facts.get('mlp_layer') == 'swiglu_packed':  # timm's SwiGLUPacked: fc1 holds both halves
            mlp_dim //= 2
        rep_size = self._shape(p + 'pre_logits.fc.weight')[0] if 'pre_logits.fc.weight' in local else None
        num_classes = self._shape(p + 'head.weight')[0] if 'head.weight' in local else 0
        self._check_dims(fc1, mlp=mlp_dim, classes=num_classes, width=rep_size)
        num_heads = self._heads(dim, facts)
        declared = facts.get('img_size')
        # timm's patch conv is VALID: a declared size the patch does not divide (SigLIP's 384 at patch 14) is cropped
        # to the table's grid, and is the size timm's model takes
        cropped = bool(declared) and bool(declared[0] % patch_h or declared[1] % patch_w) and \
            self.grid in (None, (declared[0] // patch_h, declared[1] // patch_w))
        if self.grid is not None and not cropped:
            img_size: Any = (self.grid[0] * patch_h, self.grid[1] * patch_w)
        elif declared:
            img_size = declared
        else:
            img_size = self._unrecorded('img_size', self.options.img_size, 224, 'the state dict has no position table, '
                                        'so its image size is not recorded')
        settings = self._settings(local, facts, class_token, dim, mlp_dim)
        if self._deit:
            self.notes.append(f"read as facebookresearch/deit's own format ({{'model': ...}}, "
                              f"{'DistilledVisionTransformer' if dist_token else 'VisionTransformer'}); table resize "
                              "rule 'deit' (its main.py: bicubic, no antialias, square grids)")
            settings['pos_embed_resample'] = self._unrecorded(
                'pos_embed_resample', None, 'deit', "DeiT's main.py fine-tuning resize, told by its {'model': ...} "
                'wrapper')
        qkv_bias = block('attn', 'in_proj.bias' if layout.fused else 'qkv.bias') in local
        if 'built' in facts:
            facts['built'].check(self, dict(depth=depth, embed_dim=dim, mlp_dim=fc1_width, num_classes=num_classes,
                                            qkv_bias=qkv_bias, class_token=class_token), local)
        return SimpleViTConfig.of(
            img_size=img_size, patch_size=(patch_h, patch_w), in_chans=in_chans, num_classes=num_classes,
            global_pool=settings['global_pool'], embed_dim=dim, depth=depth, num_heads=num_heads, mlp_dim=mlp_dim,
            qkv_bias=qkv_bias, class_token=class_token, dist_token=dist_token,
            reg_tokens=self._shape(p + self.REG)[1] if self.REG in local else 0,
            init_values=facts.get('init_values') or (1.0 if 'blocks.0.ls1.gamma' in local else None),
            block_type=layout.block_type, attn_layer=facts.get('attn_layer', 'attention'),
            norm_layer=facts.get('norm_layer', 'layernorm'), qk_norm=block('attn', 'q_norm.weight') in local,
            mlp_layer=facts.get('mlp_layer', 'mlp'), pos_embed=pos_embed, pos_embed_cls_slot=slot,
            pos_embed_reg_slots=self._reg_slots,
            pos_embed_resample=settings.get('pos_embed_resample', 'timm'), patch_embed=self.PATCH_EMBED,
            pos_embed_ar_preserving=facts.get('pos_embed_ar_preserving', False),
            rep_size=rep_size, act_layer=self.options.act_layer or settings['act_layer'],
            norm_eps=self.options.norm_eps or settings['norm_eps'],
            grid_mode='crop' if settings['global_pool'] == 'map' or self.ALWAYS_CROPS or cropped else None,
            pre_norm='norm_pre.weight' in local,
            patch_bias=self.KERNEL[:-len('weight')] + 'bias' in local,
            fc_norm='fc_norm.weight' in local,
            final_norm=facts.get('final_norm', True),
            # timm's MAP head reads the patch tokens alone unless pool_include_prefix (its default: False)
            **(dict(attn_pool_include_prefix=facts.get('pool_include_prefix', False))
               if settings['global_pool'] == 'map' and (class_token or self.REG in local) else {}),
            # timm's Block scale_attn_norm / scale_mlp_norm (BEiT-3): a sub-LN inside attention and inside the MLP
            attn_norm=block('attn', 'norm.weight') in local,
            mlp_norm=layout.mlp is not None and block('mlp', 'norm.weight') in local,
            head_bias='head.bias' in local or 'head.weight' not in local,
        )

    def _patch_kernel(self, facts: Dict[str, Any]) -> Tuple[int, int, int, int]:
        """(D, C, P, P) of the patch conv."""
        key = self._prefix + self.KERNEL
        kernel = self._shape(key)
        if len(kernel) != 4:
            raise self._error('patch embedding must be a (D, C, P, P) convolution', key=key, shapes=(kernel,))
        return kernel

    def _position(self, local: set, dim: int, patch: Tuple[int, int], class_token: bool,
                  facts: Dict[str, Any]) -> Tuple[str, bool]:
        """(pos_embed, whether the table has a cls slot): a stored (1, tokens, D) table, else the one given or
        recorded, else sin-cos."""
        if 'pos_embed' not in local:
            pos_embed = self.options.pos_embed or facts.get('pos_embed') or 'sincos'
            if pos_embed == 'learn':
                raise self._error('missing key', key=self._prefix + 'pos_embed')
            return pos_embed, False
        dist = 'dist_token' in local
        regs = self._shape(self._prefix + 'reg_token')[1] if 'reg_token' in local else 0
        prefix = self._check_token_table(self._prefix + 'pos_embed', dim, patch, class_token=class_token,
                                         slot=facts.get('pos_embed_cls_slot'),
                                         img_size=self.options.img_size or facts.get('img_size'),
                                         dist_token=dist, registers=regs,
                                         reg_slots=facts.get('pos_embed_reg_slots'))
        # rows for the registers: timm's no_embed_class=False, where every prefix token has one
        self._reg_slots = regs > 0 and prefix == regs + (1 + int(dist) if class_token else 0)
        return 'learn', bool(prefix) and class_token

    def _settings(self, local: set, facts: Dict[str, Any], class_token: bool, dim: int,
                  mlp_dim: int) -> Dict[str, Any]:
        """``SETTINGS``: recorded by the architecture, said by the tensors (a MAP head; fc_norm and no final norm: average
        pooling), else timm's defaults."""
        recorded = {k: facts[k] for k in self.SETTINGS if k in facts}
        if 'attn_pool.latent' in local:  # the tensors say it: timm's AttentionPoolLatent, SigLIP's MAP head
            recorded['global_pool'] = 'map'
            self._check_attn_pool(self._prefix, dim, mlp_dim)
        elif 'global_pool' not in recorded and 'fc_norm.weight' in local and 'norm.weight' not in local:
            # timm builds fc_norm in place of the final norm for average pooling (use_fc_norm's default: 'avg', or
            # 'avgmax'/'max', which this family does not express and no published vit_* uses)
            recorded['global_pool'] = 'avg'
            self.notes.append("pooling 'avg': fc_norm present and no final norm (timm's VisionTransformer builds "
                              'fc_norm only for average pooling)')
        # timm builds every ViT with a norm_pre (its CLIP towers) with nn.LayerNorm's eps
        settings = dict(self.SETTINGS, norm_eps=1e-5) if 'norm_pre.weight' in local else self.SETTINGS
        for name, default in settings.items():
            if name not in recorded:
                default = default or ('token' if class_token else 'avg')
                recorded[name] = self._unrecorded(name, getattr(self.options, name, None), default,
                                                  "not recorded by a state dict; timm's "
                                                  f'{self.KIND} default')
        return recorded

    def _check_attn_pool(self, p: str, dim: int, mlp_dim: int) -> None:
        """An attention pool this family's MAP head expresses: one latent query, the blocks' MLP width."""
        latent, fc1 = p + 'attn_pool.latent', p + 'attn_pool.mlp.fc1.weight'
        if self._shape(latent) != (1, 1, dim):
            raise self._error('only one latent query (1, 1, width) is supported', key=latent,
                              shapes=(self._shape(latent), (1, 1, dim)))
        if fc1 in self._store and self._shape(fc1)[0] != mlp_dim:
            raise self._error(f'the attention pool\'s MLP width {self._shape(fc1)[0]} differs from the blocks\' '
                              f'{mlp_dim}; the MAP head shares it', key=fc1)

    def _heads(self, dim: int, facts: Dict[str, Any], assumed: Sequence[Tuple[Optional[int], str]] = ()) -> int:
        """The head count: the recorded architecture's (a given one must agree), else the one policy for a count the
        source does not record (``_head_count``): the caller's, else the first known of ``assumed`` and the standard
        ViT's of the width (192: 3, 384: 6, ...), else timm's 64-wide heads where ``assume_heads`` asks for them;
        otherwise it is refused, since a wrong count gives another network that a check against the same count
        passes."""
        key = self._prefix + 'blocks.0.attn.qkv.weight'
        recorded = facts.get('num_heads')
        if recorded:
            if self.options.num_heads not in (None, recorded):
                raise ViTVariantsError(f"num_heads={self.options.num_heads} contradicts the recorded architecture "
                                       f"({recorded} heads)", path=self._config_path, key='num_heads')
            if dim % int(recorded):
                raise self._error(f'width {dim} is not divisible by {recorded} heads', key=key)
            return int(recorded)
        sixty_four = f'; 64-wide heads, as timm vit_* use, would be {dim // 64}' if dim % 64 == 0 else \
            ' (64-wide heads, as timm vit_* use, do not divide it)'
        return self._head_count(
            dim, [*assumed, (heads_for_width(dim), f'the standard ViT of width {dim}')],
            f'a timm state dict does not record the number of attention heads, and width {dim} is not a '
            f'standard ViT width, so no count can be assumed safely: a wrong one would convert, and pass a '
            f'check against the same count. The head count is needed{sixty_four}', key=key)
