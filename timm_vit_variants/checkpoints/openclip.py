"""CLIP image towers in open_clip's layout: OpenCLIP Hub folders and files, and OpenAI's files (TorchScript archives
and state dicts).

Both keep the image tower under ``visual.``: ``conv1`` (no bias), ``class_embedding``, a (1 + N, width)
``positional_embedding``, ``ln_pre``, ``transformer.resblocks.{i}`` (``nn.MultiheadAttention``'s packed
``in_proj``, ``mlp.c_fc``/``c_proj``, LayerScale's ``ls_1``/``ls_2`` where ``vision_cfg.ls_init_value`` is set),
``ln_post`` and ``proj`` (pooled @ proj). The text tower and ``logit_scale`` are skipped. QuickGELU is not in the
weights: an OpenCLIP folder's ``model_cfg.quick_gelu`` decides it, and an OpenAI file always uses it. So does the head
count: ``vision_cfg.head_width`` (64 by default), or for an OpenAI file width // 64, as OpenAI's ``CLIP.__init__``
computes it. OpenAI's state dicts hold the same names as open_clip's, and are told apart by the scalars only they hold
(``is_openai_clip``). CLIPA (``no_ln_pre``, mean pooling, ``final_ln_after_pool``) and CoCa's attentional pooler are
read from the config and checked against the tensors. A table is resized as open_clip's ``resize_pos_embed`` does
(rule 'openclip'). Towers on a timm trunk (``visual.trunk.*``) are ``openclip_timm``'s.
"""
import re
from typing import Any, Dict, Optional, Set, Tuple

from ..clip_models import CLIP_TOWER, OPENAI_MEAN, OPENAI_STD
from ..config import SimpleViTConfig, pair
from ..errors import ViTVariantsError
from ..geometry import infer_grid
from .fills import _put, _rank, add_leading_axis, transpose
from .openclip_config import (OPEN_CLIP_CONFIG, OPENAI_SCALARS, VISUAL as _V, open_clip_data_config,
                              read_open_clip_config, skipped_note)
from .source import Rule, SourceCheckpoint
from .torchscript_store import TorchScriptStore

__all__ = ['OpenCLIPCheckpoint', 'OpenAICLIPCheckpoint', 'OPEN_CLIP_CONFIG', 'OPENAI_SCALARS', 'is_openai_clip']

_RESBLOCK = re.compile(r'^visual\.transformer\.resblocks\.(\d+)\.')
# vision_cfg keys this reader understands; any other one that is set is refused rather than ignored.
_VISION_KEYS = {'image_size', 'layers', 'width', 'head_width', 'patch_size', 'mlp_ratio', 'no_ln_pre', 'pool_type',
                'final_ln_after_pool', 'attentional_pool', 'attn_pooler_queries', 'attn_pooler_heads', 'output_tokens',
                'patch_dropout', 'emb_dropout', 'ls_init_value'}


def _as_token(dst: Any, src: Any) -> None:
    """CLIP's (width,) ``class_embedding`` as our (1, 1, width) ``cls_token``."""
    _put(dst, _rank(src, 1).reshape(1, 1, -1))


