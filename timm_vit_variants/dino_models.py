"""The DINOv2, DINOv3 and RoPE-ViT members of the family: their ``MODELS`` rows and the tags of their published weights.

Sizes are each project's own (``dinov2/hub/backbones.py`` and ``models/vision_transformer.py``,
``dinov3/hub/backbones.py``, RoPE-ViT ``models/vit_rope.py``), with each project's SwiGLU hidden-size rounding
applied here, so ``mlp_dim`` is the exact width of the published tensors:

* DINOv2 ViT-g (``swiglufused``): ``(int(4D * 2/3) + 7) // 8 * 8`` = 4096 at D = 1536;
* DINOv3 S+, L+, H+ (``swiglu``, ``align_to=8``): ``d + (-d % 8)`` with ``d = int(6D * 2/3)``;
* DINOv3 7B (``swiglu64``): ``d + (-d % 64)`` with ``d = int(3D * 2/3)`` = 8192 at D = 4096.

The weights load through each family's reader (``custom_load``: timm hands the downloaded file to
``load_pretrained``; RoPE-ViT's from their Hub repos). DINOv3's downloads are licence-gated: Meta hands out the links after the DINOv3 licence
is accepted, so its tags name the file the hub code builds and cannot be downloaded without that step.
"""
from typing import Any, Dict, Tuple

__all__ = ['DINO_ROWS', 'DINO_CFGS', 'DINOV2', 'DINOV2_HEADS', 'DINOV3', 'DINOV3_HEADS', 'ROPEVIT', 'ROPEVIT_KINDS',
           'EVA_ROPE', 'eva_rope_args', 'dinov2_swiglu_width', 'dinov3_swiglu_width']

_IMAGENET = dict(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))


def dinov2_swiglu_width(dim: int, ratio: float = 4.) -> int:
    """DINOv2's ``SwiGLUFFNFused`` hidden width."""
    return (int(int(dim * ratio) * 2 / 3) + 7) // 8 * 8


def dinov3_swiglu_width(dim: int, ratio: float, align_to: int = 8) -> int:
    """DINOv3's ``SwiGLUFFN`` hidden width (``'swiglu'``: ``align_to=8``; the 7B's ``'swiglu64'``: 64)."""
    d = int(int(dim * ratio) * 2 / 3)
    return d + (-d % align_to)


# -- DINOv2 (LVD-142M; 518 px, patch 14; hub files dinov2_vit{s,b,l,g}14[_reg4]_pretrain.pth) -----------------------
_DINOV2_SIZES: Dict[str, Tuple[str, Dict[str, Any]]] = {
    'small': ('s', dict(embed_dim=384, depth=12, num_heads=6, mlp_dim=1536)),
    'base': ('b', dict(embed_dim=768, depth=12, num_heads=12, mlp_dim=3072)),
    'large': ('l', dict(embed_dim=1024, depth=24, num_heads=16, mlp_dim=4096)),
    'giant': ('g', dict(embed_dim=1536, depth=40, num_heads=24, mlp_dim=dinov2_swiglu_width(1536),
                        mlp_layer='swiglu_packed', act_layer='silu')),
}
# What every DINOv2 row shares; the readers start from it (the files record none of it).
DINOV2 = dict(img_size=518, patch_size=14, num_classes=0, global_pool='token', class_token=True, init_values=1.0,
              pos_embed='learn', pos_embed_cls_slot=True, act_layer='gelu', norm_eps=1e-6, grid_mode='crop')
# The hub's head counts by width (the files do not record them).
DINOV2_HEADS = {dims['embed_dim']: dims['num_heads'] for _, dims in _DINOV2_SIZES.values()}
_DINOV2_URL = 'https://dl.fbaipublicfiles.com/dinov2/dinov2_vit{s}14{r}/dinov2_vit{s}14{r}_pretrain.pth'

