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
from .clip_models import CLIP_ARCHS, clip_default_cfgs, clip_tag_args
from .config import ARGUMENT_NAMES, SimpleViTConfig
from .model_table import MODELS, SIGLIP_TOWERS
from .errors import ViTVariantsError
from .families.registry import DEFAULT_CFGS as FAMILY_CFGS, FAMILIES
from .geometry import Geometry, fit_stream, fixed_patch_reason, infer_grid
from .limits import DEFAULT_LIMITS, Limits
from .parts import Learned
from .vision_transformer import SimpleVisionTransformer

__all__ = ['checkpoint_filter_fn', 'create_simple_vit', 'pretrained_cfg_for', 'FOLDER_CFG_KEYS', 'WEIGHT_DTYPES']

_BV_URL = 'https://storage.googleapis.com/big_vision/vit_s16_i1k_{}ep.npz'
_FLEXI_URL = 'https://storage.googleapis.com/big_vision/flexivit/flexivit_{}_i1k.npz'
# The dtypes a Hub folder's config.json may name in model_args.
WEIGHT_DTYPES = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}
# The pretrained_cfg fields a Hub folder's config.json carries (timm's save_config_for_hf, minus sources and papers).
FOLDER_CFG_KEYS = ('custom_load', 'input_size', 'fixed_input_size', 'interpolation', 'crop_pct', 'crop_mode', 'mean',
                   'std', 'num_classes', 'pool_size', 'first_conv', 'classifier')


def _cfg(url: str = '', **kwargs: Any) -> Dict[str, Any]:
    return {
        'url': url,
        'num_classes': 1000,
        'input_size': (3, 224, 224),
        'pool_size': None,
        'crop_pct': 0.875,
        'interpolation': 'bilinear',
        'fixed_input_size': False,
        'mean': (0.5, 0.5, 0.5),
        'std': (0.5, 0.5, 0.5),
        'first_conv': 'patch_embed.proj',
        'classifier': 'head',
        'license': 'apache-2.0',
        **kwargs,
    }


def _bv_cfg(epochs: int) -> Dict[str, Any]:
    return _cfg(
        url=_BV_URL.format(epochs),
        custom_load=True,
        paper_ids='arXiv:2205.01580',
        paper_name='Better plain ViT baselines for ImageNet-1k',
        origin_url='https://github.com/google-research/big_vision',
        notes=(f'big_vision vit_s16_i1k {epochs}ep: gap pooling, sincos2d posemb, rep_size=384',),
    )


def _flexi_cfg(size: str) -> Dict[str, Any]:
    # big_vision's i1k evaluation: squash-resize to 274, centre crop 240, pixels in [-1, 1].
    return _cfg(
        url=_FLEXI_URL.format(size[0]),
        custom_load=True,
        input_size=(3, 240, 240),
        crop_pct=240 / 274,
        paper_ids='arXiv:2212.08013',
        paper_name='FlexiViT: One Model for All Patch Sizes',
        origin_url='https://github.com/google-research/big_vision',
        notes=(f'big_vision FlexiViT-{size[0].upper()} i1k 1200ep: underlying 32x32 kernel and 7x7 table, '
               'PI-resized and resampled at load time to the requested patch size',),
    )


_SIGLIP_URL = 'https://storage.googleapis.com/big_vision/'
_SIGLIP2_SHORT = {'base': 'b', 'large': 'l', 'so400m': 'so400m', 'giantopt': 'g-opt'}  # the file names' spelling
# The published image-text files (big_vision configs/proj/image_text/README_siglip2.md, the SigLIP demo
# notebooks): (model, tag) -> file. Each is a whole two-tower file; the plugin reads its image tower.
_SIGLIP_FILES = {
    **{(f'simple_vit_base_patch16_siglip_{img}', 'webli'): f'siglip/webli_en_b16_{img}_{n}.npz' for img, n in (
        (224, 63724782), (256, 60500360), (384, 68578854), (512, 68580893))},
    ('simple_vit_base_patch16_siglip_256', 'webli_i18n'): 'siglip/webli_i18n_b16_256_66117334.npz',
    ('simple_vit_large_patch16_siglip_256', 'webli'): 'siglip/webli_en_l16_256_60552751.npz',
    ('simple_vit_large_patch16_siglip_384', 'webli'): 'siglip/webli_en_l16_384_63634585.npz',
    ('simple_vit_so400m_patch14_siglip_224', 'webli'): 'siglip/webli_en_so400m_224_57633886.npz',
    ('simple_vit_so400m_patch14_siglip_384', 'webli'): 'siglip/webli_en_so400m_384_58765454.npz',
    ('simple_vit_so400m_patch16_siglip_256', 'webli_i18n'): 'siglip/webli_i18n_so400m_16_256_78061115.npz',
    # SigLIP 2 publishes every tower of SIGLIP_TOWERS
    **{(f'simple_vit_{size}_patch{patch}_siglip_{img}', 'v2_webli'):
       f'siglip2/siglip2_{_SIGLIP2_SHORT[size]}{patch}_{img}.npz'
       for size, patch, sizes in SIGLIP_TOWERS for img in sizes},
    ('simple_vit_base_patch16_siglip_naflex', 'v2_webli'): 'siglip2/siglip2_b16_naflex.npz',
    ('simple_vit_so400m_patch16_siglip_naflex', 'v2_webli'): 'siglip2/siglip2_so400m16_naflex.npz',
}


