"""timm-layout checkpoints: timm ``vit_*`` VisionTransformer weights and our own Hub folders.

Files: ``.pth``/``.pth.tar``/``.bin`` pickles (raw or wrapped in ``state_dict``/``model``/EMA
keys, as timm's training script writes them) and ``.safetensors``; or a Hub folder with
``config.json`` (``architecture`` + ``model_args``) next to its weights. Tensor names are already ours, so every
rule is a copy; the work is knowing the architecture: a ``simple_vit_*`` folder's config is read back into a
``SimpleViTConfig``; a timm ``vit_*`` one is rebuilt on the meta device (its parts checked by ``timm_parts``) to
read the settings no tensor records, and held against the tensors (``Built``); a bare state dict needs the head
count. timm's other families read on this reader: ``timm_naflex`` (NaFlexVit), ``timm_eva`` (Eva), ``beit``.
"""
import math
import os
import re
from typing import Any, Dict, Optional, Tuple

import timm
import torch
import torch.nn as nn

from ..config import (ARGUMENT_NAMES, DATA_CONFIG_KEYS, MODELS, PREPROCESSING_KEYS, SimpleViTConfig, activation_name,
                      heads_for_width)
from ..errors import ViTVariantsError
from ..parts import Learned
from .preprocessing import (assumed_preprocessing, checked_input_size, checked_preprocessing,
                            imagenet_preprocessing)
from .source import SourceCheckpoint
from .timm_parts import VIT_PARTS, refuse_unexpressed

__all__ = ['TimmCheckpoint', 'Built']

_BLOCK_RE = re.compile(r'^blocks\.(\d+)\.')
# create_model kwargs that load weights or configs from elsewhere: never taken from a file's config.
_LOADING_ARGS = frozenset({'pretrained', 'pretrained_cfg', 'pretrained_cfg_overlay', 'checkpoint_path', 'cache_dir'})
# model_args sizes and the limit each is checked against, before anything is built from them.
_CLAIMS = {'depth': 'depth', 'embed_dim': 'width', 'num_heads': 'heads', 'mlp_dim': 'mlp', 'num_classes': 'classes',
           'img_size': 'img_size', 'patch_size': 'img_size', 'rep_size': 'width'}
# timm VisionTransformer features without a SimpleVisionTransformer equivalent, by tensor name.
_UNSUPPORTED = (
    (re.compile(r'\.[qk]_norm\.'), 'qk_norm is not supported'),
    (re.compile(r'^attn_pool\.pos_embed$'), 'an attention pool with its own position table is not supported'),
    (re.compile(r'\.(attn|mlp)\.norm\.'), 'scale_attn_norm / scale_mlp_norm are not supported'),
)

# DeiT v1 (facebookresearch/deit): its releases are ``{'model': state_dict}`` of timm's VisionTransformer, or of its
# DistilledVisionTransformer (a ``dist_token`` after [CLS], a table with 2 prefix slots, ``head_dist``).
_DEIT_WHY = ("a state dict does not record its architecture; told by DeiT's {'model': ...} wrapper and its file name "
             'or distillation token')
_DEIT_PREPROCESSING = imagenet_preprocessing(0.875, "not recorded by the checkpoint; DeiT's eval (main.py "
                                             '--eval-crop-ratio 0.875, bicubic, ImageNet mean and std)')
_DISTILLED_PREPROCESSING = imagenet_preprocessing(0.9, "not recorded by the checkpoint; timm's deit_* default")


def _block_facts(block: nn.Module) -> Dict[str, Any]:
    """LayerScale and a packed SwiGLU (timm's ``init_values``, ``SwiGLUPacked``: a ``GluMlp``, which ``timm_parts``
    lets through only in that form), read off a built block."""
    facts: Dict[str, Any] = {}
    if hasattr(block.ls1, 'gamma'):
        facts['init_values'] = 1.0  # only the initialiser: the stored gamma is loaded
    if type(block.mlp).__name__ == 'GluMlp':
        facts['mlp_layer'] = 'swiglu_packed'
    return facts