# -- DINOv3 (LVD-1689M, SAT-493M; patch 16, RoPE, 4 storage tokens) ---------------------------------------------------
# size -> (the hub's compact arch name, dims, {weights: hash}) from dinov3/hub/backbones.py
_DINOV3_SIZES: Dict[str, Tuple[str, Dict[str, Any], Dict[str, str]]] = {
    'small': ('vits16', dict(embed_dim=384, depth=12, num_heads=6, mlp_dim=1536), {'lvd1689m': '08c60483'}),
    'small_plus': ('vits16plus', dict(embed_dim=384, depth=12, num_heads=6, mlp_dim=dinov3_swiglu_width(384, 6),
                                      mlp_layer='swiglu', act_layer='silu'), {'lvd1689m': '4057cbaa'}),
    'base': ('vitb16', dict(embed_dim=768, depth=12, num_heads=12, mlp_dim=3072), {'lvd1689m': '73cec8be'}),
    'large': ('vitl16', dict(embed_dim=1024, depth=24, num_heads=16, mlp_dim=4096),
              {'lvd1689m': '8aa4cbdd', 'sat493m': 'eadcf0ff'}),
    'large_plus': ('vitl16plus', dict(embed_dim=1024, depth=24, num_heads=16, mlp_dim=dinov3_swiglu_width(1024, 6),
                                      mlp_layer='swiglu', act_layer='silu'), {'lvd1689m': '46503df0'}),
    'huge_plus': ('vith16plus', dict(embed_dim=1280, depth=32, num_heads=20, mlp_dim=dinov3_swiglu_width(1280, 6),
                                     mlp_layer='swiglu', act_layer='silu'), {'lvd1689m': '7c1da9a5'}),
    # the 7B: no qkv bias (so no bias_mask), 'swiglu64', fp32 periods; its local_cls_norm is training-only
    '7b': ('vit7b16', dict(embed_dim=4096, depth=40, num_heads=32, mlp_dim=dinov3_swiglu_width(4096, 3, 64),
                           mlp_layer='swiglu', act_layer='silu', qkv_bias=False),
           {'lvd1689m': 'a955f4ea', 'sat493m': 'a6675841'}),
}
# What every DINOv3 row shares; the readers start from it.
DINOV3 = dict(img_size=224, patch_size=16, num_classes=0, global_pool='token', class_token=True, reg_tokens=4,
              init_values=1e-5, pos_embed='rope', rope_type='dinov3', rope_theta=100., act_layer='gelu',
              norm_eps=1e-5, grid_mode='crop')
# The hub's head counts by width (the files do not record them; H+ has 20, not ViT-H's 16).
DINOV3_HEADS = {dims['embed_dim']: dims['num_heads'] for _, dims, _ in _DINOV3_SIZES.values()}
_DINOV3_URL = 'https://dl.fbaipublicfiles.com/dinov3/dinov3_{a}/dinov3_{a}_pretrain_{w}-{h}.pth'

# -- RoPE-ViT (naver-ai, ImageNet-1k DeiT-III classifiers; Hub repos naver-ai/<name>/pytorch_model.bin) --------------
_ROPEVIT_SIZES = {'small': dict(embed_dim=384, depth=12, num_heads=6, mlp_dim=1536),
                  'base': dict(embed_dim=768, depth=12, num_heads=12, mlp_dim=3072),
                  'large': dict(embed_dim=1024, depth=24, num_heads=16, mlp_dim=4096)}
ROPEVIT_KINDS = {'axial': dict(rope_type='axial', rope_theta=100., pos_embed='rope'),
                 'mixed': dict(rope_type='mixed', rope_theta=10., pos_embed='rope'),
                 'axial_ape': dict(rope_type='axial', rope_theta=100., pos_embed='learn+rope'),
                 'mixed_ape': dict(rope_type='mixed', rope_theta=10., pos_embed='learn+rope')}
# What every RoPE-ViT row shares beside its kind; the readers start from it.
ROPEVIT = dict(img_size=224, patch_size=16, num_classes=1000, global_pool='token', class_token=True,
               init_values=1e-4, pos_embed_resample='ropevit', act_layer='gelu', norm_eps=1e-6, grid_mode='crop')
_ROPEVIT_HUB = 'naver-ai/rope_{k}_deit_{s}_patch16_LS'

# Each rope_type as timm's Eva builds it (its DINOv3, RoPE-ViT and EVA-02 models, ``timm/models/eva.py``): the rotary
# module it makes, the Eva arguments that make it, and the timm entries of that port.
EVA_ROPE: Dict[str, Tuple[str, Dict[str, Any], str]] = {
    'dinov3': ('RotaryEmbeddingDinoV3', dict(rope_type='dinov3', rope_grid_indexing='ij', rope_rotate_half=True),
               'vit_*_patch16_dinov3*'),
    'axial': ('RotaryEmbeddingCat', dict(rope_type='cat', rope_grid_indexing='xy', rope_rotate_half=False),
              'vit_*_patch16_rope*_224'),
    'mixed': ('RotaryEmbeddingMixed', dict(rope_type='mixed', rope_grid_indexing='xy', rope_rotate_half=False),
              'vit_*_patch16_rope_mixed*_224'),
    # EVA-02 (eva02_models.py): positions scaled to the pretraining grid, timm's ``ref_feat_shape``
    'eva02': ('RotaryEmbeddingCat', dict(rope_type='cat', rope_grid_indexing='ij', rope_rotate_half=False),
              'eva02_*'),
}


