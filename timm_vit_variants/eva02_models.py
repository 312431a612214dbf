"""The EVA-02 members of the family: their ``MODELS`` rows, the tags of BAAI's published weights, and the facts of
the family the files do not record.

Sizes and options are EVA-02's own (baaivision/EVA ``EVA-02/asuka/modeling_finetune.py`` and
``modeling_pretrain.py``: ``eva02_{tiny,small}_patch14_xattn_fusedLN_SwiGLU_preln_RoPE`` and
``eva02_{base,large}_patch14_xattn_fusedLN_NaiveSwiGLU_subln_RoPE``), the same as timm's ``eva02_*`` entries:

* patch 14, LayerNorm eps 1e-6, q/v-only bias, a learned table with a [CLS] slot, 2D RoPE (theta 10000) with positions
  scaled to the 16x16 pretraining grid (``pt_hw_seq_len=16``, timm's ``ref_feat_shape=(16, 16)``);
* SwiGLU of width ``int(D * 4 * 2 / 3)``: packed (xformers' ``w12``) for Ti/S, split with the sub-LN ``ffn_ln``
  and split q/k/v projections for B/L;
* fine-tuned classifiers pool the patch tokens with ``fc_norm`` (``use_mean_pooling``); the MIM backbones keep their
  final ``norm`` on every token and have no classifier (``mask_token`` and ``lm_head`` are pretraining-only).

Fine-tuning at another size resizes the table as ``run_class_finetuning.py`` does: bicubic, ``align_corners=False``,
no antialias, the [CLS] row kept, which is DeiT's ``main.py`` rule (our 'deit'). EVA-02 takes one integer image
size, so it defines no non-square grid. The weights are BAAI's files on the Hub (``Yuxin-CV/EVA-02``), read by our
reader (``custom_load='hf'``).
"""
from typing import Any, Dict, Tuple

from .clip_models import OPENAI_MEAN, OPENAI_STD

__all__ = ['EVA02', 'EVA02_ROWS', 'EVA02_CFGS', 'EVA02_REF_GRID', 'EVA02_ROPE_THETA', 'EVA02_MEAN', 'EVA02_STD',
           'eva02_swiglu_width']

# EVA-02's pretraining grid (224 px at patch 14): RoPE positions are scaled to it at every fine-tuning size.
EVA02_REF_GRID = 16
EVA02_ROPE_THETA = 10000.
# OpenAI CLIP's statistics, which EVA-02's datasets.py normalises with (without --imagenet_default_mean_and_std).
EVA02_MEAN, EVA02_STD = OPENAI_MEAN, OPENAI_STD


def eva02_swiglu_width(dim: int) -> int:
    """EVA-02's SwiGLU hidden width: ``int(dim * mlp_ratio)`` with ``mlp_ratio = 4 * 2 / 3``."""
    return int(dim * (4 * 2 / 3))


# size -> (BAAI's file letter, width, depth, heads, B/L style: split qkv and sub-LN SwiGLU)
_SIZES: Dict[str, Tuple[str, int, int, int, bool]] = {
    'tiny': ('Ti', 192, 12, 3, False), 'small': ('S', 384, 12, 6, False),
    'base': ('B', 768, 12, 12, True), 'large': ('L', 1024, 24, 16, True),
}
# What every EVA-02 network shares (the rows and the reader start from it).
EVA02 = dict(patch_size=14, class_token=True, global_pool='avg', pos_embed='learn+rope', pos_embed_cls_slot=True,
             pos_embed_resample='deit', rope_type='eva02', rope_theta=EVA02_ROPE_THETA, rope_ref_grid=EVA02_REF_GRID,
             block_type='eva', qkv_bias=True, act_layer='silu', norm_eps=1e-6, grid_mode='crop')
_FT_SIZE = {'tiny': 336, 'small': 336, 'base': 448, 'large': 448}  # the fine-tuned classifiers' size
_PT_SIZE = 224


def _args(size: str, img: int) -> Dict[str, Any]:
    _, dim, depth, heads, split = _SIZES[size]
    mlp = dict(mlp_layer='swiglu', mlp_norm=True, qkv_fused=False) if split else dict(mlp_layer='swiglu_packed')
    head = dict(num_classes=1000, fc_norm=True) if img != _PT_SIZE else dict(num_classes=0, fc_norm=False)
    return dict(EVA02, img_size=img, embed_dim=dim, depth=depth, num_heads=heads, mlp_dim=eva02_swiglu_width(dim),
                **mlp, **head)