class Built:
    """A meta-device build of the architecture and model_args a timm config records, held against the tensors.

    The settings no tensor records (heads, pooling, activation) are taken from this build, so every setting
    the tensors do record must agree with it too: a config whose depth, width, MLP, bias, tables or pooling
    disagrees describes another network than the weights. ``dims`` are the settings read off the build, by name.
    """
    # our name for a setting -> the timm create_model arguments that set it (the first one the config gives is named)
    _ARGS = {'depth': ('depth',), 'embed_dim': ('embed_dim',), 'mlp_dim': ('mlp_ratio',),
             'num_classes': ('num_classes',), 'qkv_bias': ('qkv_bias',), 'class_token': ('class_token',),
             'num_heads': ('num_heads',), 'abs_pos_emb': ('use_abs_pos_emb',),
             'shared_rel_pos_bias': ('use_shared_rel_pos_bias', 'use_rel_pos_bias'), 'layer_scale': ('init_values',),
             'fc_norm': ('use_fc_norm', 'global_pool')}
    # tensors the reader checks itself (the table's grid, a patch kernel timm would PI-resize on load)
    _OWN_CHECKS = ('pos_embed', 'patch_embed.proj.weight', 'embeds.pos_embed', 'embeds.proj.weight')

    def __init__(self, arch: str, args: Dict[str, Any], model: nn.Module, dims: Dict[str, Any],
                 classes_recorded: bool) -> None:
        self.arch, self.args, self.dims = arch, args, dict(dims)
        if classes_recorded:
            self.dims['num_classes'] = model.num_classes
        self.shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()
                       if k not in self._OWN_CHECKS and (classes_recorded or not k.startswith('head.'))}

    @classmethod
    def of_vit(cls, arch: str, args: Dict[str, Any], model: nn.Module, classes_recorded: bool) -> 'Built':
        """A VisionTransformer's (or NaFlexVit's) build: depth, width, MLP, qkv bias and [CLS] token."""
        blocks = model.blocks
        embeds_cls = getattr(getattr(model, 'embeds', None), 'cls_token', None)
        return cls(arch, args, model, dict(
            depth=len(blocks), embed_dim=blocks[0].norm1.normalized_shape[0], mlp_dim=blocks[0].mlp.fc1.out_features,
            qkv_bias=blocks[0].attn.qkv.bias is not None,
            class_token=getattr(model, 'cls_token', embeds_cls) is not None), classes_recorded)

    def check(self, reader: SourceCheckpoint, found: Dict[str, Any], local: set,
              evidence: Optional[Dict[str, str]] = None) -> None:
        """Refuse the first recorded setting the tensors contradict, naming its config key (and ``evidence``: the
        tensor that shows the setting, by name)."""
        where = reader._config_path
        for name, built in self.dims.items():
            if found[name] != built:
                args = [arg for arg in self._ARGS[name] if arg in self.args]
                key = f'model_args.{args[0]}' if args else 'architecture'
                shown = f' ({evidence[name]})' if evidence and name in evidence else ''
                raise ViTVariantsError(f'{self.arch} with these model_args has {name}={built}, but the tensors have '
                                       f'{name}={found[name]}{shown}', path=where, key=key)
        for name, shape in sorted(self.shapes.items()):
            if name not in local or reader._shape(reader._prefix + name) != shape:
                got = reader._shape(reader._prefix + name) if name in local else 'no such tensor'
                raise ViTVariantsError(f'{self.arch} with these model_args has {name} {shape}, the weights have '
                                       f'{got}', path=where, key=name)