def eva_rope_args(rope_type: str, theta: float) -> Dict[str, Any]:
    """The ``rope_*`` arguments of timm's ``Eva`` that build our ``rope_type`` at base ``theta``."""
    return dict(EVA_ROPE[rope_type][1], rope_temperature=theta)


# name -> (variant, arguments, description): ``config.MODELS`` rows (this module imports nothing of the package).
DINO_ROWS: Dict[str, Tuple[str, Dict[str, Any], str]] = {
    **{f'simple_vit_{size}_patch14{"_reg4" if reg else ""}_dinov2': (
        'base', dict(DINOV2, **dims, reg_tokens=4 if reg else 0, pos_embed_resample='timm' if reg else 'dinov2'),
        f'DINOv2 ViT-{s if s == "g" else s.upper()}/14{" with 4 registers" if reg else ""} (LVD-142M, 518 px): '
        '[CLS] pooling, LayerScale, the '
        f'hub\'s table resize ({"antialiased, no offset" if reg else "scale (n + 0.1) / N"}); no classifier.')
       for size, (s, dims) in _DINOV2_SIZES.items() for reg in (False, True)},
    **{f'simple_vit_{size}_patch16_dinov3': (
        'base', dict(DINOV3, **dims),
        f'DINOv3 {arch}: RoPE (stored periods), 4 registers, '
        f'{"masked k bias" if dims.get("qkv_bias", True) else "no qkv bias"}, LayerScale; no classifier '
        '(tags licence-gated).') for size, (arch, dims, _) in _DINOV3_SIZES.items()},
    **{f'simple_vit_{size}_patch16_rope_{kind}_224': (
        'base', dict(ROPEVIT, **dims, **ROPEVIT_KINDS[kind]),
        f'RoPE-ViT rope_{kind}_deit_{size}_patch16_LS (naver-ai): DeiT-III LayerScale, '
        f'{kind.replace("_", " + ")} RoPE, '
        'ImageNet-1k head.') for size, dims in _ROPEVIT_SIZES.items() for kind in ROPEVIT_KINDS},
}


def _cfg(url: str, img: int, num_classes: int, license_: str, origin: str, paper: Tuple[str, str],
         **kwargs: Any) -> Dict[str, Any]:
    return {**dict(url=url, custom_load=True, num_classes=num_classes, input_size=(3, img, img), pool_size=None,
                   crop_pct=1.0, interpolation='bicubic', fixed_input_size=False, first_conv='patch_embed.proj',
                   classifier='head', license=license_, origin_url=origin, paper_ids=paper[0], paper_name=paper[1],
                   **_IMAGENET), **kwargs}


_DINOV2_PAPER = ('arXiv:2304.07193', 'DINOv2: Learning Robust Visual Features without Supervision')
_DINOV3_PAPER = ('arXiv:2508.10104', 'DINOv3')
_ROPEVIT_PAPER = ('arXiv:2403.13298', 'Rotary Position Embedding for Vision Transformer')

DINO_CFGS: Dict[str, Dict[str, Any]] = {
    **{f'simple_vit_{size}_patch14{"_reg4" if reg else ""}_dinov2.lvd142m': _cfg(
        _DINOV2_URL.format(s=s, r='_reg4' if reg else ''), 518, 0, 'apache-2.0',
        'https://github.com/facebookresearch/dinov2', _DINOV2_PAPER)
       for size, (s, _) in _DINOV2_SIZES.items() for reg in (False, True)},
    **{f'simple_vit_{size}_patch16_dinov3.{weights}': _cfg(
        _DINOV3_URL.format(a=arch, w=weights, h=digest), 224, 0, 'dinov3-license',
        'https://github.com/facebookresearch/dinov3', _DINOV3_PAPER,
        notes=('licence-gated: the download link is handed out after accepting the DINOv3 licence',))
       for size, (arch, _, hashes) in _DINOV3_SIZES.items() for weights, digest in hashes.items()},
    # Every repo's file is pytorch_model.bin: as a URL, timm's download cache (keyed by file name) would hand one
    # release's file to another, so these load from the Hub repo (``custom_load='hf'``: our reader takes the file).
    **{f'simple_vit_{size}_patch16_rope_{kind}_224.naver_in1k': _cfg(
        '', 224, 1000, 'apache-2.0', 'https://github.com/naver-ai/rope-vit', _ROPEVIT_PAPER, crop_pct=0.875,
        hf_hub_id=_ROPEVIT_HUB.format(k=kind, s=size), hf_hub_filename='pytorch_model.bin', custom_load='hf')
       for size in _ROPEVIT_SIZES for kind in ROPEVIT_KINDS},
}
