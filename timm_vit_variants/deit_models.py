"""The DeiT members of the family: their ``MODELS`` rows and the tags of their published weights.

Sizes, files and preprocessing are facebookresearch/deit's own (``models.py``, ``models_v2.py``, ``README_deit.md``,
``README_revenge.md``, ``main.py``, ``datasets.py``). The weights load through our reader (``custom_load``: timm
hands the downloaded file to ``load_pretrained``), which reads DeiT's ``{'model': state_dict}`` releases.
"""
from typing import Any, Dict, Tuple

__all__ = ['DEIT_ROWS', 'DEIT_CFGS', 'DEIT3', 'DEIT3_ROWS', 'DEIT3_CFGS']

_IMAGENET = dict(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
_DEIT_PAPER = ('arXiv:2012.12877', 'Training data-efficient image transformers & distillation through attention')
_ORIGIN = 'https://github.com/facebookresearch/deit'

# -- DeiT v1 (ImageNet-1k; timm's VisionTransformer, and DeiT's DistilledVisionTransformer) --------------------------
# models.py: patch 16, MLP ratio 4, qkv bias, LayerNorm eps 1e-6, a learned table with a [CLS] slot (and one for the
# distillation token), [CLS] pooling; main.py resizes the table bicubic, align_corners=False, square grids only.
# The 1000 ImageNet classes are the tags' num_classes, so a folder's own count still wins.
_DEIT_V1 = dict(patch_size=16, global_pool='token', class_token=True, pos_embed='learn',
                pos_embed_cls_slot=True, pos_embed_resample='deit', act_layer='gelu', norm_eps=1e-6)
# (size, image size, distilled) -> the release's file hash, from README_deit.md
_DEIT_V1_FILES: Dict[Tuple[str, int, bool], str] = {
    ('tiny', 224, False): 'a1311bcf', ('small', 224, False): 'cd65a155', ('base', 224, False): 'b5f2ef4d',
    ('tiny', 224, True): 'b40b3cf7', ('small', 224, True): '649709d9', ('base', 224, True): 'df68dfff',
    ('base', 384, False): '8de9b5d1', ('base', 384, True): 'd0272ac0',
}
_DEIT_V1_URL = 'https://dl.fbaipublicfiles.com/deit/deit_{s}_{d}patch16_{i}-{h}.pth'


def _deit_v1_name(size: str, img: int, distilled: bool) -> str:
    return f'simple_vit_{size}_patch16_deit{"_distilled" if distilled else ""}_{img}'


def _deit_v1_cfg(size: str, img: int, distilled: bool, digest: str) -> Dict[str, Any]:
    # DeiT's eval (datasets.py build_transform): resize to int(img / 0.875) bicubic, centre crop img
    return dict(url=_DEIT_V1_URL.format(s=size, d='distilled_' if distilled else '', i=img, h=digest), custom_load=True,
                num_classes=1000, input_size=(3, img, img), pool_size=None, crop_pct=0.875, crop_mode='center',
                interpolation='bicubic', fixed_input_size=False, first_conv='patch_embed.proj', classifier='head',
                license='apache-2.0', origin_url=_ORIGIN, paper_ids=_DEIT_PAPER[0], paper_name=_DEIT_PAPER[1],
                **_IMAGENET)


# name -> (variant, arguments, description): ``config.MODELS`` rows (this module imports nothing of the package).
DEIT_ROWS: Dict[str, Tuple[str, Dict[str, Any], str]] = {
    **{_deit_v1_name(size, img, distilled): (
        size, dict(_DEIT_V1, img_size=img, dist_token=distilled),
        f'DeiT-{size[0].upper()}/16 {"distilled " if distilled else ""}at {img}px (facebookresearch/deit, ImageNet-1k): '
        '[CLS] pooling, a learned table with a [CLS] slot' +
        (', a distillation token with its own slot and head_dist, the logits the mean of the two heads.'
         if distilled else '.')) for size, img, distilled in _DEIT_V1_FILES},
}

DEIT_CFGS: Dict[str, Dict[str, Any]] = {
    **{f'{_deit_v1_name(size, img, distilled)}.fb_in1k': _deit_v1_cfg(size, img, distilled, digest)
       for (size, img, distilled), digest in _DEIT_V1_FILES.items()},
}


# -- DeiT-III ---------------------------------------------------------------------------------------------------------
# facebookresearch/deit models_v2.py (``deit_{size}_patch{p}_LS``) and README_revenge.md: ImageNet-1k and ImageNet-21k
# -> 1k classifiers, ``https://dl.fbaipublicfiles.com/deit/deit_3_{size}_{img}_{1k,21k}.pth`` (``{'model': ...}``).
# Eval preprocessing as every README_revenge command runs it: ``--eval-crop-ratio 1.0``, bicubic (datasets.py
# ``interpolation=3``), ImageNet mean and std. (timm's deit3_*.fb_in1k 224 tags use crop_pct 0.9.)
_DEIT3_SIZES: Dict[str, Tuple[str, int, Dict[str, Any], Tuple[int, ...]]] = {
    # size -> (VARIANTS row, patch, dims beyond the variant's, published image sizes)
    'small': ('small', 16, {}, (224, 384)),
    'medium': ('small', 16, dict(embed_dim=512, num_heads=8, mlp_dim=2048), (224,)),
    'base': ('base', 16, {}, (224, 384)),
    'large': ('large', 16, {}, (224, 384)),
    'huge': ('huge', 14, {}, (224,)),
}
# What every DeiT-III row shares; the reader starts from it.
DEIT3 = dict(num_classes=1000, global_pool='token', class_token=True, init_values=1e-4, pos_embed='learn',
             pos_embed_cls_slot=False, pos_embed_resample='deit', act_layer='gelu', norm_eps=1e-6, grid_mode='crop')
_DEIT3_URL = 'https://dl.fbaipublicfiles.com/deit/deit_3_{size}_{img}_{data}.pth'
# tag -> the file's suffix (README_revenge.md: the 21k ViT-H file is the ``_v1`` one)
_DEIT3_TAGS = {'fb_in1k': '1k', 'fb_in22k_ft_in1k': '21k'}
_DEIT3_PAPER = ('arXiv:2204.07118', 'DeiT III: Revenge of the ViT')


def _deit3_name(size: str, patch: int, img: int) -> str:
    return f'simple_vit_{size}_patch{patch}_deit3_{img}'


DEIT3_ROWS: Dict[str, Tuple[str, Dict[str, Any], str]] = {
    _deit3_name(size, patch, img): (
        variant, dict(DEIT3, patch_size=patch, img_size=img, **dims),
        f'DeiT-III ViT-{size[0].upper()}/{patch} at {img}px (facebookresearch/deit models_v2 '
        f'deit_{size}_patch{patch}_LS): LayerScale, a table with no [CLS] slot, [CLS] pooling, ImageNet-1k head; '
        "DeiT's table resize.")
    for size, (variant, patch, dims, imgs) in _DEIT3_SIZES.items() for img in imgs}

DEIT3_CFGS: Dict[str, Dict[str, Any]] = {
    f'{_deit3_name(size, patch, img)}.{tag}': dict(
        url=_DEIT3_URL.format(size=size, img=img, data=data + ('_v1' if (size, data) == ('huge', '21k') else '')),
        custom_load=True, num_classes=1000, input_size=(3, img, img), pool_size=None, crop_pct=1.0,
        interpolation='bicubic', fixed_input_size=False, first_conv='patch_embed.proj', classifier='head',
        license='apache-2.0', origin_url='https://github.com/facebookresearch/deit', paper_ids=_DEIT3_PAPER[0],
        paper_name=_DEIT3_PAPER[1], **_IMAGENET)
    for size, (_, patch, _, imgs) in _DEIT3_SIZES.items() for img in imgs for tag, data in _DEIT3_TAGS.items()}
