"""The names a ``SimpleViTConfig`` accepts and the small parsers of its values: choice tables, ``pair``,
``activation_name``, ``resample_rule``, the grid rule ``grid_for`` and the state-dict / preprocessing key lists.
Torch-free, and importing nothing of the package but its error type and the sources' named rules
(``source_rules``), so ``parts`` and ``config`` both build on it.
"""
from typing import TYPE_CHECKING, Any, Callable, Tuple, Union

from .errors import ViTVariantsError
from .source_rules import REL_POS_RESAMPLE_RULES, RESAMPLE_RULE_NAMES, ROPE_TYPES  # noqa: F401  (the choices' names)

if TYPE_CHECKING:
    import torch

PATCH_EMBED_TYPES = ('conv', 'linear', 'conv_stem', 'overlap', 'mlp')
PATCH_NORM_TYPES = (None, 'pre', 'post', 'dual')
# The transformer blocks: timm's pre-norm ``Block`` (``RopeBlock`` with rotary positions), or timm's ``EvaBlock``
# (q/v-only bias, LayerScale ``gamma_1``/``gamma_2``, fused or split qkv, SwiGLU with or without sub-LN); timm's
# post-norm ``ResPostBlock`` and ``EvaBlockPostNorm``, its ``ParallelThingsBlock`` (two attention branches, then two
# MLP branches) and ``ParallelScalingBlock`` (attention and MLP side by side off one fused input projection); a
# family adds its own kind here (``add_block_type``) beside its builder in ``layers.BLOCKS``.
BLOCK_TYPES: Tuple[str, ...] = ('vit', 'eva', 'res_post', 'eva_post', 'parallel', 'parallel_scaling')
# The attention of a block: timm's ``Attention`` or its ``DiffAttention`` (Ye et al. 2024, differential attention).
ATTN_TYPES = ('attention', 'diff')
ACT_LAYERS = ('gelu_tanh', 'gelu', 'quick_gelu', 'silu', 'relu')
# The blocks' MLP: timm's Mlp, its SwiGLUPacked (one fc1 holding both halves, silu(first) * second; DINOv2 ViT-g),
# or its SwiGLU (separate fc1_g gate and fc1_x value; DINOv3 H+'s w1/w2/w3).
MLP_LAYERS = ('mlp', 'swiglu_packed', 'swiglu')
# The model's norm layer (timm's ``LayerNorm`` or ``RmsNorm``), used for every norm as timm's ``norm_layer``.
NORM_TYPES = ('layernorm', 'rmsnorm')


def add_block_type(name: str) -> None:
    """Register a family's block kind (its builder goes into ``layers.BLOCKS``), so a config may name it."""
    global BLOCK_TYPES
    if name not in BLOCK_TYPES:
        BLOCK_TYPES = BLOCK_TYPES + (name,)


def block_types() -> Tuple[str, ...]:
    """The block kinds a config may name now: ``BLOCK_TYPES`` and those families added."""
    return BLOCK_TYPES


def resample_rule(name: Any) -> str:
    """``name`` if it names a learned-table resample rule (``RESAMPLE_RULE_NAMES``), else ViTVariantsError."""
    if name not in RESAMPLE_RULE_NAMES:
        raise ViTVariantsError(f'unknown position-table resample rule {name!r}; expected one of '
                               f'{list(RESAMPLE_RULE_NAMES)}', key='pos_embed_resample')
    return name


def pair(value: Any, name: str = 'size') -> Tuple[int, int]:
    """An int or a one/two-element sequence as a positive (H, W) pair."""
    values = (value, value) if isinstance(value, int) and not isinstance(value, bool) else tuple(value) \
        if isinstance(value, (list, tuple)) else None
    if values is not None and len(values) == 1:
        values = values * 2
    if values is None or len(values) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0
                                                     for v in values):
        raise ViTVariantsError(f'{name} must be a positive int or (H, W) pair, got {value!r}', key=name)
    return int(values[0]), int(values[1])


def activation_name(act: Union[str, Callable, Any]) -> str:
    """The ``act_layer`` name of an activation given as a name, a class or a module."""
    if isinstance(act, str):
        return act
    cls = act if isinstance(act, type) else type(act)
    name = cls.__name__
    approximate = getattr(act, 'approximate', 'none') if not isinstance(act, type) else 'none'
    if name == 'GELUTanh' or (name == 'GELU' and approximate == 'tanh'):
        return 'gelu_tanh'
    known = {'GELU': 'gelu', 'QuickGELU': 'quick_gelu', 'SiLU': 'silu', 'ReLU': 'relu'}
    if name in known:
        return known[name]
    raise ViTVariantsError(f'unsupported MLP activation {name}; use one of {ACT_LAYERS}', key='act_layer')


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def grid_for(img_size: Tuple[int, int], patch_size: Tuple[int, int], pad: bool = True) -> Tuple[int, int]:
    """Token grid for an image size: ceil division when padding, floor division otherwise (strict, crop)."""
    if pad:
        return -(-img_size[0] // patch_size[0]), -(-img_size[1] // patch_size[1])
    return img_size[0] // patch_size[0], img_size[1] // patch_size[1]


def is_family_architecture(name: Any) -> bool:
    """Whether a ``config.json`` ``architecture`` names a member of this family (registered or not)."""
    return isinstance(name, str) and name.startswith('simple_vit')


# The flat ``pos_embed`` values release 0.2.0 accepted: '+'-joined scheme names, 'none' for no scheme.
POS_EMBED_TYPES = ('sincos', 'learn', 'none', 'cpe', 'sincos+cpe', 'learn+cpe', 'rope', 'learn+rope', 'relpos',
                   'learn+relpos')
# What the model does with an input size the patch does not divide: pad it right/bottom, refuse it,
# pad and then pool the token grid to the nominal one (the same token count at every size), or crop the
# remainder away as a VALID convolution does (big_vision's and timm's patch conv).
GRID_MODES = ('pad', 'strict', 'pool', 'crop')
# One tensor of a state dict: (key, shape, dtype); ``SimpleVisionTransformer.state_layout`` lists them.
TensorSpec = Tuple[str, Tuple[int, ...], 'torch.dtype']
# The classifier's tensors (DeiT's distillation head too): left out when a conversion or load changes the class count.
HEAD_KEYS = ('head.weight', 'head.bias', 'head_dist.weight', 'head_dist.bias')
# The timm ``pretrained_cfg`` fields of a set of weights' preprocessing (a source records them, or they are assumed).
PREPROCESSING_KEYS = ('mean', 'std', 'interpolation', 'crop_pct', 'crop_mode')
# The timm ``pretrained_cfg`` fields that belong to a set of weights (their preprocessing), not to the network.
DATA_CONFIG_KEYS = PREPROCESSING_KEYS + ('license',)
