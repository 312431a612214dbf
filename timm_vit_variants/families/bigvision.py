"""big_vision (google-research/big_vision) and vit_jax: their ``.npz`` archives, the FlexiViT rows and tags, and the
tags of the Better-plain-ViT ImageNet-1k weights on the plain-recipe row ``simple_vit_small_patch16_224``. The
readers stay in ``checkpoints.flax``; SigLIP's towers, also big_vision's, are their own family (``siglip``).
"""
from typing import Any, Dict

from ..cfgs import pretrained_cfg
from ..checkpoints.flax import BigVisionCheckpoint, BigVisionNaFlexCheckpoint, VitJaxCheckpoint, is_flat_patch_kernel
from ..checkpoints.routes import Route
from ..checkpoints.stores import NpzStore
from ..model_table import ModelEntry
from .registry import Family

__all__ = ['FAMILY']

_BV_URL = 'https://storage.googleapis.com/big_vision/vit_s16_i1k_{}ep.npz'
_FLEXI_URL = 'https://storage.googleapis.com/big_vision/flexivit/flexivit_{}_i1k.npz'
# FlexiViT's published ImageNet-1k models: tok pooling, a learned table without a cls slot, 240px.
_FLEXI = {'img_size': 240, 'patch_size': 16, 'class_token': True, 'global_pool': 'token', 'pos_embed': 'learn',
          'pos_embed_resample': 'flexi'}
_SIZES = ('small', 'base', 'large')


def _bv_cfg(epochs: int) -> Dict[str, Any]:
    return pretrained_cfg(
        url=_BV_URL.format(epochs),
        custom_load=True,
        paper_ids='arXiv:2205.01580',
        paper_name='Better plain ViT baselines for ImageNet-1k',
        origin_url='https://github.com/google-research/big_vision',
        notes=(f'big_vision vit_s16_i1k {epochs}ep: gap pooling, sincos2d posemb, rep_size=384',),
    )


def _flexi_cfg(size: str) -> Dict[str, Any]:
    # big_vision's i1k evaluation: squash-resize to 274, centre crop 240, pixels in [-1, 1].
    return pretrained_cfg(
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


def _npz(p: Any) -> bool:
    return isinstance(p.store, NpzStore)


FAMILY = Family(
    'bigvision',
    rows={f'simple_vit_{size}_flexi_240': ModelEntry(
        size, _FLEXI,
        f'FlexiViT-{size[0].upper()} (big_vision proj/flexi): 240px, [CLS] pooling, a learned table resampled like '
        'FlexiViT at run time; create it with any patch_size= to load the published weights at that patch size '
        '(tag bv_i1k_1200ep).') for size in _SIZES},
    cfgs={**{f'simple_vit_{size}_flexi_240.bv_i1k_1200ep': _flexi_cfg(size) for size in _SIZES},
          **{f'simple_vit_small_patch16_224.bv_i1k_{epochs}ep': _bv_cfg(epochs) for epochs in (300, 150, 90)}},
    # vit_jax's archives (their second attention block and posembed_input) before big_vision's; the NaFlex
    # archives by their flat patch kernel; an archive without encoder blocks is refused by the core row 200
    routes=(Route(100., lambda p: _npz(p) and p.has('MultiHeadDotProductAttention_1/', 'posembed_input/'),
                  VitJaxCheckpoint),
            Route(300., lambda p: _npz(p) and is_flat_patch_kernel(p.store, p.options.prefix),
                  BigVisionNaFlexCheckpoint),
            Route(400., _npz, BigVisionCheckpoint)),
)
