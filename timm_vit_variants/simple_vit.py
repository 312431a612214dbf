"""timm registry entries for the ``simple_vit_*`` family.

Widths, depths, MLP widths and heads follow big_vision's Ti/S/B/L/H variants.
Importing this module registers every entrypoint with timm.
"""
import os
from typing import Any, Dict, Optional

import torch
from timm.models import build_model_with_cfg, generate_default_cfgs, register_model

from .errors import ViTVariantsError
from .patch_embed import pi_resize_patch_kernel
from .posemb import resample_pos_embed
from .vision_transformer import SimpleVisionTransformer

__all__ = ['checkpoint_filter_fn', 'VARIANT_DIMS']

# name: (width, depth, mlp_dim, heads), from big_vision/models/vit.py
VARIANT_DIMS = {
    'tiny': (192, 12, 768, 3),
    'small': (384, 12, 1536, 6),
    'base': (768, 12, 3072, 12),
    'large': (1024, 24, 4096, 16),
    'huge': (1280, 32, 5120, 16),
}

_BV_URL = 'https://storage.googleapis.com/big_vision/vit_s16_i1k_{}ep.npz'


def _dims(size: str) -> Dict[str, int]:
    width, depth, mlp_dim, heads = VARIANT_DIMS[size]
    return dict(embed_dim=width, depth=depth, mlp_dim=mlp_dim, num_heads=heads)


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


default_cfgs = generate_default_cfgs({
    'simple_vit_tiny.untrained': _cfg(),
    'simple_vit_small.untrained': _cfg(),
    'simple_vit_base.untrained': _cfg(),
    'simple_vit_large.untrained': _cfg(),
    'simple_vit_huge.untrained': _cfg(),
    'simple_vit_tiny_patch16_224.untrained': _cfg(),
    'simple_vit_small_patch16_224.bv_i1k_300ep': _bv_cfg(300),
    'simple_vit_small_patch16_224.bv_i1k_150ep': _bv_cfg(150),
    'simple_vit_small_patch16_224.bv_i1k_90ep': _bv_cfg(90),
    'simple_vit_base_patch16_224.untrained': _cfg(),
    'simple_vit_large_patch16_224.untrained': _cfg(),
    'simple_vit_huge_patch16_224.untrained': _cfg(),
    'simple_vit_small_patch32_224.untrained': _cfg(),
    'simple_vit_base_patch32_224.untrained': _cfg(),
    'simple_vit_tiny_patch4_32.untrained': _cfg(input_size=(3, 32, 32), crop_pct=1.0),
})


def checkpoint_filter_fn(state_dict: Dict[str, torch.Tensor], model: SimpleVisionTransformer) -> Dict[str, torch.Tensor]:
    """Fit a timm-layout state dict to ``model``: PI-resize the patchifier, resample a learned table."""
    out = {}
    prefix_slots = 1 if model.pos_embed_cls_slot else 0
    for key, value in state_dict.items():
        if key == 'patch_embed.proj.weight' and value.ndim == 4 \
                and tuple(value.shape[-2:]) != model.patch_embed.patch_size:
            value = pi_resize_patch_kernel(value, model.patch_embed.patch_size)
        elif key == 'pos_embed' and model.pos_embed is not None and value.shape != model.pos_embed.shape:
            if value.ndim != 3 or value.shape[-1] != model.pos_embed.shape[-1]:
                raise ViTVariantsError('position table does not fit the model', key=key,
                                       shapes=(value.shape, model.pos_embed.shape))
            side = int(round((value.shape[1] - prefix_slots) ** 0.5))
            if side * side != value.shape[1] - prefix_slots:
                raise ViTVariantsError(
                    'cannot infer the source grid of a non-square position table; convert it with '
                    'vit-port, which reads the grid from the source config', key=key,
                    shapes=(value.shape, model.pos_embed.shape))
            value = resample_pos_embed(
                value, model.patch_embed.grid_size, (side, side), prefix_slots, model.pos_resampler.rule)
        out[key] = value
    return out


def _create(variant: str, pretrained: bool = False, **kwargs: Any) -> SimpleVisionTransformer:
    overlay: Optional[Dict[str, Any]] = kwargs.get('pretrained_cfg_overlay')
    if overlay and overlay.get('file') and os.path.isdir(overlay['file']):
        # a Hub folder (e.g. train.py --pretrained-path DIR): timm's file loader wants its weights file
        overlay = dict(overlay, file=os.path.join(overlay['file'], 'model.safetensors'))
        kwargs['pretrained_cfg_overlay'] = overlay
    if overlay and any(str(overlay.get(k) or '').endswith('.npz') for k in ('file', 'url')):
        # timm's generic loader cannot read .npz; route it to our reader (model.load_pretrained).
        kwargs['pretrained_cfg_overlay'] = dict(overlay, custom_load=overlay.get('custom_load', True))
    out_indices = kwargs.pop('out_indices', 3)
    return build_model_with_cfg(
        SimpleVisionTransformer,
        variant,
        pretrained,
        pretrained_filter_fn=checkpoint_filter_fn,
        feature_cfg=dict(out_indices=out_indices, feature_cls='getter'),
        **kwargs,
    )


