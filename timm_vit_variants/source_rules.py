"""The named rules of the sources this package reproduces, shared by several families: how each resizes a learned
position table, how a relative-position table is resized, and the rotary-position forms. Each rule is named for
the source whose rule it is; these names are values of ``config.json`` (``pos_embed_resample``,
``rel_pos_resample``, ``rope_type``). Torch-free data: ``geometry`` and ``posemb`` apply the table rules,
``relpos_resize`` the relative-position ones, ``rope`` the rotary forms.
"""
from typing import Dict, Optional, Tuple

__all__ = ['RESAMPLE_RULES', 'RESAMPLE_OFFSETS', 'RESAMPLE_RULE_NAMES', 'REL_POS_RESAMPLE_RULES',
           'DEFAULT_REL_POS_RULE', 'ROPE_TYPES', 'DEFAULT_ROPE_TYPE', 'ROPE_SCALED_TO_GRID']

# How each ecosystem resizes a learned table: (mode, align_corners, antialias).
#   bigvision: scipy.ndimage.zoom(order=1) at load time (big_vision vit.resample_posemb, vit_jax
#              checkpoint.interpolate_posembed) == bilinear with align_corners=True;
#   timm:      resample_abs_pos_embed, bicubic with antialias;
#   hf:        transformers interpolate_pos_encoding, bicubic without antialias;
#   flexi:     big_vision FlexiViT at run time, jax.image.resize 'linear' (half-pixel, antialiased).
#   dinov2:    DINOv2's interpolate_pos_encoding without registers: bicubic, no antialias, sampled at the scale
#              (new + 0.1) / old (``RESAMPLE_OFFSETS``), not the one the output size implies. Its register models
#              (offset 0, antialias) resize exactly as 'timm'.
#   openclip:  open_clip resize_pos_embed, bicubic with antialias, [CLS] row kept, the stored grid square (the
#              same numbers as timm's; open_clip skips the resize when the token count is unchanged, this never does).
#   ropevit:   RoPE-ViT's ``_ape`` models (``forward_features``): bicubic, no antialias, a table with no [CLS] slot
#              (the numbers of 'hf'; RoPE-ViT skips the resize when the token count is unchanged, this never does).
#   deit:      DeiT's ``main.py`` (``--finetune``): bicubic, ``align_corners=False``, no antialias, prefix rows kept,
#              square grids only (the numbers of 'hf'; the verification refuses a non-square grid for it).
RESAMPLE_RULES: Dict[str, Tuple[str, Optional[bool], bool]] = {
    'bigvision': ('bilinear', True, False),
    'timm': ('bicubic', None, True),
    'hf': ('bicubic', False, False),
    'flexi': ('bilinear', False, True),
    'dinov2': ('bicubic', False, False),
    'openclip': ('bicubic', False, True),
    'ropevit': ('bicubic', False, False),
    'deit': ('bicubic', False, False),
}
# Rules that pass F.interpolate a scale factor (new + offset) / old per axis instead of the output size.
RESAMPLE_OFFSETS: Dict[str, float] = {'dinov2': 0.1}
RESAMPLE_RULE_NAMES = tuple(RESAMPLE_RULES)

# How a relative-position table is resized for another nominal grid: BEiT's own rule (a geometric progression and
# a cubic spline) or timm's ``resize_rel_pos_bias_table`` (linear); the first is the default.
REL_POS_RESAMPLE_RULES = ('beit', 'timm')
DEFAULT_REL_POS_RULE = REL_POS_RESAMPLE_RULES[0]

# The rotary-position forms: DINOv3's, RoPE-ViT's axial and mixed (learned frequencies), EVA-02's; the first is
# the default. The forms in ``ROPE_SCALED_TO_GRID`` scale positions to a reference (pretraining) grid.
ROPE_TYPES = ('dinov3', 'axial', 'mixed', 'eva02')
DEFAULT_ROPE_TYPE = ROPE_TYPES[0]
ROPE_SCALED_TO_GRID = ('eva02',)
