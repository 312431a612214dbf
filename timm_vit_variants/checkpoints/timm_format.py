"""timm-layout checkpoints: timm ``vit_*`` VisionTransformer weights and our own Hub folders.

Files: ``.pth``/``.pth.tar``/``.bin`` pickles (raw or wrapped in ``state_dict``/``model``/EMA
keys, as timm's training script writes them) and ``.safetensors``; or a Hub folder with
``config.json`` (``architecture`` + ``model_args``) next to its weights; timm ``naflexvit_*`` NaFlexVit
weights too (the SigLIP 2 NaFlex towers timm hosts). Tensor names are already ours, so every rule but
NaFlexVit's patch embedding and table is a copy; the work is knowing the architecture: a ``simple_vit_*`` folder's
config is read back into a ``SimpleViTConfig``; a timm ``vit_*`` one is rebuilt on the meta
device to read the settings no tensor records; a bare state dict needs the head count.
"""
import re
from typing import Any, Dict, Optional, Tuple

import timm
import torch
import torch.nn as nn

from ..config import DATA_CONFIG_KEYS, MODELS, SimpleViTConfig, activation_name, heads_for_width
from ..errors import ViTVariantsError
from .source import Rule, SourceCheckpoint, batched_grid_table, linear_patch_kernel

__all__ = ['TimmCheckpoint']

_BLOCK_RE = re.compile(r'^blocks\.(\d+)\.')
# create_model kwargs that load weights or configs from elsewhere: never taken from a file's config.
_LOADING_ARGS = frozenset({'pretrained', 'pretrained_cfg', 'pretrained_cfg_overlay', 'checkpoint_path', 'cache_dir'})
# model_args sizes and the limit each is checked against, before anything is built from them.
_CLAIMS = {'depth': 'depth', 'embed_dim': 'width', 'num_heads': 'heads', 'mlp_dim': 'mlp', 'num_classes': 'classes',
           'img_size': 'img_size', 'patch_size': 'img_size', 'rep_size': 'width'}
# timm VisionTransformer features without a SimpleVisionTransformer equivalent, by tensor name.
_UNSUPPORTED = (
    (re.compile(r'(^|\.)reg_token$'), 'register tokens (reg_tokens) are not supported'),
    (re.compile(r'\.ls[12]\.'), 'layer scale (init_values) is not supported'),
    (re.compile(r'\.[qk]_norm\.'), 'qk_norm is not supported'),
    (re.compile(r'^attn_pool\.pos_embed$'), 'an attention pool with its own position table is not supported'),
    (re.compile(r'\.(attn|mlp)\.norm\.'), 'scale_attn_norm / scale_mlp_norm are not supported'),
)

# timm NaFlexVit's NaFlexEmbeds under our names: a Linear over P-P-C patches, a (1, G_h, G_w, D) table.
_NAFLEX_RULES = {
    'patch_embed.proj.weight': Rule(('embeds.proj.weight',), linear_patch_kernel),
    'patch_embed.proj.bias': Rule(('embeds.proj.bias',)),
    'pos_embed': Rule(('embeds.pos_embed',), batched_grid_table),
    'cls_token': Rule(('embeds.cls_token',)),
}
_NAFLEX_KNOWN = {rule.sources[0] for rule in _NAFLEX_RULES.values()}
# NaFlexVit's per-image table resize -> our rule computing the same (antialiased, half-pixel, as timm calls it).
_NAFLEX_RESAMPLE = {'bilinear': 'flexi', 'bicubic': 'timm'}