def _name(size: str, img: int) -> str:
    return f'simple_vit_{size}_patch14_eva02_{img}'


# name -> (variant, arguments, description): ``config.MODELS`` rows (this module imports nothing of the package).
EVA02_ROWS: Dict[str, Tuple[str, Dict[str, Any], str]] = {
    **{_name(size, img): (
        size, _args(size, img),
        f'EVA-02 {letter}/14 at {img}px (baaivision/EVA): q/v-only bias, '
        f'{"split qkv, SwiGLU with sub-LN" if split else "packed SwiGLU"}, RoPE scaled to the 16x16 pretraining grid, '
        'a learned table with a [CLS] slot' +
        (', mean pooling with fc_norm, ImageNet head.' if img != _PT_SIZE else
         '; the MIM backbone: the final norm on every token, no classifier.'))
       for size, (letter, _, _, _, split) in _SIZES.items() for img in (_PT_SIZE, _FT_SIZE[size])},
}

_HUB = 'Yuxin-CV/EVA-02'
_PAPER = ('arXiv:2303.11331', 'EVA-02: A Visual Representation for Neon Genesis')
_ORIGIN = 'https://github.com/baaivision/EVA/tree/master/EVA-02'
# (size, tag) -> (the file under the Hub repo, classes, eval crop mode), from EVA-02/asuka/README.md's tables
_FILES: Dict[Tuple[str, str], Tuple[str, int, str]] = {
    **{(size, 'mim_in22k'): (f'eva02/pt/eva02_{_SIZES[size][0]}_pt_in21k_p14.pt', 0, 'center') for size in _SIZES},
    ('large', 'mim_m38m'): ('eva02/pt/eva02_L_pt_m38m_p14.pt', 0, 'center'),
    **{(size, 'mim_in22k_ft_in1k'): (f'eva02/cls/in1k/eva02_{_SIZES[size][0]}_pt_in21k_ft_in1k_p14.pt', 1000, 'center')
       for size in _SIZES},
    ('large', 'mim_m38m_ft_in1k'): ('eva02/cls/in1k/eva02_L_pt_m38m_ft_in1k_p14.pt', 1000, 'center'),
    **{(size, f'mim_{data}_ft_in22k_in1k'): (
        f'eva02/cls/in21k_to_in1k/eva02_{_SIZES[size][0]}_pt_{pt}_medft_in21k_ft_in1k_p14.pt', 1000, 'squash')
       for size, data, pt in (('base', 'in22k', 'in21k'), ('large', 'in22k', 'in21k'), ('large', 'm38m', 'm38m'))},
    **{(size, f'mim_{data}_ft_in22k'): (
        f'eva02/cls/in21k/eva02_{_SIZES[size][0]}_pt_{pt}_medft_in21k_p14.pt', 21841, 'squash')
       for size, data, pt in (('base', 'in22k', 'in21k'), ('large', 'in22k', 'in21k'), ('large', 'm38m', 'm38m'))},
}


def _cfg(size: str, file: str, num_classes: int, crop_mode: str) -> Dict[str, Any]:
    img = _PT_SIZE if not num_classes else _FT_SIZE[size]
    return dict(url='', hf_hub_id=_HUB, hf_hub_filename=file, custom_load='hf', num_classes=num_classes,
                input_size=(3, img, img), pool_size=None, crop_pct=1.0, crop_mode=crop_mode, interpolation='bicubic',
                fixed_input_size=False, first_conv='patch_embed.proj', classifier='head', mean=EVA02_MEAN,
                std=EVA02_STD, license='mit', origin_url=_ORIGIN, paper_ids=_PAPER[0], paper_name=_PAPER[1])


EVA02_CFGS: Dict[str, Dict[str, Any]] = {
    f'{_name(size, _PT_SIZE if not classes else _FT_SIZE[size])}.{tag}': _cfg(size, file, classes, crop)
    for (size, tag), (file, classes, crop) in _FILES.items()
}