_B = 'visual.transformer.resblocks.{i}.'
_TABLE: Dict[str, Rule] = {
    'patch_embed.proj.weight': Rule((_V + 'conv1.weight',)),
    'cls_token': Rule((_V + 'class_embedding',), _as_token),
    'pos_embed': Rule((_V + 'positional_embedding',), add_leading_axis),
    'norm_pre.weight': Rule((_V + 'ln_pre.weight',)),
    'norm_pre.bias': Rule((_V + 'ln_pre.bias',)),
    'blocks.{i}.norm1.weight': Rule((_B + 'ln_1.weight',)),
    'blocks.{i}.norm1.bias': Rule((_B + 'ln_1.bias',)),
    'blocks.{i}.attn.qkv.weight': Rule((_B + 'attn.in_proj_weight',)),
    'blocks.{i}.attn.qkv.bias': Rule((_B + 'attn.in_proj_bias',)),
    'blocks.{i}.attn.proj.weight': Rule((_B + 'attn.out_proj.weight',)),
    'blocks.{i}.attn.proj.bias': Rule((_B + 'attn.out_proj.bias',)),
    'blocks.{i}.norm2.weight': Rule((_B + 'ln_2.weight',)),
    'blocks.{i}.norm2.bias': Rule((_B + 'ln_2.bias',)),
    'blocks.{i}.mlp.fc1.weight': Rule((_B + 'mlp.c_fc.weight',)),
    'blocks.{i}.mlp.fc1.bias': Rule((_B + 'mlp.c_fc.bias',)),
    'blocks.{i}.mlp.fc2.weight': Rule((_B + 'mlp.c_proj.weight',)),
    'blocks.{i}.mlp.fc2.bias': Rule((_B + 'mlp.c_proj.bias',)),
    'blocks.{i}.ls1.gamma': Rule((_B + 'ls_1.gamma',)),  # LayerScale (vision_cfg.ls_init_value)
    'blocks.{i}.ls2.gamma': Rule((_B + 'ls_2.gamma',)),
    'norm.weight': Rule((_V + 'ln_post.weight',)),
    'norm.bias': Rule((_V + 'ln_post.bias',)),
    'fc_norm.weight': Rule((_V + 'ln_post.weight',)),
    'fc_norm.bias': Rule((_V + 'ln_post.bias',)),
    'attn_pool.norm.weight': Rule((_V + 'ln_post.weight',)),
    'attn_pool.norm.bias': Rule((_V + 'ln_post.bias',)),
    'head.weight': Rule((_V + 'proj',), transpose),
}
for _name in ('query', 'ln_q.weight', 'ln_q.bias', 'ln_k.weight', 'ln_k.bias', 'attn.in_proj_weight', 'attn.in_proj_bias',
              'attn.q_proj_weight', 'attn.k_proj_weight', 'attn.v_proj_weight', 'attn.out_proj.weight',
              'attn.out_proj.bias'):
    _TABLE['attn_pool.' + _name] = Rule((_V + 'attn_pool.' + _name,))


