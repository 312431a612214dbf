"""timm registry entries for the ``simple_vit_*`` family (timm module ``simple_vit``): pretrained configs, the state-dict filter, entrypoints.

Each entrypoint is built from one row of ``model_table.MODELS``; importing this module registers them all.
"""
import os
import sys
from dataclasses import replace
from typing import Any, Callable, Dict, Optional

import timm
import torch
from timm.models import build_model_with_cfg, generate_default_cfgs, register_model, resolve_pretrained_cfg

from ._timm_compat import check_local_dir_configs
from .checkpoints import check_folder
from .checkpoints.files import CONFIG_FILE, read_json
from .cfgs import pretrained_cfg
from .config import ARGUMENT_NAMES, SimpleViTConfig
from .model_table import MODELS
from .errors import ViTVariantsError
from .families.registry import DEFAULT_CFGS as FAMILY_CFGS, FAMILIES, family_of
from .geometry import Geometry, fit_stream, fixed_patch_reason, infer_grid
from .limits import DEFAULT_LIMITS, Limits
from .parts import Learned
from .vision_transformer import SimpleVisionTransformer

__all__ = ['checkpoint_filter_fn', 'create_simple_vit', 'pretrained_cfg_for', 'FOLDER_CFG_KEYS', 'WEIGHT_DTYPES']

# The dtypes a Hub folder's config.json may name in model_args.
WEIGHT_DTYPES = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}
# The pretrained_cfg fields a Hub folder's config.json carries (timm's save_config_for_hf, minus sources and papers).
FOLDER_CFG_KEYS = ('custom_load', 'input_size', 'fixed_input_size', 'interpolation', 'crop_pct', 'crop_mode', 'mean',
                   'std', 'num_classes', 'pool_size', 'first_conv', 'classifier')


def _untrained(name: str) -> Dict[str, Any]:
    config = MODELS[name].config()
    return pretrained_cfg(input_size=(3, *config.img_size), crop_pct=1.0 if max(config.img_size) < 224 else 0.875,
                num_classes=config.num_classes)


def pretrained_cfg_for(config: SimpleViTConfig, architecture: str) -> Dict[str, Any]:
    """The ``pretrained_cfg`` of a model built from ``config`` under a registered ``architecture``.

    The architecture's registered cfg (its default tag's preprocessing), with this model's input size,
    class count and first conv; only ``FOLDER_CFG_KEYS``, as timm's ``save_config_for_hf`` writes them.
    """
    base = timm.models.get_pretrained_cfg(architecture).to_dict()
    cfg = {key: base.get(key) for key in FOLDER_CFG_KEYS}
    cfg.update(custom_load=False, crop_mode=base.get('crop_mode') or 'center', num_classes=config.num_classes,
               input_size=(config.in_chans, *config.img_size),
               first_conv=Geometry.of(config).kernel_key.rsplit('.', 1)[0])
    return cfg


_TAGGED = {tag.split('.', 1)[0] for tag in FAMILY_CFGS}
default_cfgs = generate_default_cfgs({
    **FAMILY_CFGS,
    # an untrained tag for each row without a published one, and after its published ones for each row of a family
    # that asks for it
    **{f'{name}.untrained': _untrained(name) for name in MODELS if name not in _TAGGED},
    **{f'{name}.untrained': _untrained(name) for family in FAMILIES if family.untrained for name in family.rows
       if name in _TAGGED},
})


