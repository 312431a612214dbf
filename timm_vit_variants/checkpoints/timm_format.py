"""timm-layout checkpoints: timm ``vit_*`` VisionTransformer weights and our own Hub folders.

Files: ``.pth``/``.pth.tar``/``.bin`` pickles (raw or wrapped in ``state_dict``/``model``/EMA
keys, as timm's training script writes them) and ``.safetensors``; or a Hub folder with
``config.json`` (``architecture`` + ``model_args``) next to ``model.safetensors``.
Tensor names are already ours, so conversion is the identity; the work is inferring the
architecture and refusing timm features SimpleVisionTransformer cannot express.
"""
import math
import os
import re
from typing import Any, Dict, List, Optional, Tuple

import timm
import torch
import torch.nn as nn
from timm.layers import to_2tuple

from ..errors import ViTVariantsError
from ..limits import DEFAULT_LIMITS, Limits
from .files import read_json
from .source import PlanItem, SourceCheckpoint, as_is
from .torch_files import open_store

__all__ = ['TimmCheckpoint', 'activation_name']

_WEIGHT_FILES = ('model.safetensors', 'pytorch_model.bin', 'model.pth', 'pytorch_model.pth')
_BLOCK_RE = re.compile(r'^blocks\.(\d+)\.')
# create_model kwargs that load weights or configs from elsewhere: never taken from a file's config.
_LOADING_ARGS = frozenset({'pretrained', 'pretrained_cfg', 'pretrained_cfg_overlay', 'checkpoint_path', 'cache_dir'})
# timm VisionTransformer features without a SimpleVisionTransformer equivalent, by tensor name.
_UNSUPPORTED = (
    (re.compile(r'(^|\.)reg_token$'), 'register tokens (reg_tokens) are not supported'),
    (re.compile(r'\.ls[12]\.'), 'layer scale (init_values) is not supported'),
    (re.compile(r'\.[qk]_norm\.'), 'qk_norm is not supported'),
    (re.compile(r'^norm_pre\.'), 'a pre-norm (norm_pre, CLIP-style) is not supported'),
    (re.compile(r'^fc_norm\.'), 'fc_norm (a norm after pooling) is not supported: SimpleVisionTransformer '
                                'normalises every token before pooling (timm fc_norm=False)'),
    (re.compile(r'^attn_pool\.'), "attention pooling (global_pool='map') is not supported"),
    (re.compile(r'\.(attn|mlp)\.norm\.'), 'scale_attn_norm / scale_mlp_norm are not supported'),
)


def activation_name(act: nn.Module) -> str:
    """The ``act_layer`` string for an MLP activation module (exact vs tanh GELU matter numerically)."""
    name = type(act).__name__
    approximate = getattr(act, 'approximate', 'none')
    if name in ('GELUTanh',) or (name == 'GELU' and approximate == 'tanh'):
        return 'gelu_tanh'
    if name == 'GELU':
        return 'gelu'
    if name == 'QuickGELU':
        return 'quick_gelu'
    raise ValueError(f'unsupported MLP activation {name}')


def _locate(path: str, limits: Limits) -> Tuple[List[str], Dict[str, Any], Optional[str]]:
    """Weight file(s), timm config (if any) and the config's path for a file or Hub folder."""
    if os.path.isdir(path):
        config_path = os.path.join(path, 'config.json')
        for name in _WEIGHT_FILES:
            candidate = os.path.join(path, name)
            if os.path.isfile(candidate):
                weights = candidate
                break
        else:
            raise ViTVariantsError(f'no weight file found (looked for {", ".join(_WEIGHT_FILES)})', path=path)
    else:
        weights = path
        config_path = os.path.join(os.path.dirname(os.path.abspath(path)), 'config.json')
    config: Dict[str, Any] = {}
    if os.path.isfile(config_path):
        config = read_json(config_path, limits)
        if 'architecture' not in config:  # e.g. a transformers config: not a timm description of this file
            config, config_path = {}, None
    else:
        config_path = None
    return [weights], config, config_path


