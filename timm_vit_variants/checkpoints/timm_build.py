"""What every timm-layout reader shares: the architecture a timm folder or training checkpoint records, rebuilt on the
meta device, and that build held against the tensors.

A timm ``config.json`` (``architecture`` + ``model_args``), or the args a timm training checkpoint records, names a
registered timm model; ``TimmFolder._architecture`` reads and checks them before anything is built,
``_meta_build`` builds them on the meta device (no memory, no weights), and ``Built`` holds the build's settings
against what the tensors say. The readers of timm's ViT families (``timm_format``, ``timm_eva``, ``timm_naflex``) and
of timm's BEiT (``beit``) sit on it, as does the preprocessing a timm source records (``tensor_rules``).
"""
from typing import Any, Dict, Optional, Tuple

import timm
import torch
import torch.nn as nn

from ..errors import ViTVariantsError
from .source import SourceCheckpoint
from .tensor_rules import timm_recorded_preprocessing

__all__ = ['TimmFolder', 'Built']

# create_model kwargs that load weights or configs from elsewhere: never taken from a file's config.
_LOADING_ARGS = frozenset({'pretrained', 'pretrained_cfg', 'pretrained_cfg_overlay', 'checkpoint_path', 'cache_dir'})
# model_args sizes and the limit each is checked against, before anything is built from them.
_CLAIMS = {'depth': 'depth', 'embed_dim': 'width', 'num_heads': 'heads', 'mlp_dim': 'mlp', 'num_classes': 'classes',
           'img_size': 'img_size', 'patch_size': 'img_size', 'rep_size': 'width'}


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
    def of_vit(cls, arch: str, args: Dict[str, Any], model: nn.Module, block: Dict[str, Any],
               classes_recorded: bool) -> 'Built':
        """A VisionTransformer's (or NaFlexVit's) build: depth, and width, MLP (its first layer's rows) and qkv bias
        of its first block's settings (``timm_blocks.block_settings``), and [CLS] token."""
        embeds_cls = getattr(getattr(model, 'embeds', None), 'cls_token', None)
        return cls(arch, args, model, dict(
            depth=len(model.blocks), embed_dim=block['embed_dim'], mlp_dim=block['fc1_width'],
            qkv_bias=block['qkv_bias'], class_token=getattr(model, 'cls_token', embeds_cls) is not None),
            classes_recorded)

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


class TimmFolder(SourceCheckpoint):
    """A reader of timm-layout weights: the architecture its folder or training checkpoint records, and the
    preprocessing recorded beside it."""
    _classes: Optional[int] = None  # the class count timm's loader builds with (set by ``_architecture``)

    def _recorded_preprocessing(self) -> Dict[str, Any]:
        """``config.json``'s ``pretrained_cfg`` preprocessing, else what a timm training checkpoint's args record."""
        return timm_recorded_preprocessing(self)

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