def checkpoint_filter_fn(state_dict: Dict[str, torch.Tensor], model: SimpleVisionTransformer) -> Dict[str, torch.Tensor]:
    """Fit a timm-layout state dict to ``model``'s grid and patch (timm adapts input channels itself, afterwards).

    The source patch size is read off the pixel-facing kernel where that kernel is one patch filter;
    other patch embeddings ('conv_stem', 'overlap') must match the model's layer for layer.
    """
    if 'visual.conv1.weight' in state_dict:
        raise ViTVariantsError('an open_clip / OpenAI CLIP state dict (visual.* keys): load its file through our '
                               'reader, pretrained_cfg_overlay=dict(file=PATH, custom_load=True)',
                               key='visual.conv1.weight')
    dst = Geometry.of(model.config)
    kernel = state_dict.get(dst.kernel_key)
    table = state_dict.get('pos_embed')
    if kernel is None or kernel.ndim != 4:
        return dict(state_dict)
    dst = replace(dst, in_chans=kernel.shape[1])
    if not dst.kernel_is_patch:
        _check_fixed_patch_embed(state_dict, model, dst)
    patch = tuple(kernel.shape[-2:]) if dst.kernel_is_patch else dst.patch
    grid, prefix = dst.grid, dst.prefix
    if table is not None and model.pos_embed is not None and table.ndim == 3 and table.shape != model.pos_embed.shape:
        table_part = model.config.position(Learned)
        regs = state_dict['reg_token'].shape[1] if 'reg_token' in state_dict else 0
        grid, prefix = infer_grid(table.shape[1], patch, class_token='cls_token' in state_dict,
                                  slot=bool(table_part and table_part.cls_slot), key='pos_embed',
                                  dist_token='dist_token' in state_dict, registers=regs,
                                  reg_slots=bool(table_part and table_part.reg_slots))
    src = replace(dst, grid=tuple(grid), patch=patch, prefix=prefix)
    return dict(fit_stream(state_dict.items(), src, dst))


def _check_fixed_patch_embed(state_dict: Dict[str, torch.Tensor], model: SimpleVisionTransformer,
                             dst: Geometry) -> None:
    """A patch embedding that cannot be resized must arrive with exactly the model's shapes (channels aside)."""
    def shapes(tensors: Dict[str, torch.Tensor]) -> Dict[str, tuple]:
        return {k: tuple(v.shape[:1] + v.shape[2:]) if k == dst.kernel_key else tuple(v.shape)
                for k, v in tensors.items() if k.startswith('patch_embed.')}

    if shapes(state_dict) != shapes(model.state_dict()):
        raise ViTVariantsError(f"the checkpoint's {dst.patch_embed!r} patch embedding has other layers or shapes than "
                               f'this model\'s (patch {dst.patch}), and cannot be resized: '
                               f'{fixed_patch_reason(dst.patch_embed, dst.patch_norm)}', key=dst.kernel_key)