class TimmCheckpoint(SourceCheckpoint):
    format = 'timm'

    def __init__(self, path: str, **hints: Any) -> None:
        super().__init__(path, hints.get('limits', DEFAULT_LIMITS))
        files, self.source_config, self._config_path = _locate(self.path, self.limits)
        self._open(open_store(files, unwrap=True, use_ema=hints.get('use_ema', True)), hints)

    # -- architecture from config.json ------------------------------------------------------------
    def _config_arch(self) -> Dict[str, Any]:
        """Settings the tensors do not record, from the timm architecture named in config.json."""
        if not self.source_config:
            return {}
        arch = self.source_config['architecture']
        args = self.source_config.get('model_args') or {}
        if not isinstance(arch, str) or ':' in arch or not timm.is_model(arch):
            raise ViTVariantsError(
                f'architecture {arch!r} is not a registered timm model name (a local folder never loads a model '
                'from the Hub or another path)', path=self._config_path, key='architecture')
        if not isinstance(args, dict):
            raise ViTVariantsError('model_args must be a JSON object', path=self._config_path, key='model_args')
        refused = sorted(set(args) & _LOADING_ARGS)
        if refused:
            raise ViTVariantsError(f'model_args may not name files or pretrained sources ({", ".join(refused)})',
                                   path=self._config_path, key=f'model_args.{refused[0]}')
        self._check_config_dims(args)
        try:
            with torch.device('meta'):
                model = timm.create_model(arch, pretrained=False, **args)
        except Exception as e:  # unknown architecture or arguments; timm raises several types
            raise ViTVariantsError(f'cannot rebuild architecture {arch!r} from its config: {e}',
                                   path=self._config_path, key='architecture') from e
        blocks = getattr(model, 'blocks', None)
        if not isinstance(blocks, nn.Sequential) or not hasattr(model, 'patch_embed') or not len(blocks):
            raise ViTVariantsError(f'{arch!r} is not a plain Vision Transformer', path=self._config_path,
                                   key='architecture')
        try:
            act = activation_name(blocks[0].mlp.act)
        except (AttributeError, ValueError) as e:
            raise ViTVariantsError(str(e), path=self._config_path, key='architecture') from e
        out = dict(
            num_heads=blocks[0].attn.num_heads,
            global_pool=model.global_pool,
            act_layer=act,
            norm_eps=blocks[0].norm1.eps,
            img_size=tuple(model.patch_embed.img_size),
            class_token=getattr(model, 'cls_token', None) is not None,
        )
        if hasattr(model, 'pos_embed_type'):  # one of ours: its own settings are authoritative
            out.update(pos_embed=model.pos_embed_type, pos_embed_cls_slot=model.pos_embed_cls_slot,
                       pos_embed_resample=args.get('pos_embed_resample', 'bigvision'))
            if model.pos_resampler is not None:
                out['pos_embed_resample'] = model.pos_resampler.rule
        else:
            out.update(pos_embed='learn' if getattr(model, 'pos_embed', None) is not None else 'none',
                       pos_embed_cls_slot=not getattr(model, 'no_embed_class', False), pos_embed_resample='timm')
        if out['global_pool'] not in ('token', 'avg', ''):
            raise ViTVariantsError(f"global_pool={out['global_pool']!r} is not supported (token, avg or '')",
                                   path=self._config_path, key='global_pool')
        return out

    def _check_config_dims(self, args: Dict[str, Any]) -> None:
        """Bound the sizes config.json claims before timm builds anything from them."""
        claims = {'depth': 'depth', 'embed_dim': 'width', 'num_heads': 'heads', 'mlp_dim': 'mlp',
                  'num_classes': 'classes', 'img_size': 'img_size', 'patch_size': 'img_size'}
        for arg, limit in claims.items():
            values = args.get(arg)
            for value in (values if isinstance(values, (list, tuple)) else [values] if values is not None else []):
                if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
                    raise ViTVariantsError(f'expected a number, got {value!r}', path=self._config_path,
                                           key=f'model_args.{arg}')
                self.limits.check(limit, int(value), path=self._config_path, key=f'model_args.{arg}')
        img, patch = to_2tuple(args.get('img_size', 224)), to_2tuple(args.get('patch_size', 16))
        if len(img) == 2 and len(patch) == 2 and min(patch) >= 1:
            tokens = -(-int(img[0]) // int(patch[0])) * -(-int(img[1]) // int(patch[1]))
            self.limits.check('tokens', tokens, path=self._config_path, key='model_args.img_size')

    # -- planning ----------------------------------------------------------------------------------
    def _plan_conversion(self, hints: Dict[str, Any]) -> None:
        prefix = hints.get('prefix') or ''
        local = {name[len(prefix):]: name for name in self._store.names() if name.startswith(prefix)}
        if not local:
            raise self._error('no tensors found' + (f' under prefix {prefix!r}' if prefix else ''))
        for name in local:
            for pattern, reason in _UNSUPPORTED:
                if pattern.search(name):
                    raise self._error(reason, key=local[name])
        arch = self._config_arch()
        used = set()

        def shape_of(name: str) -> Tuple[int, ...]:
            if name not in local:
                raise self._error('missing key', key=prefix + name)
            return tuple(self._store.shape(local[name]))

        def plan(name: str, expected: Tuple[int, ...]) -> None:
            self._expect_shape(local.get(name, prefix + name), shape_of(name), expected)
            used.add(name)
            self._plan.append(PlanItem(name, tuple(expected), (local[name],), as_is))

        kernel = shape_of('patch_embed.proj.weight')
        if len(kernel) != 4:
            raise self._error('patch embedding must be a (D, C, P, P) convolution', key=local['patch_embed.proj.weight'],
                              shapes=(kernel,))
        dim, in_chans, patch_h, patch_w = kernel
        self._check_dims(local['patch_embed.proj.weight'], width=dim, img_size=max(patch_h, patch_w))
        plan('patch_embed.proj.weight', kernel)
        plan('patch_embed.proj.bias', (dim,))

        class_token = 'cls_token' in local
        if class_token:
            plan('cls_token', (1, 1, dim))
        img_hint = hints.get('img_size') or arch.get('img_size')
        if 'pos_embed' in local:
            pos = shape_of('pos_embed')
            if len(pos) != 3 or pos[0] != 1 or pos[2] != dim:
                raise self._error('position table must be (1, tokens, width)', key=local['pos_embed'],
                                  shapes=(pos, (1, -1, dim)))
            slot, self.grid = self._grid_and_slot(pos[1], class_token, (patch_h, patch_w), img_hint,
                                                  arch.get('pos_embed_cls_slot'), local['pos_embed'])
            plan('pos_embed', pos)
            pos_embed = 'learn'
        else:
            slot = False
            pos_embed = hints.get('pos_embed') or arch.get('pos_embed') or 'sincos'
            if pos_embed == 'learn':
                raise self._error('missing key', key=prefix + 'pos_embed')

        indices = sorted({int(m.group(1)) for m in map(_BLOCK_RE.match, local) if m})
        depth = len(indices)
        if depth == 0:
            raise self._error('no transformer blocks found', key=prefix + 'blocks.0.attn.qkv.weight')
        self._check_dims(f'{prefix}blocks.{indices[-1]}', depth=indices[-1] + 1)
        if indices != list(range(depth)):
            missing = sorted(set(range(max(indices) + 1)) - set(indices))
            raise self._error(f'inconsistent depth: blocks {indices} present, {missing} missing',
                              key=f'{prefix}blocks.{missing[0]}')
        mlp_dim = shape_of('blocks.0.mlp.fc1.weight')[0]
        self._check_dims(local['blocks.0.mlp.fc1.weight'], mlp=mlp_dim)
        qkv_bias = 'blocks.0.attn.qkv.bias' in local
        for i in range(depth):
            b = f'blocks.{i}.'
            for norm in ('norm1', 'norm2'):
                plan(f'{b}{norm}.weight', (dim,))
                plan(f'{b}{norm}.bias', (dim,))
            plan(f'{b}attn.qkv.weight', (3 * dim, dim))
            if qkv_bias:
                plan(f'{b}attn.qkv.bias', (3 * dim,))
            plan(f'{b}attn.proj.weight', (dim, dim))
            plan(f'{b}attn.proj.bias', (dim,))
            plan(f'{b}mlp.fc1.weight', (mlp_dim, dim))
            plan(f'{b}mlp.fc1.bias', (mlp_dim,))
            plan(f'{b}mlp.fc2.weight', (dim, mlp_dim))
            plan(f'{b}mlp.fc2.bias', (dim,))
        plan('norm.weight', (dim,))
        plan('norm.bias', (dim,))

        rep_size = None
        head_in = dim
        if 'pre_logits.fc.weight' in local:
            rep_size = shape_of('pre_logits.fc.weight')[0]
            self._check_dims(local['pre_logits.fc.weight'], width=rep_size)
            plan('pre_logits.fc.weight', (rep_size, dim))
            plan('pre_logits.fc.bias', (rep_size,))
            head_in = rep_size
        num_classes = 0
        if 'head.weight' in local:
            num_classes = shape_of('head.weight')[0]
            self._check_dims(local['head.weight'], classes=num_classes)
            plan('head.weight', (num_classes, head_in))
            plan('head.bias', (num_classes,))

        unknown = sorted(set(local) - used)
        if unknown:
            raise self._error(f'unknown key for a timm ViT ({len(unknown)} unexpected)', key=local[unknown[0]])

        num_heads = arch.get('num_heads') or hints.get('num_heads')
        if hints.get('num_heads') not in (None, num_heads):
            raise ViTVariantsError(f"num_heads={hints['num_heads']} contradicts the architecture in config.json "
                                   f'({num_heads} heads)', path=self._config_path, key='num_heads')
        if not num_heads:
            raise self._error(
                'a timm state dict does not record the number of attention heads; pass --num-heads '
                f'(timm vit_* models use 64-wide heads, i.e. --num-heads {max(dim // 64, 1)} here) '
                'or keep the config.json of a timm Hub folder next to the weights',
                key=local['blocks.0.attn.qkv.weight'])
        if dim % int(num_heads):
            raise self._error(f'width {dim} is not divisible by {num_heads} heads', key=local['blocks.0.attn.qkv.weight'])

        if self.grid is not None:
            img_size: Tuple[int, int] = (self.grid[0] * patch_h, self.grid[1] * patch_w)
        else:
            img_size = to_2tuple(img_hint or 224)
        self.model_args = dict(
            img_size=img_size[0] if img_size[0] == img_size[1] else tuple(img_size),
            patch_size=patch_h if patch_h == patch_w else (patch_h, patch_w),
            in_chans=in_chans,
            num_classes=num_classes,
            global_pool=arch.get('global_pool', 'token' if class_token else 'avg'),
            embed_dim=dim,
            depth=depth,
            num_heads=int(num_heads),
            mlp_dim=mlp_dim,
            qkv_bias=qkv_bias,
            class_token=class_token,
            pos_embed=pos_embed,
            pos_embed_cls_slot=slot,
            pos_embed_resample=arch.get('pos_embed_resample', 'timm'),
            rep_size=rep_size,
            act_layer=hints.get('act_layer') or arch.get('act_layer') or 'gelu',  # timm vit_* use exact GELU
            norm_eps=hints.get('norm_eps') or arch.get('norm_eps') or 1e-6,
        )

    def _grid_and_slot(
            self,
            tokens: int,
            class_token: bool,
            patch: Tuple[int, int],
            img_size: Any,
            config_slot: Optional[bool],
            key: str,
    ) -> Tuple[bool, Tuple[int, int]]:
        """Split a learned table into an optional cls slot and a patch grid."""
        self._check_dims(key, tokens=tokens)
        if img_size:
            img = to_2tuple(img_size)
            grid = (img[0] // patch[0], img[1] // patch[1])
            extra = tokens - grid[0] * grid[1]
            if extra not in ((0, 1) if class_token else (0,)):
                raise self._error(f'image size {img} gives a {grid[0]}x{grid[1]} grid, which does not fit a table '
                                  f'of {tokens} positions', key=key)
            return bool(extra), grid
        for extra in ((0, 1) if class_token else (0,)):
            side = math.isqrt(tokens - extra)
            if side > 0 and side * side == tokens - extra and (config_slot is None or config_slot == bool(extra)):
                return bool(extra), (side, side)
        raise self._error(f'cannot infer the grid of a {tokens}-position table; pass the source image size '
                          '(--img-size)', key=key)