def _model(variant: str, pretrained: bool, model_args: Dict[str, Any], kwargs: Dict[str, Any]) -> SimpleVisionTransformer:
    return _create(variant, pretrained=pretrained, **dict(model_args, **kwargs))


@register_model
def simple_vit_tiny(pretrained: bool = False, **kwargs) -> SimpleVisionTransformer:
    """ViT-Ti/16 plain recipe (width 192, depth 12, 3 heads)."""
    return _model('simple_vit_tiny', pretrained, dict(patch_size=16, **_dims('tiny')), kwargs)


@register_model
def simple_vit_small(pretrained: bool = False, **kwargs) -> SimpleVisionTransformer:
    """ViT-S/16 plain recipe (width 384, depth 12, 6 heads)."""
    return _model('simple_vit_small', pretrained, dict(patch_size=16, **_dims('small')), kwargs)


@register_model
def simple_vit_base(pretrained: bool = False, **kwargs) -> SimpleVisionTransformer:
    """ViT-B/16 plain recipe (width 768, depth 12, 12 heads)."""
    return _model('simple_vit_base', pretrained, dict(patch_size=16, **_dims('base')), kwargs)


@register_model
def simple_vit_large(pretrained: bool = False, **kwargs) -> SimpleVisionTransformer:
    """ViT-L/16 plain recipe (width 1024, depth 24, 16 heads)."""
    return _model('simple_vit_large', pretrained, dict(patch_size=16, **_dims('large')), kwargs)


@register_model
def simple_vit_huge(pretrained: bool = False, **kwargs) -> SimpleVisionTransformer:
    """ViT-H/16 plain recipe (width 1280, depth 32, 16 heads)."""
    return _model('simple_vit_huge', pretrained, dict(patch_size=16, **_dims('huge')), kwargs)


@register_model
def simple_vit_tiny_patch16_224(pretrained: bool = False, **kwargs) -> SimpleVisionTransformer:
    """ViT-Ti/16 at 224px."""
    return _model('simple_vit_tiny_patch16_224', pretrained, dict(patch_size=16, **_dims('tiny')), kwargs)


@register_model
def simple_vit_small_patch16_224(pretrained: bool = False, **kwargs) -> SimpleVisionTransformer:
    """ViT-S/16 at 224px as big_vision's vit_s16_i1k config: gap, sin-cos, 384-wide pre-logits.

    Tags ``bv_i1k_{300,150,90}ep`` are the published Better-plain-ViT ImageNet-1k weights.
    """
    return _model(
        'simple_vit_small_patch16_224', pretrained, dict(patch_size=16, rep_size=384, **_dims('small')), kwargs)


@register_model
def simple_vit_base_patch16_224(pretrained: bool = False, **kwargs) -> SimpleVisionTransformer:
    """ViT-B/16 at 224px."""
    return _model('simple_vit_base_patch16_224', pretrained, dict(patch_size=16, **_dims('base')), kwargs)


@register_model
def simple_vit_large_patch16_224(pretrained: bool = False, **kwargs) -> SimpleVisionTransformer:
    """ViT-L/16 at 224px."""
    return _model('simple_vit_large_patch16_224', pretrained, dict(patch_size=16, **_dims('large')), kwargs)


@register_model
def simple_vit_huge_patch16_224(pretrained: bool = False, **kwargs) -> SimpleVisionTransformer:
    """ViT-H/16 at 224px."""
    return _model('simple_vit_huge_patch16_224', pretrained, dict(patch_size=16, **_dims('huge')), kwargs)


@register_model
def simple_vit_small_patch32_224(pretrained: bool = False, **kwargs) -> SimpleVisionTransformer:
    """ViT-S/32 at 224px."""
    return _model('simple_vit_small_patch32_224', pretrained, dict(patch_size=32, **_dims('small')), kwargs)


@register_model
def simple_vit_base_patch32_224(pretrained: bool = False, **kwargs) -> SimpleVisionTransformer:
    """ViT-B/32 at 224px."""
    return _model('simple_vit_base_patch32_224', pretrained, dict(patch_size=32, **_dims('base')), kwargs)


@register_model
def simple_vit_tiny_patch4_32(pretrained: bool = False, **kwargs) -> SimpleVisionTransformer:
    """Small-image plain ViT for 32x32 inputs: patch 4, width 192, 3 heads, 6 blocks."""
    return _model(
        'simple_vit_tiny_patch4_32', pretrained,
        dict(img_size=32, patch_size=4, embed_dim=192, depth=6, mlp_dim=768, num_heads=3), kwargs)