def _siglip_cfg(name: str, tag: str) -> Dict[str, Any]:
    """A SigLIP tower's published weights: the image embedding (no classifier), big_vision's evaluation transform."""
    img = MODELS[name].config().img_size
    version = 'SigLIP 2' if tag == 'v2_webli' else 'SigLIP'
    return _cfg(
        url=_SIGLIP_URL + _SIGLIP_FILES[(name, tag)],
        custom_load=True,
        num_classes=0,
        input_size=(3, *img),
        # big_vision SigLIP: resize(size)|value_range(-1, 1), the whole image squashed to the model's size
        crop_pct=1.0,
        crop_mode='squash',
        paper_ids='arXiv:2502.14786' if tag == 'v2_webli' else 'arXiv:2303.15343',
        paper_name='SigLIP 2: Multilingual Vision-Language Encoders with Improved Semantic Understanding, '
                   'Localization, and Dense Features' if tag == 'v2_webli' else
                   'Sigmoid Loss for Language Image Pre-Training',
        origin_url='https://github.com/google-research/big_vision',
        notes=(f'big_vision {version} image tower ({_SIGLIP_FILES[(name, tag)]}); the text tower is not loaded',),
    )


def _untrained(name: str) -> Dict[str, Any]:
    config = MODELS[name].config()
    return _cfg(input_size=(3, *config.img_size), crop_pct=1.0 if max(config.img_size) < 224 else 0.875,
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


# Each family module's rows; one without a cfg of its own gets an untrained one.
_FAMILY_ROWS = {name for family in FAMILIES for name in family.rows}
default_cfgs = generate_default_cfgs({
    **FAMILY_CFGS,
    **{f'{name}.untrained': _untrained(name) for name in sorted(_FAMILY_ROWS)
       if not any(tag.split('.', 1)[0] == name for tag in FAMILY_CFGS)},
    # after its published tags, an untrained one for each row of a family that asks for it
    **{f'{name}.untrained': _untrained(name) for family in FAMILIES if family.untrained for name in family.rows
       if any(tag.split('.', 1)[0] == name for tag in family.cfgs)},
    **{f'{name}.untrained': _untrained(name) for name in MODELS
       if name not in _FAMILY_ROWS and name != 'simple_vit_small_patch16_224' and '_flexi_' not in name and '_siglip_' not in name
       and name not in CLIP_ARCHS},
    **clip_default_cfgs(),
    **{f'{name}.{tag}': _siglip_cfg(name, tag) for name, tag in _SIGLIP_FILES},
    **{f'simple_vit_{size}_flexi_240.bv_i1k_1200ep': _flexi_cfg(size) for size in ('small', 'base', 'large')},
    'simple_vit_small_patch16_224.bv_i1k_300ep': _bv_cfg(300),
    'simple_vit_small_patch16_224.bv_i1k_150ep': _bv_cfg(150),
    'simple_vit_small_patch16_224.bv_i1k_90ep': _bv_cfg(90),
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
    if overlay and (overlay.get('file') or url.endswith('.npz') or (variant in CLIP_ARCHS and _is_clip_file(url))):
        # A local file or folder (train.py --pretrained-path) is read as a tag's download is: by our reader
        # (model.load_pretrained), which tells the format from the content and maps DeiT-III, RoPE-ViT, BEiT,
        # EVA-02, .npz, CLIP and sharded folders, or refuses what is no checkpoint. timm's generic loader would
        # load such a file as a plain ViT. So are URLs timm cannot read (.npz, an OpenAI TorchScript .pt).
        kwargs['pretrained_cfg_overlay'] = dict(overlay, custom_load=overlay.get('custom_load', True))
    kwargs = {**clip_tag_args(variant, kwargs.get('pretrained_cfg')), **kwargs}  # a CLIP tag's activation
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


def _is_clip_file(path: str) -> bool:
    """An OpenAI CLIP ``.pt`` (also MetaCLIP's) or an open_clip Hub file (``open_clip_*``), by its name."""
    return path.endswith('.pt') or os.path.basename(path).startswith('open_clip_')


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