def create_simple_vit(variant: str, pretrained: bool = False, **kwargs: Any) -> SimpleVisionTransformer:
    """Build a registered ``simple_vit_*`` model through timm's ``build_model_with_cfg``."""
    if isinstance(kwargs.get('dtype'), str):  # config.json's model_args name the weights' dtype as text
        if kwargs['dtype'] not in WEIGHT_DTYPES:
            raise ViTVariantsError(f'dtype must be one of {", ".join(WEIGHT_DTYPES)}, got {kwargs["dtype"]!r}',
                                   path=_pretrained_source(kwargs.get('pretrained_cfg')), key='model_args.dtype')
        kwargs['dtype'] = WEIGHT_DTYPES[kwargs['dtype']]
    source = kwargs.get('pretrained_cfg')
    if pretrained and isinstance(source, dict) and source.get('source') == 'local-dir':
        # timm builds the model from the folder's model_args: they must describe the folder's own tensors
        check_folder(source['file'], SimpleVisionTransformer.state_layout, kwargs.get('limits', DEFAULT_LIMITS))
    overlay: Optional[Dict[str, Any]] = kwargs.get('pretrained_cfg_overlay')
    url = str((overlay or {}).get('url') or '')
    family = family_of(variant)
    family_reads = bool(family and family.reads_url and family.reads_url(url))
    if overlay and (overlay.get('file') or url.endswith('.npz') or family_reads):
        # A local file or folder (train.py --pretrained-path) is read as a tag's download is: by our reader
        # (model.load_pretrained), which tells the format from the content and maps DeiT-III, RoPE-ViT, BEiT,
        # EVA-02, .npz, CLIP and sharded folders, or refuses what is no checkpoint. timm's generic loader would
        # load such a file as a plain ViT. So are URLs timm cannot read (.npz, an OpenAI TorchScript .pt).
        kwargs['pretrained_cfg_overlay'] = dict(overlay, custom_load=overlay.get('custom_load', True))
    if family and family.tag_args:  # what a tag's weights need beyond the row (a CLIP tag's activation)
        kwargs = {**family.tag_args(variant, kwargs.get('pretrained_cfg')), **kwargs}
    kwargs.setdefault('num_classes', _head_size(variant, kwargs))
    out_indices = kwargs.pop('out_indices', 3)
    limits: Limits = kwargs.pop('limits', DEFAULT_LIMITS)  # a caller's lifted limits (vit-port --limit)
    # The one gate before anything is allocated, for every way timm builds one (local-dir:, hf-hub:, a name).
    config = MODELS[variant].config(**{k: v for k, v in kwargs.items() if k in ARGUMENT_NAMES})
    config.check_limits(limits, path=_pretrained_source(kwargs.get('pretrained_cfg')))
    return build_model_with_cfg(
        SimpleVisionTransformer,
        variant,
        pretrained,
        pretrained_filter_fn=checkpoint_filter_fn,
        feature_cfg=dict(out_indices=out_indices, feature_cls='getter'),
        limits=limits,  # what one input may cost the model, too (relative positions)
        **config.to_dict(include_training=True), **{k: v for k, v in kwargs.items() if k not in ARGUMENT_NAMES},
    )


def _head_size(variant: str, kwargs: Dict[str, Any]) -> int:
    """The class count timm gives a model built without ``num_classes``: the pretrained_cfg's (a folder's
    config.json, a tag's), as timm's ``build_model_with_cfg`` does; the row's only where that cfg has none.

    Without this the row's own count would reach timm as an explicit kwarg and win over the folder's, and timm
    would then drop the stored classifier as belonging to another head.
    """
    cfg = resolve_pretrained_cfg(variant, pretrained_cfg=kwargs.get('pretrained_cfg'),
                                 pretrained_cfg_overlay=kwargs.get('pretrained_cfg_overlay')).to_dict()
    classes = cfg.get('num_classes')
    return classes if isinstance(classes, int) and classes >= 0 else MODELS[variant].config().num_classes


def _pretrained_source(cfg: Any) -> Optional[str]:
    """Where timm is about to load weights from (a local-dir: folder's file, a Hub id), to name in errors."""
    get = cfg.get if isinstance(cfg, dict) else lambda key: getattr(cfg, key, None)
    return (get('file') or get('hf_hub_id') or None) if cfg is not None else None


def _check_local_config(folder: str) -> None:
    """A ``local-dir:`` folder's ``config.json`` read within our bounds (size, nesting) and its sections checked
    as JSON objects, before timm parses it (``_timm_compat.check_local_dir_configs``)."""
    path = os.path.join(folder, CONFIG_FILE)
    if not os.path.isfile(path):
        return  # timm says so itself
    config = read_json(path)
    for section in ('model_args', 'pretrained_cfg'):
        if section in config and not isinstance(config[section], dict):
            raise ViTVariantsError('expected a JSON object', path=path, key=section)


def _entrypoint(name: str) -> Callable[..., SimpleVisionTransformer]:
    def entrypoint(pretrained: bool = False, **kwargs: Any) -> SimpleVisionTransformer:
        return create_simple_vit(name, pretrained=pretrained, **kwargs)

    entrypoint.__name__ = entrypoint.__qualname__ = name
    entrypoint.__module__ = __name__
    entrypoint.__doc__ = MODELS[name].doc
    return entrypoint


check_local_dir_configs(_check_local_config)
for _name in MODELS:
    setattr(sys.modules[__name__], _name, register_model(_entrypoint(_name)))
del _name