class TimmCheckpoint(SourceCheckpoint):
    """timm ``vit_*`` weights and our own folders: every tensor is ours under the same name (the default rule)."""
    format = 'timm'
    PREPROCESSING_DEFAULTS = assumed_preprocessing('bicubic', 0.9, 'center',
                                                   "not recorded by the checkpoint; timm's vit_* default")
    KIND = 'VisionTransformer'  # the timm class whose defaults a bare state dict is read with
    KERNEL, CLS = 'patch_embed.proj.weight', 'cls_token'
    # Settings a config.json's architecture records and a state dict does not, with timm's defaults for the latter.
    SETTINGS = {'global_pool': None, 'act_layer': 'gelu', 'norm_eps': 1e-6}
    ALWAYS_CROPS = False  # whether the patch embedding drops the pixels the patch does not divide, whatever the pool
    _deit = False  # read as DeiT's own release format (set by ``_infer``)

    def _recorded_preprocessing(self) -> Dict[str, Any]:
        """``config.json``'s ``pretrained_cfg`` preprocessing, else what a timm training checkpoint's args record."""
        if self.source_config.get('pretrained_cfg'):
            timm_cfg, path, section = self.source_config['pretrained_cfg'], self._config_path, 'pretrained_cfg'
        else:
            timm_cfg, path, section = self._store.training_args(), self.path, 'args'
        if not isinstance(timm_cfg, dict):
            raise ViTVariantsError('expected a JSON object', path=path, key=section)
        recorded = checked_preprocessing({k: timm_cfg.get(k) for k in PREPROCESSING_KEYS}, self.config.in_chans, path,
                                         {k: f'{section}.{k}' for k in PREPROCESSING_KEYS})
        extra = {k: timm_cfg[k] for k in DATA_CONFIG_KEYS if k not in PREPROCESSING_KEYS and timm_cfg.get(k) is not None}
        return {**recorded, **extra}

    # -- the architecture -------------------------------------------------------------------------------
    def _architecture(self) -> Tuple[Optional[str], Dict[str, Any]]:
        """(registered architecture, model_args) from config.json, else from the args a timm training
        checkpoint records (``args.model``, ``args.model_kwargs``); checked before anything is built."""
        if 'architecture' in self.source_config:
            arch = self.source_config['architecture']
            args = self.source_config.get('model_args') or {}
            where = dict(path=self._config_path)
            classes = self.source_config.get('num_classes')
            if self.source_config.get('architectures') == ['TimmWrapperModel']:
                classes = 0  # transformers' TimmWrapperModel builds its timm model headless, whatever num_classes says
        else:
            trained = self._store.training_args()
            if not trained.get('model'):
                return None, {}
            arch, args = trained['model'], trained.get('model_kwargs') or {}
            where = dict(path=self.path)
            classes = trained.get('num_classes')
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
        # the class count timm's own loader builds with when model_args leave it out (None: not recorded)
        self._classes = args.get('num_classes', classes if isinstance(classes, int) and not isinstance(classes, bool)
                                 and 0 <= classes <= self.limits.classes else None)
        return arch, args

    def _meta_build(self, arch: str, args: Dict[str, Any]) -> nn.Module:
        """The recorded architecture built on the meta device, with the class count timm's loader would use."""
        try:
            with torch.device('meta'):
                return timm.create_model(arch, pretrained=False, **dict(
                    args, **({'num_classes': self._classes} if self._classes is not None else {})))
        except Exception as e:  # unknown arguments; timm raises several types
            raise ViTVariantsError(f'cannot rebuild architecture {arch!r} from its config: {e}',
                                   path=self._config_path, key='architecture') from None

    def _foreign_facts(self, arch: str, args: Dict[str, Any]) -> Dict[str, Any]:
        """Settings no tensor records, read off a meta-device build of a timm ``vit_*`` architecture."""
        model = self._meta_build(arch, args)
        refuse_unexpressed(model, VIT_PARTS, arch, self._config_path)
        blocks = model.blocks
        if not len(blocks):
            raise ViTVariantsError(f'{arch} with these model_args has no transformer blocks', path=self._config_path,
                                   key='architecture')
        if model.global_pool not in ('token', 'avg', 'map', ''):
            raise ViTVariantsError(f"global_pool={model.global_pool!r} is not supported (token, avg, map or '')",
                                   path=self._config_path, key='global_pool')
        try:
            act = activation_name(blocks[0].mlp.act)
        except ViTVariantsError as e:
            raise ViTVariantsError(str(e), path=self._config_path, key='architecture') from None
        facts = dict(num_heads=blocks[0].attn.num_heads, global_pool=model.global_pool, act_layer=act,
                     norm_eps=blocks[0].norm1.eps, built=Built.of_vit(arch, args, model, self._classes is not None),
                     **_block_facts(blocks[0]))
        if '_clip_' in arch:
            self._clip_note(arch, act)
        return dict(facts, **self._embedding_facts(model, arch))

    def _embedding_facts(self, model: nn.Module, arch: str) -> Dict[str, Any]:
        """What the patch embedding and table of the build record beyond their tensors."""
        if getattr(model, 'embeds', None) is not None:
            raise self._error(f"{arch} is timm's NaFlexVit, whose weights sit under embeds.*, and these have none",
                              key=self._prefix + 'embeds.proj.weight')
        return dict(img_size=tuple(model.patch_embed.img_size),
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

    # -- inference --------------------------------------------------------------------------------------
    def _infer(self, hints: Dict[str, Any]) -> SimpleViTConfig:
        self._prefix = hints.get('prefix') or ''
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
            return self._ours(arch, args, hints)
        # a foreign state dict's features we do not express (our own folder's model_args say which it has)
        for name in sorted(local):
            for pattern, reason in _UNSUPPORTED:
                if pattern.search(name):
                    raise self._error(reason, key=self._prefix + name)
        self._refuse_beyond(local)
        if arch is None and self._deit:
            self._unrecorded('architecture', {}, "DeiT's DistilledVisionTransformer" if 'dist_token' in local else
                             "DeiT's VisionTransformer (timm's)", _DEIT_WHY)
        elif arch is None:
            self._unrecorded('architecture', {}, f'{self.KIND}Distilled' if 'dist_token' in local else self.KIND,
                             "a state dict does not record its architecture; timm models whose RoPE stores no tensor "
                             "(EVA02, Perception Encoder) have the same keys")
        return self._from_tensors(local, self._foreign_facts(arch, args) if arch else {}, hints)

    def _preprocessing_defaults(self) -> Dict[str, Tuple[Any, str]]:
        """DeiT's eval transform for its own releases, timm's deit_* one for a distilled state dict, else timm's."""
        if self._deit:
            return _DEIT_PREPROCESSING
        return _DISTILLED_PREPROCESSING if self.config.tokens.dist else self.PREPROCESSING_DEFAULTS

    def _ours(self, arch: str, args: Dict[str, Any], hints: Dict[str, Any]) -> SimpleViTConfig:
        """A simple_vit folder: its config.json is the config (the entrypoint's defaults fill any gaps)."""
        args = dict(args)
        args.pop('dtype', None)  # the weights' dtype (read off the tensors), not an architectural field
        if 'num_classes' not in args and isinstance(self.source_config.get('num_classes'), int):
            args['num_classes'] = self.source_config['num_classes']
        args.update({k: hints[k] for k in ('act_layer', 'norm_eps') if hints.get(k)})
        unknown = sorted(set(args) - ARGUMENT_NAMES)
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

    def _from_tensors(self, local: set, facts: Dict[str, Any], hints: Dict[str, Any]) -> SimpleViTConfig:
        """A timm ``vit_*`` state dict (with ``facts`` from its config.json when there is one)."""
        p = self._prefix
        dim, in_chans, patch_h, patch_w = self._patch_kernel(facts, hints)
        self._check_dims(p + self.KERNEL, width=dim, img_size=max(patch_h, patch_w))
        class_token = self.CLS in local
        dist_token = bool(self._token_count(p + 'dist_token', dim, 'a distillation token'))
        if dist_token and self._shape(p + 'dist_token')[1] != 1:
            raise self._error('DeiT has one distillation token', key=p + 'dist_token',
                              shapes=(self._shape(p + 'dist_token'), (1, 1, dim)))
        pos_embed, slot = self._position(local, dim, (patch_h, patch_w), class_token, facts, hints)
        depth = self._block_count([int(m.group(1)) for m in map(_BLOCK_RE.match, local) if m],
                                  lambda i: f'{p}blocks.{i}')
        if not depth:
            raise self._error('no transformer blocks found', key=p + 'blocks.0.attn.qkv.weight')
        fc1_width = mlp_dim = self._shape(p + 'blocks.0.mlp.fc1.weight')[0]
        if facts.get('mlp_layer') == 'swiglu_packed':  # timm's SwiGLUPacked: fc1 holds both halves
            mlp_dim //= 2
        rep_size = self._shape(p + 'pre_logits.fc.weight')[0] if 'pre_logits.fc.weight' in local else None
        num_classes = self._shape(p + 'head.weight')[0] if 'head.weight' in local else 0
        self._check_dims(p + 'blocks.0.mlp.fc1.weight', mlp=mlp_dim, classes=num_classes, width=rep_size)
        num_heads = self._heads(dim, facts, hints)
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
            img_size = self._unrecorded('img_size', hints, 224, 'the state dict has no position table, so its image '
                                        'size is not recorded')
        settings = self._settings(local, facts, hints, class_token, dim, mlp_dim)
        if self._deit:
            self.notes.append(f"read as facebookresearch/deit's own format ({{'model': ...}}, "
                              f"{'DistilledVisionTransformer' if dist_token else 'VisionTransformer'}); table resize "
                              "rule 'deit' (its main.py: bicubic, no antialias, square grids)")
            settings['pos_embed_resample'] = self._unrecorded(
                'pos_embed_resample', {}, 'deit', "DeiT's main.py fine-tuning resize, told by its {'model': ...} "
                'wrapper')
        qkv_bias = 'blocks.0.attn.qkv.bias' in local
        if 'built' in facts:
            facts['built'].check(self, dict(depth=depth, embed_dim=dim, mlp_dim=fc1_width, num_classes=num_classes,
                                            qkv_bias=qkv_bias, class_token=class_token), local)
        return SimpleViTConfig.of(
            img_size=img_size, patch_size=(patch_h, patch_w), in_chans=in_chans, num_classes=num_classes,
            global_pool=settings['global_pool'], embed_dim=dim, depth=depth, num_heads=num_heads, mlp_dim=mlp_dim,
            qkv_bias=qkv_bias, class_token=class_token, dist_token=dist_token,
            reg_tokens=self._shape(p + 'reg_token')[1] if 'reg_token' in local else 0,
            init_values=facts.get('init_values') or (1.0 if 'blocks.0.ls1.gamma' in local else None),
            mlp_layer=facts.get('mlp_layer', 'mlp'), pos_embed=pos_embed, pos_embed_cls_slot=slot,
            pos_embed_resample=settings.get('pos_embed_resample', 'timm'), patch_embed=self.PATCH_EMBED,
            rep_size=rep_size, act_layer=hints.get('act_layer') or settings['act_layer'],
            norm_eps=hints.get('norm_eps') or settings['norm_eps'],
            grid_mode='crop' if settings['global_pool'] == 'map' or self.ALWAYS_CROPS or cropped else None,
            pre_norm='norm_pre.weight' in local,
            patch_bias=self.KERNEL[:-len('weight')] + 'bias' in local,
            fc_norm='fc_norm.weight' in local,
            head_bias='head.bias' in local or 'head.weight' not in local,
        )

    def _registers_without_position(self, local: set, facts: Dict[str, Any]) -> None:
        """Refuse timm's registers with their own table rows (``no_embed_class=False``): here registers have none."""
        p = self._prefix
        if 'reg_token' not in local or facts.get('pos_embed_cls_slot') is False:
            return
        extra = self._shape(p + 'pos_embed')[1] - self._shape(p + 'reg_token')[1] - 1
        if facts.get('pos_embed_cls_slot') or (extra > 0 and math.isqrt(extra) ** 2 == extra):
            raise self._error('register tokens with their own position-table rows (timm no_embed_class=False) are '
                              'not supported: registers carry no position here (timm\'s DINOv2 models use '
                              'no_embed_class=True)', key=p + 'pos_embed')

    def _patch_kernel(self, facts: Dict[str, Any], hints: Dict[str, Any]) -> Tuple[int, int, int, int]:
        """(D, C, P, P) of the patch conv."""
        key = self._prefix + self.KERNEL
        kernel = self._shape(key)
        if len(kernel) != 4:
            raise self._error('patch embedding must be a (D, C, P, P) convolution', key=key, shapes=(kernel,))
        return kernel

    def _position(self, local: set, dim: int, patch: Tuple[int, int], class_token: bool, facts: Dict[str, Any],
                  hints: Dict[str, Any]) -> Tuple[str, bool]:
        """(pos_embed, whether the table has a cls slot): a stored (1, tokens, D) table, else the one given or
        recorded, else sin-cos."""
        if 'pos_embed' not in local:
            pos_embed = hints.get('pos_embed') or facts.get('pos_embed') or 'sincos'
            if pos_embed == 'learn':
                raise self._error('missing key', key=self._prefix + 'pos_embed')
            return pos_embed, False
        self._registers_without_position(local, facts)
        slot = self._check_token_table(self._prefix + 'pos_embed', dim, patch, class_token=class_token,
                                       slot=facts.get('pos_embed_cls_slot'),
                                       img_size=hints.get('img_size') or facts.get('img_size'),
                                       dist_token='dist_token' in local)
        return 'learn', bool(slot)

    def _settings(self, local: set, facts: Dict[str, Any], hints: Dict[str, Any], class_token: bool, dim: int,
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
                recorded[name] = self._unrecorded(name, hints, default, "not recorded by a state dict; timm's "
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