class OpenCLIPCheckpoint(SourceCheckpoint):
    """An OpenCLIP Hub folder (``open_clip_config.json`` beside the weights) or a full-model file with ``visual.*``."""

    format = 'openclip'
    _prefix = _V
    _WHY = "not recorded by the source; open_clip's OpenAI preprocessing"
    PREPROCESSING_DEFAULTS = {'mean': (OPENAI_MEAN, _WHY), 'std': (OPENAI_STD, _WHY),
                              'interpolation': ('bicubic', _WHY), 'crop_pct': (1.0, _WHY),
                              'crop_mode': ('center', _WHY)}

    def _rule(self, pattern: str, block: Optional[int]) -> Tuple[Rule, Optional[int]]:
        rule = _TABLE[pattern]
        return Rule(tuple(t.format(i=block) for t in rule.sources), rule.fill), None

    # -- what the source records beside its tensors ----------------------------------------------------
    def _model_cfg(self) -> Tuple[Dict[str, Any], Optional[str]]:
        """(``model_cfg``, the file it came from) of the folder's ``open_clip_config.json``; ({}, None) without one."""
        self._open_clip_config, cfg, path = read_open_clip_config(self.path, self.limits)
        return cfg, path

    def _quick_gelu(self, model_cfg: Dict[str, Any], cfg_path: Optional[str], hints: Dict[str, Any]) -> str:
        if cfg_path is not None:
            quick = model_cfg.get('quick_gelu', False)
            if not isinstance(quick, bool):
                raise ViTVariantsError(f'expected true or false, got {quick!r}', path=cfg_path,
                                       key='model_cfg.quick_gelu')
            self._detected_act = f"model_cfg.quick_gelu is {str(quick).lower()} in {OPEN_CLIP_CONFIG}"
            return 'quick_gelu' if quick else 'gelu'
        if hints.get('act_layer'):  # given: by the caller, or by the CLIP tag the file was fetched as
            self._detected_act = f"not recorded (no open_clip_config.json): {hints['act_layer']} given"
        else:
            self._detected_act = 'not recorded (no open_clip_config.json): GELU assumed, as open_clip builds a ' \
                                 'model without quick_gelu; give act_layer to override'
        return self._unrecorded('act_layer', hints, 'gelu', 'no open_clip_config.json records quick_gelu; '
                                "open_clip's default (GELU)")

    def _heads(self, width: int, vision: Dict[str, Any], cfg_path: Optional[str], hints: Dict[str, Any]) -> int:
        key = 'model_cfg.vision_cfg.head_width'
        if cfg_path is not None:
            head_width = vision.get('head_width', 64)
            if isinstance(head_width, bool) or not isinstance(head_width, int) or head_width < 1 or width % head_width:
                raise ViTVariantsError(f'head_width {head_width!r} does not divide the width {width} of the tensors',
                                       path=cfg_path, key=key)
            if hints.get('num_heads') not in (None, width // head_width):
                raise ViTVariantsError(f"num_heads={hints['num_heads']} (given) contradicts head_width {head_width}",
                                       path=cfg_path, key=key)
            return width // head_width
        return self._width64_heads(width, hints, 'no open_clip_config.json records head_width; '
                                                 "open_clip's default 64-wide heads")

    def _width64_heads(self, width: int, hints: Dict[str, Any], why: str) -> int:
        if width % 64 and not hints.get('num_heads'):
            raise self._error(f'width {width} is not a multiple of 64, so the head count cannot be assumed',
                              key=_V + 'conv1.weight', needs='num_heads')
        heads = self._unrecorded('num_heads', hints, width // 64 or 1, why)
        if width % int(heads):
            raise self._error(f'width {width} is not divisible by {heads} heads', key=_V + 'conv1.weight')
        return int(heads)

    def _skipped_note(self) -> None:
        note = skipped_note(self._store.names())
        if note:
            self.notes.append(note)

    # -- inference --------------------------------------------------------------------------------------
    def _infer(self, hints: Dict[str, Any]) -> SimpleViTConfig:
        model_cfg, cfg_path = self._model_cfg()
        vision = model_cfg.get('vision_cfg', {})
        local = self._candidates()
        conv = _V + 'conv1.weight'
        if conv not in local:
            raise self._error('no CLIP image tower among the tensors', key=conv)
        kernel = self._shape(conv)
        if len(kernel) != 4:
            raise self._error('the patch embedding must be a (width, C, P, P) convolution', key=conv, shapes=(kernel,))
        width, in_chans, patch_h, patch_w = kernel
        self._check_dims(conv, width=width, img_size=max(patch_h, patch_w))
        depth = self._depth(local, _RESBLOCK, lambda i: f'{_B.format(i=i)}attn.in_proj_weight',
                            _B.format(i=0) + 'attn.in_proj_weight')
        mlp_dim = self._shape(_B.format(i=0) + 'mlp.c_fc.weight')[0]
        self._check_dims(_B.format(i=0) + 'mlp.c_fc.weight', mlp=mlp_dim)
        coca = _V + 'attn_pool.query' in local
        pool_width = self._shape(_V + 'attn_pool.query')[1] if coca and len(self._shape(_V + 'attn_pool.query')) == 2 \
            else width
        proj = _V + 'proj'
        proj_shape = self._shape(proj)
        if len(proj_shape) != 2 or proj_shape[0] != pool_width:
            raise self._error(f'the projection must be (pooled width {pool_width}, embedding width), used as '
                              'pooled @ proj', key=proj, shapes=(proj_shape, (pool_width, 'embed_dim')))
        embed_dim = proj_shape[1]
        self._check_dims(proj, classes=embed_dim)
        act = self._activation(model_cfg, cfg_path, hints)
        heads = self._tower_heads(width, vision, cfg_path, hints)
        grid_img = self._image_size(vision, cfg_path)
        table = _V + 'positional_embedding'
        pos_shape = self._shape(table)
        if len(pos_shape) != 2 or pos_shape[1] != width:
            raise self._error('the position table must be (1 + tokens, width)', key=table,
                              shapes=(pos_shape, ('1+N', width)))
        self._check_dims(table, tokens=pos_shape[0])
        try:  # the stated image size splits a non-square table; one that does not fit is named by _agree
            self.grid, _ = infer_grid(pos_shape[0], (patch_h, patch_w), img_size=grid_img, class_token=True,
                                      slot=True, path=self.path, key=table)
        except ViTVariantsError:
            self.grid, _ = infer_grid(pos_shape[0], (patch_h, patch_w), class_token=True, slot=True, path=self.path,
                                      key=table)
        settings = self._pooling(vision, cfg_path, local, coca, pool_width)
        settings['init_values'] = self._layer_scale(vision, cfg_path, local)
        expected = {'width': width, 'layers': depth, 'patch_size': patch_h if patch_h == patch_w else None,
                    'mlp_ratio': mlp_dim / width}
        self._agree(vision, cfg_path, expected, model_cfg, embed_dim)
        self._skipped_note()
        self.notes.append(f'detected: {self._what()}; QuickGELU: {self._detected_act}; the table is resized with '
                          "open_clip's rule (bicubic, antialias, [CLS] row kept), also where open_clip skips it "
                          '(the same token count at another grid)')
        return SimpleViTConfig.of(**dict(
            CLIP_TOWER, img_size=(self.grid[0] * patch_h, self.grid[1] * patch_w), patch_size=(patch_h, patch_w),
            in_chans=in_chans, num_classes=embed_dim, embed_dim=width, depth=depth, num_heads=heads, mlp_dim=mlp_dim,
            act_layer=act, **settings))

    def _what(self) -> str:
        where = OPEN_CLIP_CONFIG if getattr(self, '_open_clip_config', None) else 'no config'
        return f'an OpenCLIP image tower (visual.* keys, {where})'

    def _activation(self, model_cfg: Dict[str, Any], cfg_path: Optional[str], hints: Dict[str, Any]) -> str:
        act = self._quick_gelu(model_cfg, cfg_path, hints)
        return hints.get('act_layer') or act

    def _tower_heads(self, width: int, vision: Dict[str, Any], cfg_path: Optional[str], hints: Dict[str, Any]) -> int:
        return self._heads(width, vision, cfg_path, hints)

    def _image_size(self, vision: Dict[str, Any], cfg_path: Optional[str]) -> Any:
        if 'image_size' not in vision:
            return None
        try:
            return pair(vision['image_size'], 'image_size')
        except ViTVariantsError as e:
            raise ViTVariantsError(e.reason, path=cfg_path, key='model_cfg.vision_cfg.image_size') from None

    def _layer_scale(self, vision: Dict[str, Any], cfg_path: Optional[str], local: Set[str]) -> Optional[float]:
        """LayerScale's initialiser (the stored gammas load over it) where the blocks have one, as
        ``vision_cfg.ls_init_value`` says; a config that disagrees with the tensors is refused."""
        has_ls = _B.format(i=0) + 'ls_1.gamma' in local
        stated = vision.get('ls_init_value')
        if cfg_path is not None and (stated is not None) != has_ls:
            raise ViTVariantsError(f"ls_init_value={stated!r} disagrees with the tensors ({'a' if has_ls else 'no'} "
                                   'ls_1.gamma)', path=cfg_path, key='model_cfg.vision_cfg.ls_init_value')
        if stated is not None and (isinstance(stated, bool) or not isinstance(stated, (int, float))):
            raise ViTVariantsError(f'expected a number, got {stated!r}', path=cfg_path,
                                   key='model_cfg.vision_cfg.ls_init_value')
        return (float(stated) if stated is not None else 1.0) if has_ls else None

    def _pooling(self, vision: Dict[str, Any], cfg_path: Optional[str], local: Set[str], coca: bool,
                 pool_width: int) -> Dict[str, Any]:
        """Pre-norm, pooling and pooler settings: from vision_cfg, checked against the tensors."""
        def key(name: str) -> str:
            return f'model_cfg.vision_cfg.{name}'

        def refuse(name: str, why: str) -> ViTVariantsError:
            return ViTVariantsError(f'{name}={vision.get(name)!r} {why}', path=cfg_path, key=key(name))

        unknown = sorted(k for k in vision if k not in _VISION_KEYS and vision[k] not in (None, False, 0, {}, ''))
        if unknown:
            raise refuse(unknown[0], 'is not supported by this reader (an image tower of another kind)')
        has_pre = _V + 'ln_pre.weight' in local
        if cfg_path is not None and bool(vision.get('no_ln_pre', False)) == has_pre:
            raise refuse('no_ln_pre', f"disagrees with the tensors ({'an' if has_pre else 'no'} ln_pre)")
        pool_type = vision.get('pool_type', 'tok')
        if pool_type not in ('tok', 'avg'):
            raise refuse('pool_type', "is not supported ('tok' or 'avg')")
        attentional = vision.get('attentional_pool', False)
        if attentional not in (True, False):
            raise refuse('attentional_pool', 'is not supported (only CoCa\'s single pooler, true)')
        if cfg_path is not None and attentional != coca:
            raise refuse('attentional_pool', f"disagrees with the tensors ({'an' if coca else 'no'} attn_pool.query)")
        final_ln = bool(vision.get('final_ln_after_pool', False))
        if cfg_path is None and not has_pre and not coca:
            # no config: a tower without ln_pre is CLIPA's, and every CLIPA config also pools by mean, norm after
            why = "no open_clip_config.json; a tower without ln_pre is CLIPA's (mean pooling, final_ln_after_pool)"
            self.assumed.update(global_pool=('avg', why), fc_norm=(True, why))
            pool_type, final_ln = 'avg', True
        if not coca:
            return dict(pre_norm=has_pre, global_pool='avg' if pool_type == 'avg' else 'token', fc_norm=final_ln)
        if pool_type != 'tok' or final_ln:
            raise refuse('pool_type', 'with an attentional pooler is supported only as tok, without final_ln_after_pool')
        query = self._shape(_V + 'attn_pool.query')
        queries = vision.get('attn_pooler_queries', 256)
        if cfg_path is not None and queries != query[0]:
            raise refuse('attn_pooler_queries', f'disagrees with the tensors (attn_pool.query is {query})')
        self._check_dims(_V + 'attn_pool.query', tokens=query[0], width=pool_width)
        heads = vision.get('attn_pooler_heads', 8)
        if isinstance(heads, bool) or not isinstance(heads, int) or heads < 1 or pool_width % heads:
            raise refuse('attn_pooler_heads', f'does not divide the pooler width {pool_width}')
        return dict(pre_norm=has_pre, global_pool='coca', attn_pool_queries=query[0], attn_pool_heads=heads,
                    attn_pool_dim=pool_width)

    def _agree(self, vision: Dict[str, Any], cfg_path: Optional[str], expected: Dict[str, Any],
               model_cfg: Dict[str, Any], embed_dim: int) -> None:
        """Each size the config states must be the tensors' (one error naming the key otherwise)."""
        if cfg_path is None:
            return
        for name, value in expected.items():
            stated = vision.get(name)
            if stated is None or value is None:
                continue
            if isinstance(stated, (list, tuple)) and name == 'patch_size':
                stated = stated[0] if len(set(stated)) == 1 else stated
            if stated != value and not (name == 'mlp_ratio' and isinstance(stated, (int, float))
                                        and abs(stated * expected['width'] - value * expected['width']) < 1):
                raise ViTVariantsError(f'vision_cfg says {stated!r}, the tensors {value!r}', path=cfg_path,
                                       key=f'model_cfg.vision_cfg.{name}')
        if model_cfg.get('embed_dim') not in (None, embed_dim):
            raise ViTVariantsError(f"embed_dim {model_cfg['embed_dim']!r} disagrees with visual.proj's width "
                                   f'{embed_dim}', path=cfg_path, key='model_cfg.embed_dim')
        image = self._image_size(vision, cfg_path)
        if image is not None and self.grid is not None:
            patch = (self._shape(_V + 'conv1.weight')[2], self._shape(_V + 'conv1.weight')[3])
            if (image[0] // patch[0], image[1] // patch[1]) != self.grid:
                raise ViTVariantsError(f'image_size {vision["image_size"]!r} gives a {image[0] // patch[0]}x'
                                       f'{image[1] // patch[1]} grid; the position table holds {self.grid[0]}x'
                                       f'{self.grid[1]}', path=cfg_path, key='model_cfg.vision_cfg.image_size')

    def data_config(self) -> Dict[str, Any]:
        """``open_clip_config.json``'s ``preprocess_cfg`` as timm ``pretrained_cfg`` fields."""
        return open_clip_data_config(getattr(self, '_open_clip_config', None) or {})


def is_openai_clip(names: Set[str]) -> bool:
    """Whether a store's names are OpenAI CLIP's state dict: its image tower beside the three scalars only OpenAI's
    files hold (open_clip's own state dicts have the same tensor names but none of the scalars)."""
    return _V + 'conv1.weight' in names and all(n in names for n in OPENAI_SCALARS)


class OpenAICLIPCheckpoint(OpenCLIPCheckpoint):
    """OpenAI's CLIP: its released TorchScript ``.pt`` archive, read as data (``TorchScriptStore``), never run, or
    its state dict (``.pt``/``.pth``/``.bin``: ``visual.*``, the text tower and the 0-d ``input_resolution``,
    ``context_length`` and ``vocab_size`` of the archive's ``state_dict()``).

    The format fixes what it does not store: every model is QuickGELU (OpenAI's ``clip/model.py``
    ``ResidualAttentionBlock``; open_clip's ``build_model_from_openai_state_dict`` builds it with ``quick_gelu=True``),
    with width // 64 heads (``CLIP.__init__``: ``vision_heads = vision_width // 64``; open_clip keeps
    ``head_width=64``) on a square grid of ``input_resolution`` // patch (``build_model`` takes the grid as
    ``round(sqrt(tokens - 1))``). A hint that contradicts them is refused: the file would not be OpenAI's model.
    """

    format = 'openai'
    _WHY = "not recorded by the file; OpenAI CLIP's preprocessing (clip.load's transform)"
    PREPROCESSING_DEFAULTS = {'mean': (OPENAI_MEAN, _WHY), 'std': (OPENAI_STD, _WHY),
                              'interpolation': ('bicubic', _WHY), 'crop_pct': (1.0, _WHY),
                              'crop_mode': ('center', _WHY)}

    def _infer(self, hints: Dict[str, Any]) -> SimpleViTConfig:
        names = set(self._store.names())
        if not isinstance(self._store, TorchScriptStore) and not is_openai_clip(names):
            raise self._error('neither a TorchScript archive nor a state dict with OpenAI\'s scalars '
                              f"({', '.join(OPENAI_SCALARS)})", key=OPENAI_SCALARS[0])
        self._scalars = {n: self._scalar(n) for n in OPENAI_SCALARS if n in names}
        config = super()._infer(hints)
        patch = config.patch_size[0]
        if self.grid[0] != self.grid[1] or config.patch_size[0] != config.patch_size[1]:
            raise self._error(f'a {self.grid[0]}x{self.grid[1]} grid of {config.patch_size} patches: OpenAI\'s CLIP '
                              'has square patches on a square grid', key=_V + 'positional_embedding')
        resolution = self._scalars.get('input_resolution')
        if resolution is not None and resolution != patch * self.grid[0]:
            raise self._error(f'input_resolution is {resolution}, but the position table holds a {self.grid[0]}x'
                              f'{self.grid[1]} grid of {patch}-pixel patches ({patch * self.grid[0]} pixels)',
                              key='input_resolution')
        return config

    def _scalar(self, name: str) -> int:
        """One of OpenAI's 0-d integer entries (a few bytes: its value is read here)."""
        shape, dtype = self._store.shape(name), self._store.dtype(name)
        if shape != () or not dtype.startswith(('int', 'uint')):
            raise self._error(f'expected a 0-d integer, as OpenAI\'s files hold it, got {dtype} of shape {shape}',
                              key=name)
        value = int(self._store.tensor(name).item())
        if value < 1:
            raise self._error(f'{name} is {value}; it must be positive', key=name)
        if name == 'input_resolution':
            self._check_dims(name, img_size=value)
        return value

    def _model_cfg(self) -> Tuple[Dict[str, Any], Optional[str]]:
        return {}, None

    def _image_size(self, vision: Dict[str, Any], cfg_path: Optional[str]) -> Any:
        resolution = self._scalars.get('input_resolution')
        return None if resolution is None else (resolution, resolution)

    def _activation(self, model_cfg: Dict[str, Any], cfg_path: Optional[str], hints: Dict[str, Any]) -> str:
        if hints.get('act_layer') not in (None, 'quick_gelu'):
            raise self._error(f"act_layer={hints['act_layer']!r} (given) contradicts the format: every OpenAI CLIP "
                              'model is QuickGELU', key=_B.format(i=0) + 'mlp.c_fc.weight')
        self._detected_act = "OpenAI format: always QuickGELU (OpenAI's clip/model.py; open_clip's " \
                             'build_model_from_openai_state_dict, quick_gelu=True)'
        return 'quick_gelu'

    def _tower_heads(self, width: int, vision: Dict[str, Any], cfg_path: Optional[str], hints: Dict[str, Any]) -> int:
        heads = width // 64
        key = _V + 'conv1.weight'
        if not heads or width % heads:
            raise self._error(f'width {width}: OpenAI\'s rule of width // 64 heads gives {heads}, which cannot split '
                              'it', key=key)
        if hints.get('num_heads') not in (None, heads):
            raise self._error(f"num_heads={hints['num_heads']} (given) contradicts the format: OpenAI's CLIP has "
                              f'width // 64 = {heads} heads', key=key)
        self.notes.append(f"heads: OpenAI format: width // 64 = {heads} (OpenAI's clip/model.py CLIP.__init__, "
                          "vision_heads = vision_width // 64; open_clip's build_model_from_openai_state_dict, "
                          'head_width 64)')
        return heads

    def _what(self) -> str:
        if isinstance(self._store, TorchScriptStore):
            return 'an OpenAI CLIP TorchScript archive (read as data: fp16 weights upcast, scalars dropped)'
        return "an OpenAI CLIP state dict (visual.* beside OpenAI's scalars " + ', '.join(OPENAI_SCALARS) + \
            '; fp16 weights upcast, scalars dropped)'

    def data_config(self) -> Dict[str, Any]:
        return {}