class TimmCheckpoint(SourceCheckpoint):
    format = 'timm'
    _WHY = "not recorded by the checkpoint; timm's vit_* default"
    PREPROCESSING_DEFAULTS = {'mean': ((0.5, 0.5, 0.5), _WHY), 'std': ((0.5, 0.5, 0.5), _WHY),
                              'interpolation': ('bicubic', _WHY), 'crop_pct': (0.9, _WHY),
                              'crop_mode': ('center', _WHY)}

    def _rule(self, pattern: str, block: Optional[int]) -> Tuple[Rule, Optional[int]]:
        if getattr(self, '_naflex', False) and pattern in _NAFLEX_RULES:
            rule = _NAFLEX_RULES[pattern]
            return Rule(tuple(self._prefix + name for name in rule.sources), rule.fill), None
        key = pattern.replace('{i}', str(block))
        return Rule((self._prefix + key,)), None

    def data_config(self) -> Dict[str, Any]:
        """``config.json``'s ``pretrained_cfg`` preprocessing, else what a timm training checkpoint's args record."""
        timm_cfg = self.source_config.get('pretrained_cfg') or self._store.training_args()
        return {k: tuple(v) if isinstance(v, list) else v for k, v in timm_cfg.items()
                if k in DATA_CONFIG_KEYS and v is not None and (k != 'crop_pct' or isinstance(v, (int, float)))}

    # -- the architecture -------------------------------------------------------------------------------
    def _architecture(self) -> Tuple[Optional[str], Dict[str, Any]]:
        """(registered architecture, model_args) from config.json, else from the args a timm training
        checkpoint records (``args.model``, ``args.model_kwargs``); checked before anything is built."""
        if 'architecture' in self.source_config:
            arch = self.source_config['architecture']
            args = self.source_config.get('model_args') or {}
            where = dict(path=self._config_path)
        else:
            trained = self._store.training_args()
            if not trained.get('model'):
                return None, {}
            arch, args = trained['model'], trained.get('model_kwargs') or {}
            where = dict(path=self.path)
            self._config_path = self.path
        if not isinstance(arch, str) or ':' in arch or not timm.is_model(arch):
            raise ViTVariantsError(f'architecture {arch!r} is not a registered timm model name (a local folder never '
                                   'loads a model from the Hub or another path)', key='architecture', **where)
        if not isinstance(args, dict):
            raise ViTVariantsError('model_args must be a JSON object', key='model_args', **where)
        refused = sorted(set(args) & _LOADING_ARGS)
        if refused:
            raise ViTVariantsError(f'model_args may not name files or pretrained sources ({", ".join(refused)})',
                                   key=f'model_args.{refused[0]}', **where)
        for arg, limit in _CLAIMS.items():
            values = args.get(arg)
            for value in (values if isinstance(values, (list, tuple)) else [values] if values is not None else []):
                if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
                    raise ViTVariantsError(f'expected a number, got {value!r}', key=f'model_args.{arg}', **where)
                self.limits.check(limit, int(value), key=f'model_args.{arg}', **where)
        return arch, args

    def _foreign_facts(self, arch: str, args: Dict[str, Any]) -> Dict[str, Any]:
        """Settings no tensor records, read off a meta-device build of a timm ``vit_*`` architecture."""
        try:
            with torch.device('meta'):
                model = timm.create_model(arch, pretrained=False, **args)
        except Exception as e:  # unknown arguments; timm raises several types
            raise ViTVariantsError(f'cannot rebuild architecture {arch!r} from its config: {e}',
                                   path=self._config_path, key='architecture') from None
        blocks, embeds = getattr(model, 'blocks', None), getattr(model, 'embeds', None)
        if not isinstance(blocks, nn.Sequential) or not len(blocks) or \
                not (hasattr(model, 'patch_embed') or embeds is not None):
            raise ViTVariantsError(f'{arch!r} is not a plain Vision Transformer', path=self._config_path,
                                   key='architecture')
        if model.global_pool not in ('token', 'avg', 'map', ''):
            raise ViTVariantsError(f"global_pool={model.global_pool!r} is not supported (token, avg, map or '')",
                                   path=self._config_path, key='global_pool')
        try:
            act = activation_name(blocks[0].mlp.act)
        except (AttributeError, ViTVariantsError) as e:
            raise ViTVariantsError(str(e), path=self._config_path, key='architecture') from None
        facts = dict(num_heads=blocks[0].attn.num_heads, global_pool=model.global_pool, act_layer=act,
                     norm_eps=blocks[0].norm1.eps)
        if '_clip_' in arch:
            self._clip_note(arch, act)
        if embeds is not None:
            return dict(facts, **self._naflex_facts(embeds))
        return dict(facts, img_size=tuple(model.patch_embed.img_size),
                    pos_embed_cls_slot=not getattr(model, 'no_embed_class', False) and
                    getattr(model, 'cls_token', None) is not None,
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

    def _naflex_facts(self, embeds: nn.Module) -> Dict[str, Any]:
        """What a NaFlexVit's embedding records beyond its tensors; the options this family does not express refused."""
        interp = getattr(embeds, 'pos_embed_interp_mode', None)
        beyond = [(getattr(embeds, 'pos_embed_type', None) != 'learned', 'a position embedding other than one learned '
                   'table (factorised, none)'),
                  (interp not in _NAFLEX_RESAMPLE, f'a {interp!r} table resize (bilinear or bicubic are expressed)'),
                  (not getattr(embeds, 'pos_embed_antialias', True) or getattr(embeds, 'pos_embed_align_corners', False)
                   or getattr(embeds, 'pos_embed_use_grid_sample', False) or
                   getattr(embeds, 'pos_embed_ar_preserving', False), 'a table resize other than antialiased, '
                   'half-pixel and per axis'),
                  (getattr(embeds, 'norm_input', None) is not None or not isinstance(embeds.norm, nn.Identity),
                   'a norm in the patch embedding'),
                  (getattr(embeds, 'enable_patch_interpolator', False), 'its patch-size interpolator'),
                  (not getattr(embeds, 'is_linear', True) or not getattr(embeds, 'channels_last', True),
                   'a patch embedding other than a Linear over P-P-C patches')]
        for refused, what in beyond:
            if refused:
                raise ViTVariantsError(f'this NaFlexVit uses {what}, which SimpleVisionTransformer does not express',
                                       path=self._config_path, key='architecture')
        (gh, gw), (ph, pw) = embeds.pos_embed_grid_size, embeds.patch_size
        return dict(patch_size=(ph, pw), in_chans=embeds.in_chans, img_size=(gh * ph, gw * pw),
                    pos_embed_resample=_NAFLEX_RESAMPLE[interp])

    # -- inference --------------------------------------------------------------------------------------
    def _infer(self, hints: Dict[str, Any]) -> SimpleViTConfig:
        self._prefix = hints.get('prefix') or ''
        local = {n[len(self._prefix):] for n in self._candidates()}
        if not local:
            raise self._error('no tensors found' + (f' under prefix {self._prefix!r}' if self._prefix else ''))
        for name in sorted(local):
            for pattern, reason in _UNSUPPORTED:
                if pattern.search(name):
                    raise self._error(reason, key=self._prefix + name)
        self._naflex = 'embeds.proj.weight' in local
        foreign = sorted(n for n in local if n.startswith('embeds.') and n not in _NAFLEX_KNOWN)
        if self._naflex and foreign:
            raise self._error('a NaFlexVit embedding part this family does not express (register tokens, factorised '
                              'tables, a patch norm)', key=self._prefix + foreign[0])
        arch, args = self._architecture()
        names = self.source_config.get('label_names')
        if isinstance(names, list) and names:
            self.label_names = [str(n) for n in names]
        if arch is not None and arch in MODELS:
            return self._ours(arch, args, hints)
        return self._from_tensors(local, self._foreign_facts(arch, args) if arch else {}, hints)

    def _ours(self, arch: str, args: Dict[str, Any], hints: Dict[str, Any]) -> SimpleViTConfig:
        """A simple_vit folder: its config.json is the config (the entrypoint's defaults fill any gaps)."""
        args = dict(args)
        if 'num_classes' not in args and isinstance(self.source_config.get('num_classes'), int):
            args['num_classes'] = self.source_config['num_classes']
        args.update({k: hints[k] for k in ('act_layer', 'norm_eps') if hints.get(k)})
        known = set(SimpleViTConfig.__dataclass_fields__)
        unknown = sorted(set(args) - known)
        if unknown:
            raise ViTVariantsError(f'unknown model argument(s) {unknown} for {arch}', path=self._config_path,
                                   key=f'model_args.{unknown[0]}')
        try:
            config = MODELS[arch].config(**args)
        except ViTVariantsError as e:
            raise ViTVariantsError(e.reason, path=self._config_path, key=f'model_args.{e.key}') from None
        if hints.get('num_heads') not in (None, config.num_heads):
            raise ViTVariantsError(f'num_heads={hints["num_heads"]} (given) contradicts config.json ({config.num_heads} '
                                   'heads)', path=self._config_path, key='num_heads')
        if config.pos_table == 'learn':
            self.grid = config.grid_size
        return config

    def _from_tensors(self, local: set, facts: Dict[str, Any], hints: Dict[str, Any]) -> SimpleViTConfig:
        """A timm ``vit_*`` state dict (with ``facts`` from its config.json when there is one)."""
        p = self._prefix
        if self._naflex:
            dim, in_chans, patch_h, patch_w = self._naflex_kernel(facts, hints)
        else:
            kernel = self._shape(p + 'patch_embed.proj.weight')
            if len(kernel) != 4:
                raise self._error('patch embedding must be a (D, C, P, P) convolution',
                                  key=p + 'patch_embed.proj.weight', shapes=(kernel,))
            dim, in_chans, patch_h, patch_w = kernel
        self._check_dims(p + 'patch_embed.proj.weight', width=dim, img_size=max(patch_h, patch_w))
        class_token = ('embeds.cls_token' if self._naflex else 'cls_token') in local
        img_hint = hints.get('img_size') or facts.get('img_size')
        slot = False
        if self._naflex:
            pos_embed = self._naflex_table(dim)
        elif 'pos_embed' in local:
            slot = bool(self._table_grid(p + 'pos_embed', dim, (patch_h, patch_w), class_token=class_token,
                                         slot=facts.get('pos_embed_cls_slot'), img_size=img_hint))
            pos_embed = 'learn'
        else:
            pos_embed = hints.get('pos_embed') or facts.get('pos_embed') or 'sincos'
            if pos_embed == 'learn':
                raise self._error('missing key', key=p + 'pos_embed')
        depth = self._block_count([int(m.group(1)) for m in map(_BLOCK_RE.match, local) if m],
                                  lambda i: f'{p}blocks.{i}')
        if not depth:
            raise self._error('no transformer blocks found', key=p + 'blocks.0.attn.qkv.weight')
        mlp_dim = self._shape(p + 'blocks.0.mlp.fc1.weight')[0]
        rep_size = self._shape(p + 'pre_logits.fc.weight')[0] if 'pre_logits.fc.weight' in local else None
        num_classes = self._shape(p + 'head.weight')[0] if 'head.weight' in local else 0
        self._check_dims(p + 'blocks.0.mlp.fc1.weight', mlp=mlp_dim, classes=num_classes, width=rep_size)
        num_heads = self._heads(dim, facts, hints)
        if self.grid is not None:
            img_size: Any = (self.grid[0] * patch_h, self.grid[1] * patch_w)
        elif facts.get('img_size'):
            img_size = facts['img_size']
        else:
            img_size = self._unrecorded('img_size', hints, 224, 'the state dict has no position table, so its image '
                                        'size is not recorded')
        recorded = {k: facts[k] for k in ('global_pool', 'act_layer', 'norm_eps') if k in facts}
        if 'attn_pool.latent' in local:  # the tensors say it: timm's AttentionPoolLatent, SigLIP's MAP head
            recorded['global_pool'] = 'map'
            self._check_attn_pool(p, dim, mlp_dim)
        defaults = {'global_pool': 'token' if class_token else 'avg', 'act_layer': 'gelu', 'norm_eps': 1e-6}
        if self._naflex:  # NaFlexVitCfg's default table resize
            defaults['pos_embed_resample'] = 'timm'
            recorded.update({k: facts[k] for k in ('pos_embed_resample',) if k in facts})
        for name, default in defaults.items():  # timm vit_* use exact GELU and LayerNorm eps 1e-6
            if name not in recorded:
                recorded[name] = self._unrecorded(name, hints, default, "not recorded by a state dict; timm's "
                                                  f"{'NaFlexVit' if self._naflex else 'VisionTransformer'} default")
        return SimpleViTConfig(
            img_size=img_size,
            patch_size=(patch_h, patch_w),
            in_chans=in_chans,
            num_classes=num_classes,
            global_pool=recorded['global_pool'],
            embed_dim=dim,
            depth=depth,
            num_heads=num_heads,
            mlp_dim=mlp_dim,
            qkv_bias='blocks.0.attn.qkv.bias' in local,
            class_token=class_token,
            pos_embed=pos_embed,
            pos_embed_cls_slot=slot,
            pos_embed_resample=recorded['pos_embed_resample'] if self._naflex else 'timm',
            patch_embed='linear' if self._naflex else 'conv',
            rep_size=rep_size,
            act_layer=hints.get('act_layer') or recorded['act_layer'],
            norm_eps=hints.get('norm_eps') or recorded['norm_eps'],
            # timm's patch conv is VALID: a SigLIP tower's nominal size (384 at patch 14) relies on it
            grid_mode='crop' if recorded['global_pool'] == 'map' or self._naflex else None,
            pre_norm='norm_pre.weight' in local,
            patch_bias=('embeds.proj.bias' if self._naflex else 'patch_embed.proj.bias') in local,
            fc_norm='fc_norm.weight' in local,
            head_bias='head.bias' in local or 'head.weight' not in local,
        )

    def _naflex_kernel(self, facts: Dict[str, Any], hints: Dict[str, Any]) -> Tuple[int, int, int, int]:
        """(D, C, P, P) of a NaFlexVit's Linear (D, P*P*C): from its architecture, else 3 channels and a square patch
        assumed (a bare state dict records neither)."""
        key = self._prefix + 'embeds.proj.weight'
        weight = self._shape(key)
        if len(weight) != 2:
            raise self._error('a NaFlexVit patch embedding must be a (width, P*P*C) Linear', key=key, shapes=(weight,))
        dim, flat = weight
        if not facts.get('patch_size'):
            patch, in_chans = self._flat_patch(key, flat, weight, hints, "a NaFlexVit state dict's patch kernel is "
                                               '(width, P*P*C) and records neither P nor C; 3 channels and a square '
                                               'patch assumed')
            return dim, in_chans, patch, patch
        (patch_h, patch_w), in_chans = facts['patch_size'], facts['in_chans']
        if patch_h * patch_w * in_chans != flat:
            raise self._error(f'the patch kernel has {flat} inputs, not P*P*C = {patch_h}*{patch_w}*{in_chans} as '
                              'its architecture says', key=key, shapes=(weight, (dim, 'P*P*C')))
        return dim, in_chans, patch_h, patch_w

    def _naflex_table(self, dim: int) -> str:
        """A NaFlexVit's (1, G_h, G_w, D) table; sets ``self.grid``."""
        self._grid_table(self._prefix + 'embeds.pos_embed', dim, leading=(1,))
        return 'learn'

    def _check_attn_pool(self, p: str, dim: int, mlp_dim: int) -> None:
        """An attention pool this family's MAP head expresses: one latent query, the blocks' MLP width."""
        latent, fc1 = p + 'attn_pool.latent', p + 'attn_pool.mlp.fc1.weight'
        if self._shape(latent) != (1, 1, dim):
            raise self._error('only one latent query (1, 1, width) is supported', key=latent,
                              shapes=(self._shape(latent), (1, 1, dim)))
        if fc1 in self._store and self._shape(fc1)[0] != mlp_dim:
            raise self._error(f'the attention pool\'s MLP width {self._shape(fc1)[0]} differs from the blocks\' '
                              f'{mlp_dim}; the MAP head shares it', key=fc1)

    def _heads(self, dim: int, facts: Dict[str, Any], hints: Dict[str, Any]) -> int:
        """The head count: from the recorded architecture, else the caller's, else assumed where that is sound.

        A timm state dict alone does not record it. The standard ViT of the width (192: 3, 384: 6, ...)
        is assumed; ``assume_heads`` assumes timm's 64-wide heads for any other width; otherwise it is
        refused, since a wrong count gives another network that a check against the same count passes.
        """
        key = self._prefix + 'blocks.0.attn.qkv.weight'
        if facts.get('num_heads'):
            if hints.get('num_heads') not in (None, facts['num_heads']):
                raise ViTVariantsError(f"num_heads={hints['num_heads']} contradicts the recorded architecture "
                                       f"({facts['num_heads']} heads)", path=self._config_path, key='num_heads')
            heads = facts['num_heads']
        elif hints.get('num_heads'):
            heads = self._unrecorded('num_heads', hints, None, '')
        elif heads_for_width(dim) is not None:
            heads = self._unrecorded('num_heads', {}, heads_for_width(dim), f'the standard ViT of width {dim}')
        elif hints.get('assume_heads') and dim % 64 == 0:
            heads = self._unrecorded('num_heads', {}, dim // 64, "timm's 64-wide heads (asked for)")
        else:
            sixty_four = f'; 64-wide heads, as timm vit_* use, would be {dim // 64}' if dim % 64 == 0 else \
                ' (64-wide heads, as timm vit_* use, do not divide it)'
            raise self._error(
                f'a timm state dict does not record the number of attention heads, and width {dim} is not a '
                f'standard ViT width, so no count can be assumed safely: a wrong one would convert, and pass a '
                f'check against the same count. The head count is needed{sixty_four}', key=key, needs='num_heads')
        if dim % int(heads):
            raise self._error(f'width {dim} is not divisible by {heads} heads', key=key)
        return int(heads)
