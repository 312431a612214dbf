"""The model's settings: one frozen ``SimpleViTConfig``, the variant table, and the family's names.

Every constructor argument of ``SimpleVisionTransformer`` is a field here, validated once, with a
JSON round trip (``to_dict`` / ``from_dict``) that ``config.json`` is written from and read back
into. Variants are data, as in big_vision's ``decode_variant``: a name gives width, depth, MLP
width and heads, and each registered model is one row of ``MODELS``.
"""
import dataclasses
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Callable, Dict, Mapping, Optional, Tuple, Union

from .clip_models import CLIP_ROWS
from .beit_models import BEIT_ROWS
from .deit_models import DEIT3_ROWS, DEIT_ROWS
from .dino_models import DINO_ROWS
from .eva02_models import EVA02_ROWS
from .errors import ViTVariantsError
from .limits import DEFAULT_LIMITS, Limits, rel_pos_bytes

if TYPE_CHECKING:
    import torch

__all__ = [
    'SimpleViTConfig', 'Variant', 'VARIANTS', 'MODELS', 'POOL_TYPES', 'POS_EMBED_TYPES', 'RESAMPLE_RULE_NAMES',
    'PATCH_EMBED_TYPES', 'PATCH_NORM_TYPES', 'GRID_MODES', 'ACT_LAYERS', 'SIGLIP_TOWERS', 'pair', 'grid_for',
    'architecture_for',
    'heads_for_width', 'activation_name', 'is_family_architecture', 'resample_rule', 'TensorSpec', 'HEAD_KEYS',
    'DATA_CONFIG_KEYS', 'PREPROCESSING_KEYS', 'MLP_LAYERS', 'ROPE_TYPES', 'REL_POS_RESAMPLE_RULES', 'BLOCK_TYPES',
]

POOL_TYPES = ('avg', 'token', 'map', 'coca', '')
# Each ``pos_embed`` value as (absolute table, CPVT conditional position encoding after the first block).
POS_EMBEDS: Dict[str, Tuple[str, bool]] = {
    'sincos': ('sincos', False), 'learn': ('learn', False), 'none': ('none', False),
    'cpe': ('none', True), 'sincos+cpe': ('sincos', True), 'learn+cpe': ('learn', True),
    # 2D rotary positions in every block's attention (``rope_type``), alone or with a learned table.
    'rope': ('none', False), 'learn+rope': ('learn', False),
    # BEiT's relative position bias in every block's attention, alone (BEiT v2, data2vec) or with a learned table.
    'relpos': ('none', False), 'learn+relpos': ('learn', False),
}
POS_EMBED_TYPES = tuple(POS_EMBEDS)
PATCH_EMBED_TYPES = ('conv', 'linear', 'conv_stem', 'overlap', 'mlp')
PATCH_NORM_TYPES = (None, 'pre', 'post', 'dual')
# What the model does with an input size the patch does not divide: pad it right/bottom, refuse it,
# pad and then pool the token grid to the nominal one (the same token count at every size), or crop the
# remainder away as a VALID convolution does (big_vision's and timm's patch conv).
GRID_MODES = ('pad', 'strict', 'pool', 'crop')
# Names of the learned-table resample rules; their definitions live in ``geometry.RESAMPLE_RULES``.
RESAMPLE_RULE_NAMES = ('bigvision', 'timm', 'hf', 'flexi', 'dinov2', 'openclip', 'ropevit', 'deit')
# The rotary-position forms (``rope.py``): DINOv3's, RoPE-ViT's axial and mixed (learned frequencies), EVA-02's.
ROPE_TYPES = ('dinov3', 'axial', 'mixed', 'eva02')
# The transformer blocks: timm's pre-norm ``Block`` (``RopeBlock`` with rotary positions), or timm's ``EvaBlock``
# (EVA-02: q/v-only bias, LayerScale ``gamma_1``/``gamma_2``, fused or split qkv, SwiGLU with or without sub-LN).
BLOCK_TYPES = ('vit', 'eva')
# How a relative-position table is resized for another nominal grid (``rel_pos_resample``): BEiT's own rule (a
# geometric progression and a cubic spline, ``relpos_resize.py``) or timm's ``resize_rel_pos_bias_table`` (linear).
REL_POS_RESAMPLE_RULES = ('beit', 'timm')
ACT_LAYERS = ('gelu_tanh', 'gelu', 'quick_gelu', 'silu', 'relu')
# The blocks' MLP: timm's Mlp, its SwiGLUPacked (one fc1 holding both halves, silu(first) * second; DINOv2 ViT-g),
# or its SwiGLU (separate fc1_g gate and fc1_x value; DINOv3 H+'s w1/w2/w3).
MLP_LAYERS = ('mlp', 'swiglu_packed', 'swiglu')
# Constructor arguments that shape training, not the network: never written to config.json.
_TRAINING_ONLY = ('drop_rate', 'pos_drop_rate', 'proj_drop_rate', 'attn_drop_rate', 'drop_path_rate',
                  'patch_drop_rate', 'weight_init')
# Older names still accepted (config.json files carry them) but written under the new name only.
_LEGACY = ('dynamic_img_pad',)

Size = Union[int, Tuple[int, int]]
# One tensor of a state dict: (key, shape, dtype); ``SimpleVisionTransformer.state_layout`` lists them.
TensorSpec = Tuple[str, Tuple[int, ...], 'torch.dtype']
# The classifier's tensors (DeiT's distillation head too): left out when a conversion or load changes the class count.
HEAD_KEYS = ('head.weight', 'head.bias', 'head_dist.weight', 'head_dist.bias')
# The timm ``pretrained_cfg`` fields of a set of weights' preprocessing (a source records them, or they are assumed).
PREPROCESSING_KEYS = ('mean', 'std', 'interpolation', 'crop_pct', 'crop_mode')
# The timm ``pretrained_cfg`` fields that belong to a set of weights (their preprocessing), not to the network.
DATA_CONFIG_KEYS = PREPROCESSING_KEYS + ('license',)


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


def grid_for(img_size: Tuple[int, int], patch_size: Tuple[int, int], pad: bool = True) -> Tuple[int, int]:
    """Token grid for an image size: ceil division when padding, floor division otherwise (strict, crop)."""
    if pad:
        return -(-img_size[0] // patch_size[0]), -(-img_size[1] // patch_size[1])
    return img_size[0] // patch_size[0], img_size[1] // patch_size[1]


def is_family_architecture(name: Any) -> bool:
    """Whether a ``config.json`` ``architecture`` names a member of this family (registered or not)."""
    return isinstance(name, str) and name.startswith('simple_vit')


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


@dataclass(frozen=True)
class SimpleViTConfig:
    """Every constructor argument of ``SimpleVisionTransformer``.

    Attributes:
        img_size: Nominal input size (H, W); any other size also works at forward time.
        patch_size: Patch size (H, W); change it later with ``set_input_size(patch_size=...)``.
        global_pool: 'avg' (big_vision 'gap': norm every token, then mean), 'token', 'map' (big_vision's
            MAPHead: attention pooling with a learned probe, SigLIP's), 'coca' (CoCa's attentional pooler:
            ``attn_pool_queries`` learned queries, LayerNorms on queries and keys, the final norm over its
            outputs, output 0 pooled) or ''.
        mlp_dim: MLP hidden width; None means 4 * embed_dim. For 'swiglu_packed' and 'swiglu' the gated width
            (fc1 is twice it, or fc1_g and fc1_x are it). It is exact: each project's SwiGLU rounding (DINOv2
            ViT-g ``(int(4D*2/3) + 7) // 8 * 8``, DINOv3 ``d + (-d % 8)`` with ``d = int(r*D*2/3)``) is applied
            by whoever writes the config (the readers read it off the tensors, ``dino_models`` computes it).
        mlp_layer: 'mlp' (timm's Mlp), 'swiglu_packed' (timm's SwiGLUPacked) or 'swiglu' (timm's SwiGLU,
            separate gate and value), the last two with act_layer 'silu'.
        init_values: LayerScale (timm's ``ls1``/``ls2``) initial value; None means no LayerScale.
        reg_tokens: Register tokens after the [CLS] token (Darcet et al. 2024), with no position information.
        class_token: Prepend a learned [CLS] token (needed for 'token' pooling).
        dist_token: DeiT's distillation token (Touvron et al. 2021) right after [CLS], with its own table slot next
            to the cls slot and its own classifier ``head_dist``; 'token' pooling then averages the two tokens and the
            logits are the mean of the two heads, as DeiT and timm's ``VisionTransformerDistilled`` compute them.
        patch_embed: How pixels become tokens: 'conv' (one PxP stride-P conv), 'linear' (Unfold + Linear,
            the same weights and numbers as 'conv'), 'conv_stem' (3x3 stride-2 convs + 1x1, Xiao et al.
            2021), 'overlap' (a kernel wider than the stride) or 'mlp' (conv -> activation -> 1x1).
        patch_norm: LayerNorm around the patch projection: None, 'pre' (each patch's pixels), 'post' (the
            embedding) or 'dual' (both, Kumar et al. 2023, Dual PatchNorm).
        pos_embed: 'sincos' (fixed big_vision table, never saved), 'learn' or 'none'; 'cpe' (CPVT's
            depthwise-conv position encoding after the first block), alone or as 'sincos+cpe' / 'learn+cpe';
            'rope' (2D rotary positions of ``rope_type`` in every attention, from each image's own grid), alone
            (DINOv3, RoPE-ViT) or as 'learn+rope' (RoPE-ViT's ``_ape`` models: a learned table too);
            'relpos' (BEiT's relative position bias, one ``rel_pos.tables`` table per block, in every attention),
            alone (BEiT v2, data2vec) or as 'learn+relpos' (BEiT with an absolute table, its [CLS] slot too); it
            needs class_token=True and no registers or distillation token (BEiT's 3 extra table entries are
            [CLS] to token, token to [CLS] and [CLS] to [CLS]).
        rope_type: 'dinov3' (base ``rope_theta``, coordinates normalised per side, half-split rotation, a
            stored ``rope.periods`` buffer), 'axial' (RoPE-ViT: integer coordinates, interleaved pairs), 'mixed'
            (RoPE-ViT: learned per-layer, per-head ``rope.freqs``) or 'eva02' (EVA-02: positions scaled to
            ``rope_ref_grid``, interleaved pairs); see ``rope.py``.
        rope_theta: The RoPE base: DINOv3 and RoPE-ViT axial 100, RoPE-ViT mixed 10 (its frequencies' init),
            EVA-02 10000.
        rope_ref_grid: EVA-02's pretraining grid (16 for 224 px at patch 14), needed by rope_type 'eva02' only:
            its positions are each side's ``arange(n) / n * rope_ref_grid`` (``rope.Eva02Rope``); read from a
            file's stored RoPE tables, else the family's (``eva02_models.EVA02_REF_GRID``).
        block_type: 'vit' (timm's pre-norm ``Block``, qkv with one bias) or 'eva' (timm's ``EvaBlock``, built with
            no prefix tokens: the q/v-only bias of EVA-02 when ``qkv_bias``, LayerScale as ``gamma_1``/``gamma_2``).
        qkv_fused: With block_type 'eva': one ``attn.qkv`` projection (EVA-02 Ti/S) rather than ``attn.q_proj``,
            ``k_proj``, ``v_proj`` (B/L). A 'vit' block's qkv is always fused.
        mlp_norm: With block_type 'eva': the sub-LN of EVA-02 B/L, a LayerNorm on the MLP's hidden features
            (``mlp.norm``, timm's ``scale_mlp``), for mlp_layer 'mlp' or 'swiglu' (split; EVA-02's ``ffn_ln``).
        untie_cls_and_patch_norms: DINOv3's untied final norms: ``cls_norm`` normalises [CLS, registers] and
            ``norm`` the patch tokens.
        pos_embed_cls_slot: A learned table carries a cls slot (vit_jax / timm) rather than being
            added before the cls token is prepended (big_vision).
        pos_embed_resample: How a learned table is resized for another grid (``geometry.RESAMPLE_RULES``).
        rel_pos_resample: How the relative-position tables are resized for another nominal grid (a conversion,
            ``set_input_size``, a load at another size): 'beit' (BEiT's geometric progression and cubic spline,
            square grids only) or 'timm' (timm's ``resize_rel_pos_bias_table``, any grid). At run time a grid
            other than the nominal one always takes timm's rule.
        rep_size: Width of the optional pre-logits layer (Linear + tanh).
        pre_norm: A LayerNorm (``norm_pre``) after the positions and class token are added (CLIP's ``ln_pre``).
        patch_bias: The patch projection has a bias (CLIP's ``conv1`` has none).
        fc_norm: The final LayerNorm runs on the pooled vector instead of every token (timm's name for
            open_clip's ``final_ln_after_pool``; CLIPA's towers).
        final_norm: A final LayerNorm at all (timm's name): False leaves the last block's tokens as they are, as
            transformers' mean-pooled data2vec-vision without its pooling layer gives them; it excludes fc_norm.
        head_bias: The head has a bias; CLIP's projection ``proj`` is a head without one (pooled @ proj).
        attn_pool_queries, attn_pool_heads, attn_pool_dim: CoCa's pooler ('coca'): the query count, its
            heads and its width (the output width; keys and values come in at ``embed_dim``).
        act_layer: MLP activation name; flax ``nn.gelu`` is 'gelu_tanh'.
        norm_eps: LayerNorm epsilon (big_vision/timm 1e-6, transformers 1e-12).
        grid_mode: Input sizes the patch does not divide: 'pad' (right/bottom, the default), 'strict'
            (raise), 'pool' (pad, then adaptive-average-pool the token grid to the nominal grid, so
            every input size gives the same token count) or 'crop' (drop the last pixel rows and
            columns, as big_vision's and timm's VALID patch conv do: 384 px at patch 14 is 27x27).
        dynamic_img_pad: The older name of ``grid_mode`` (True: 'pad', False: 'strict'), accepted from
            callers and config.json files, never written; afterwards True when grid_mode pads ('pad', 'pool').
        patch_drop_rate: NaViT's token dropping in training, for NaFlex inputs (a dict or a list of images):
            each image keeps a random ``1 - rate`` of its patch tokens.
        weight_init: 'jax' (big_vision initialisers, zero head) or 'skip' (to be loaded).
    """
    img_size: Size = 224
    patch_size: Size = 16
    in_chans: int = 3
    num_classes: int = 1000
    global_pool: str = 'avg'
    embed_dim: int = 768
    depth: int = 12
    num_heads: int = 12
    mlp_dim: Optional[int] = None
    mlp_layer: str = 'mlp'
    init_values: Optional[float] = None
    qkv_bias: bool = True
    class_token: bool = False
    dist_token: bool = False
    reg_tokens: int = 0
    patch_embed: str = 'conv'
    patch_norm: Optional[str] = None
    pos_embed: str = 'sincos'
    pos_embed_cls_slot: bool = False
    pos_embed_resample: str = 'bigvision'
    sincos_temperature: float = 10000.
    rope_type: str = 'dinov3'
    rope_theta: float = 100.
    rope_ref_grid: Optional[int] = None
    block_type: str = 'vit'
    qkv_fused: bool = True
    mlp_norm: bool = False
    rel_pos_resample: str = 'beit'
    untie_cls_and_patch_norms: bool = False
    rep_size: Optional[int] = None
    pre_norm: bool = False
    patch_bias: bool = True
    fc_norm: bool = False
    final_norm: bool = True
    head_bias: bool = True
    attn_pool_queries: int = 256
    attn_pool_heads: int = 8
    attn_pool_dim: Optional[int] = None
    act_layer: Any = 'gelu_tanh'
    norm_eps: float = 1e-6
    grid_mode: Optional[str] = None
    dynamic_img_pad: Optional[bool] = None
    drop_rate: float = 0.
    pos_drop_rate: float = 0.
    proj_drop_rate: float = 0.
    attn_drop_rate: float = 0.
    drop_path_rate: float = 0.
    patch_drop_rate: float = 0.
    weight_init: str = 'jax'

    def __post_init__(self) -> None:
        fix = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731  (frozen dataclass)
        fix('img_size', pair(self.img_size, 'img_size'))
        fix('patch_size', pair(self.patch_size, 'patch_size'))
        fix('act_layer', activation_name(self.act_layer))
        fix('mlp_dim', self.mlp_dim or 4 * self.embed_dim if isinstance(self.embed_dim, int) else self.mlp_dim)
        fix('rep_size', self.rep_size or None)
        fix('attn_pool_dim', self.attn_pool_dim or (self.embed_dim if isinstance(self.embed_dim, int) else None))
        fix('grid_mode', self._grid_mode())
        fix('dynamic_img_pad', self.grid_mode in ('pad', 'pool'))
        self._validate()
        # A cls slot exists only in a learned table next to a class token.
        fix('pos_embed_cls_slot', bool(self.pos_embed_cls_slot and self.class_token and self.pos_table == 'learn'))

    def _grid_mode(self) -> str:
        """``grid_mode``, taking the older ``dynamic_img_pad`` into account (a contradiction raises)."""
        legacy, mode = self.dynamic_img_pad, self.grid_mode
        if legacy is not None and not isinstance(legacy, bool):
            raise ViTVariantsError(f'dynamic_img_pad={legacy!r}: expected True, False or None', key='dynamic_img_pad')
        if mode is None:
            return 'strict' if legacy is False else 'pad'
        if mode not in GRID_MODES:
            raise ViTVariantsError(f'grid_mode={mode!r}: expected one of {GRID_MODES}', key='grid_mode')
        if legacy is not None and legacy != (mode in ('pad', 'pool')):
            raise ViTVariantsError(f"dynamic_img_pad={legacy} contradicts grid_mode={mode!r} (the older name: True "
                                   "means 'pad', False means 'strict')", key='dynamic_img_pad')
        return mode

    def _validate(self) -> None:
        def bad(name: str, why: str) -> ViTVariantsError:
            return ViTVariantsError(f'{name}={getattr(self, name)!r}: {why}', key=name)

        for name in ('in_chans', 'embed_dim', 'depth', 'num_heads', 'mlp_dim', 'attn_pool_queries', 'attn_pool_heads',
                     'attn_pool_dim'):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise bad(name, 'expected a positive integer')
        if isinstance(self.num_classes, bool) or not isinstance(self.num_classes, int) or self.num_classes < 0:
            raise bad('num_classes', 'expected an integer >= 0')
        if self.rep_size is not None and (isinstance(self.rep_size, bool) or not isinstance(self.rep_size, int)
                                          or self.rep_size < 1):
            raise bad('rep_size', 'expected a positive integer or None')
        resample_rule(self.pos_embed_resample)
        choices = (('global_pool', POOL_TYPES), ('pos_embed', POS_EMBED_TYPES), ('act_layer', ACT_LAYERS),
                   ('patch_embed', PATCH_EMBED_TYPES), ('patch_norm', PATCH_NORM_TYPES),
                   ('weight_init', ('jax', 'skip')), ('mlp_layer', MLP_LAYERS), ('rope_type', ROPE_TYPES),
                   ('rel_pos_resample', REL_POS_RESAMPLE_RULES))
        for name, allowed in choices:
            if getattr(self, name) not in allowed:
                raise bad(name, f'expected one of {allowed}')
        if self.mlp_layer in ('swiglu_packed', 'swiglu') and self.act_layer != 'silu':
            raise bad('mlp_layer', f"{self.mlp_layer!r} gates with silu: set act_layer='silu'")
        self._validate_rope(bad)
        self._validate_block(bad)
        if isinstance(self.reg_tokens, bool) or not isinstance(self.reg_tokens, int) or self.reg_tokens < 0:
            raise bad('reg_tokens', 'expected an integer >= 0')
        if self.init_values is not None and (isinstance(self.init_values, bool) or
                                             not isinstance(self.init_values, (int, float)) or
                                             self.init_values != self.init_values):
            raise bad('init_values', 'expected a number or None')
        if self.embed_dim % self.num_heads:
            raise bad('num_heads', f'embed_dim {self.embed_dim} is not divisible by {self.num_heads} heads')
        if self.pos_table == 'sincos' and self.embed_dim % 4:
            raise bad('embed_dim', 'a sin-cos position embedding needs a width divisible by 4')
        self._validate_patch_embed(bad)
        if self.global_pool == 'token' and not self.class_token:
            raise bad('global_pool', "'token' pooling needs class_token=True")
        self._validate_dist_token(bad)
        for name in ('pre_norm', 'patch_bias', 'fc_norm', 'final_norm', 'head_bias', 'untie_cls_and_patch_norms'):
            if not isinstance(getattr(self, name), bool):
                raise bad(name, 'expected True or False')
        if self.global_pool == 'coca' and self.attn_pool_dim % self.attn_pool_heads:
            raise bad('attn_pool_heads', f'attn_pool_dim {self.attn_pool_dim} is not divisible by '
                                         f'{self.attn_pool_heads} heads')
        if self.fc_norm and self.global_pool == 'coca':
            raise bad('fc_norm', "'coca' pooling holds its own norm after the pool")
        if not self.final_norm and (self.fc_norm or self.global_pool == 'coca' or self.untie_cls_and_patch_norms):
            raise bad('final_norm', 'without a final norm there is none to put after the pool (fc_norm), in the '
                                    "'coca' pooler or on the prefix tokens (untie_cls_and_patch_norms)")
        for name in ('norm_eps', 'sincos_temperature', 'rope_theta'):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise bad(name, 'expected a positive number')
        for name in _TRAINING_ONLY[:-1]:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
                raise bad(name, 'expected a rate in [0, 1]')
        if self.patch_drop_rate >= 1:
            raise bad('patch_drop_rate', 'expected a rate in [0, 1): every image keeps at least one token')

    def _validate_dist_token(self, bad: Callable[[str, str], ViTVariantsError]) -> None:
        """Refuse a distillation token beside what DeiT's distilled head does not read (timm's asserts the same)."""
        if not isinstance(self.dist_token, bool):
            raise bad('dist_token', 'expected True or False')
        if self.dist_token and (not self.class_token or self.global_pool not in ('token', '') or self.rep_size or
                                self.fc_norm):
            raise bad('dist_token', "DeiT's distilled head reads the [CLS] and distillation tokens: it needs "
                                    "class_token=True, 'token' (or '') pooling, no rep_size and no fc_norm")

    def _validate_rope(self, bad: Callable[[str, str], ViTVariantsError]) -> None:
        """Refuse rotary positions (and untied norms) the network cannot express."""
        if self.pos_rope and (self.embed_dim // self.num_heads) % 4:
            raise bad('num_heads', f'2D rotary positions need a head width divisible by 4, got '
                                   f'{self.embed_dim // self.num_heads}')
        if self.pos_relpos and (not self.class_token or self.reg_tokens or self.dist_token):
            raise bad('pos_embed', "BEiT's relative position bias has table entries for one [CLS] token only: it "
                                   'needs class_token=True, reg_tokens=0 and dist_token=False')
        if self.untie_cls_and_patch_norms and (not self.num_prefix_tokens or self.fc_norm or
                                               self.global_pool == 'coca'):
            raise bad('untie_cls_and_patch_norms', 'needs prefix tokens ([CLS] or registers) and the final norm '
                                                   'on every token (no fc_norm, no coca pooler)')

    def _validate_block(self, bad: Callable[[str, str], ViTVariantsError]) -> None:
        """Refuse block options only timm's ``EvaBlock`` has on a 'vit' block, and EVA-02's RoPE without its grid."""
        if self.block_type not in BLOCK_TYPES:
            raise bad('block_type', f'expected one of {BLOCK_TYPES}')
        for name in ('qkv_fused', 'mlp_norm'):
            if not isinstance(getattr(self, name), bool):
                raise bad(name, 'expected True or False')
        if self.block_type == 'vit' and (not self.qkv_fused or self.mlp_norm):
            raise bad('qkv_fused' if not self.qkv_fused else 'mlp_norm', "split q/k/v projections and the MLP's "
                                                                         "sub-LN are EvaBlock's: set block_type='eva'")
        if self.mlp_norm and self.mlp_layer == 'swiglu_packed':
            raise bad('mlp_norm', "timm's EvaBlock normalises a SwiGLU's hidden features only in its split form: "
                                  "use mlp_layer='swiglu'")
        ref = self.rope_ref_grid
        if ref is not None and (isinstance(ref, bool) or not isinstance(ref, int) or ref < 1):
            raise bad('rope_ref_grid', 'expected a positive integer or None')
        if self.pos_rope and self.rope_type == 'eva02' and ref is None:
            raise bad('rope_ref_grid', "rope_type 'eva02' scales positions to its pretraining grid: give it (16 for "
                                       'EVA-02 at 224 px, patch 14)')
        if ref is not None and not (self.pos_rope and self.rope_type == 'eva02'):
            raise bad('rope_ref_grid', "only rope_type 'eva02' with rotary positions scales them to a grid")

    def _validate_patch_embed(self, bad: Callable[[str, str], ViTVariantsError]) -> None:
        """Refuse patch embedding / patch norm combinations that have no meaning."""
        patch_h, patch_w = self.patch_size
        if self.patch_embed == 'conv_stem' and (patch_h != patch_w or patch_h < 2 or patch_h & (patch_h - 1)):
            raise bad('patch_size', "patch_embed='conv_stem' stacks 3x3 stride-2 convs, so its total stride is a "
                                    "square power of 2 (2, 4, 8, 16, ...); use 'conv', 'overlap' or 'mlp' for "
                                    'other patch sizes')
        if self.patch_norm in ('pre', 'dual') and self.patch_embed in ('conv_stem', 'overlap'):
            raise bad('patch_norm', f"'pre' normalises the pixels of each patch before a per-patch projection; "
                                    f"patch_embed={self.patch_embed!r} has none (its first layer sees across "
                                    "patches); use 'post' or patch_embed 'conv', 'linear' or 'mlp'")

    # -- derived ----------------------------------------------------------------------------------
    @property
    def pool_width(self) -> int:
        """The width of the pooled feature the head reads (before ``rep_size``): CoCa's pooler has its own."""
        return self.attn_pool_dim if self.global_pool == 'coca' else self.embed_dim

    @property
    def pos_table(self) -> str:
        """The absolute position table: 'sincos', 'learn' or 'none' (without any 'cpe')."""
        return POS_EMBEDS[self.pos_embed][0]

    @property
    def pos_cpe(self) -> bool:
        """Whether CPVT's conditional position encoding runs after the first block."""
        return POS_EMBEDS[self.pos_embed][1]

    @property
    def pos_rope(self) -> bool:
        """Whether the blocks' attention has 2D rotary positions (``rope_type``)."""
        return self.pos_embed.endswith('rope')

    @property
    def pos_relpos(self) -> bool:
        """Whether the blocks' attention has BEiT's relative position bias (``rel_pos.tables``)."""
        return self.pos_embed.endswith('relpos')

    @property
    def grid_size(self) -> Tuple[int, int]:
        """The nominal token grid (ceil division when padding)."""
        return grid_for(self.img_size, self.patch_size, self.dynamic_img_pad)

    @property
    def num_prefix_slots(self) -> int:
        """Rows of a learned table that belong to the class token and the distillation token (0, 1 or 2)."""
        return 1 + int(self.dist_token) if self.pos_embed_cls_slot else 0

    @property
    def num_prefix_tokens(self) -> int:
        """Tokens before the patch tokens: the class token, the distillation token, then the registers."""
        return int(self.class_token) + int(self.dist_token) + self.reg_tokens

    @property
    def embeds_patches_alone(self) -> bool:
        """Whether the patch embedding sees one patch at a time, so a flattened patch alone gives its token."""
        return self.patch_embed in ('conv', 'linear', 'mlp')

    def check_limits(self, limits: Limits = DEFAULT_LIMITS, path: Optional[str] = None) -> 'SimpleViTConfig':
        """Refuse sizes beyond ``limits`` (before any model is built from this config); returns self."""
        grid = self.grid_size
        limits.check_dims(path=path, depth=self.depth, width=max(self.embed_dim, self.rep_size or 0),
                          mlp=self.mlp_dim, heads=self.num_heads, classes=self.num_classes,
                          img_size=max(*self.img_size, *self.patch_size), tokens=grid[0] * grid[1] + self.reg_tokens)
        if self.pos_relpos:  # each block's bias over the nominal grid's tokens, float32
            limits.check('rel_pos_bytes', rel_pos_bytes(grid[0] * grid[1] + self.num_prefix_tokens, self.num_heads),
                         path=path)
        return self

    # -- JSON round trip --------------------------------------------------------------------------
    def to_dict(self, include_training: bool = False) -> Dict[str, Any]:
        """JSON-safe constructor kwargs: every architectural field (squares as ints), training ones on request."""
        out: Dict[str, Any] = {}
        for f in fields(self):
            if (f.name in _TRAINING_ONLY and not include_training) or f.name in _LEGACY:
                continue
            value = getattr(self, f.name)
            if f.name in ('img_size', 'patch_size'):
                value = value[0] if value[0] == value[1] else tuple(value)
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], path: Optional[str] = None) -> 'SimpleViTConfig':
        """A config from ``to_dict`` output (or ``config.json``'s ``model_args``); unknown keys are refused."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ViTVariantsError(f'unknown model argument(s) {unknown} for SimpleViTConfig', path=path,
                                   key=unknown[0])
        try:
            return cls(**data)
        except ViTVariantsError as e:
            raise ViTVariantsError(e.reason, path=path, key=e.key) from None
        except (TypeError, ValueError) as e:
            raise ViTVariantsError(f'bad model arguments: {e}', path=path) from None

    def replace(self, **changes: Any) -> 'SimpleViTConfig':
        """A copy with some fields changed (validated again); a new grid_mode or dynamic_img_pad wins."""
        if 'grid_mode' in changes:
            changes.setdefault('dynamic_img_pad', None)
        elif 'dynamic_img_pad' in changes:
            changes['grid_mode'] = None
        return dataclasses.replace(self, **changes)


# -- the family ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Variant:
    """big_vision's ``decode_variant`` entry: width, depth, MLP width, heads."""
    width: int
    depth: int
    mlp: int
    heads: int

    def config_args(self) -> Dict[str, int]:
        return dict(embed_dim=self.width, depth=self.depth, mlp_dim=self.mlp, num_heads=self.heads)


# From big_vision/models/vit.py (decode_variant); So400m and g-opt are the SigLIP shapes.
VARIANTS: Dict[str, Variant] = {
    'tiny': Variant(192, 12, 768, 3),
    'small': Variant(384, 12, 1536, 6),
    'base': Variant(768, 12, 3072, 12),
    'large': Variant(1024, 24, 4096, 16),
    'huge': Variant(1280, 32, 5120, 16),
    'so400m': Variant(1152, 27, 4304, 16),
    'giantopt': Variant(1536, 40, 6144, 16),
}


@dataclass(frozen=True)
class ModelEntry:
    """One registered model: a variant, what differs from its defaults, and a one-line description."""
    variant: str
    args: Dict[str, Any] = field(default_factory=dict)
    doc: str = ''

    @property
    def kwargs(self) -> Dict[str, Any]:
        """What this model sets; everything else is a ``SimpleViTConfig`` default (or timm's, e.g. num_classes)."""
        return {**VARIANTS[self.variant].config_args(), **self.args}

    def config(self, **overrides: Any) -> SimpleViTConfig:
        return SimpleViTConfig(**{**self.kwargs, **overrides})


# FlexiViT's published ImageNet-1k models: tok pooling, a learned table without a cls slot, 240px.
_FLEXI = {'img_size': 240, 'patch_size': 16, 'class_token': True, 'global_pool': 'token', 'pos_embed': 'learn',
          'pos_embed_resample': 'flexi'}

# SigLIP / SigLIP 2 image towers: a learned table without a cls slot, big_vision's MAPHead, no classifier
# (model(x) is the image embedding: their pretrained_cfg says num_classes=0, so a folder's own count still wins),
# and the VALID patch conv's crop.
_SIGLIP = {'pos_embed': 'learn', 'global_pool': 'map', 'grid_mode': 'crop'}
# (variant, patch, image sizes) of the published towers (big_vision configs/proj/image_text/README_siglip2.md).
SIGLIP_TOWERS = (('base', 16, (224, 256, 384, 512)), ('base', 32, (256,)), ('large', 16, (256, 384, 512)),
                 ('so400m', 14, (224, 384)), ('so400m', 16, (256, 384, 512)), ('giantopt', 16, (256, 384)))
_SIGLIP_LABEL = {'base': 'B', 'large': 'L', 'so400m': 'So400m', 'giantopt': 'g-opt'}

MODELS: Dict[str, ModelEntry] = {
    'simple_vit_tiny': ModelEntry('tiny', {}, 'ViT-Ti/16 plain recipe (width 192, depth 12, 3 heads).'),
    'simple_vit_small': ModelEntry('small', {}, 'ViT-S/16 plain recipe (width 384, depth 12, 6 heads).'),
    'simple_vit_base': ModelEntry('base', {}, 'ViT-B/16 plain recipe (width 768, depth 12, 12 heads).'),
    'simple_vit_large': ModelEntry('large', {}, 'ViT-L/16 plain recipe (width 1024, depth 24, 16 heads).'),
    'simple_vit_huge': ModelEntry('huge', {}, 'ViT-H/16 plain recipe (width 1280, depth 32, 16 heads).'),
    'simple_vit_tiny_patch16_224': ModelEntry('tiny', {}, 'ViT-Ti/16 at 224px.'),
    'simple_vit_small_patch16_224': ModelEntry(
        'small', {'rep_size': 384},
        "ViT-S/16 at 224px as big_vision's vit_s16_i1k config: gap, sin-cos, 384-wide pre-logits "
        '(tags bv_i1k_{300,150,90}ep are the published Better-plain-ViT ImageNet-1k weights).'),
    'simple_vit_base_patch16_224': ModelEntry('base', {}, 'ViT-B/16 at 224px.'),
    'simple_vit_large_patch16_224': ModelEntry('large', {}, 'ViT-L/16 at 224px.'),
    'simple_vit_huge_patch16_224': ModelEntry('huge', {}, 'ViT-H/16 at 224px.'),
    'simple_vit_small_patch32_224': ModelEntry('small', {'patch_size': 32}, 'ViT-S/32 at 224px.'),
    'simple_vit_base_patch32_224': ModelEntry('base', {'patch_size': 32}, 'ViT-B/32 at 224px.'),
    'simple_vit_tiny_patch4_32': ModelEntry(
        'tiny', {'img_size': 32, 'patch_size': 4, 'depth': 6},
        'Small-image plain ViT for 32x32 inputs: patch 4, width 192, 3 heads, 6 blocks.'),
    **{f'simple_vit_{size}_flexi_240': ModelEntry(
        size, _FLEXI,
        f'FlexiViT-{size[0].upper()} (big_vision proj/flexi): 240px, [CLS] pooling, a learned table resampled like '
        'FlexiViT at run time; create it with any patch_size= to load the published weights at that patch size '
        '(tag bv_i1k_1200ep).') for size in ('small', 'base', 'large')},
    **{f'simple_vit_{size}_patch{patch}_siglip_{img}': ModelEntry(
        size, dict(_SIGLIP, img_size=img, patch_size=patch),
        f'SigLIP image tower {_SIGLIP_LABEL[size]}/{patch} at {img}px (big_vision): learned table, MAP head, no '
        'classifier, so model(x) is the image embedding.') for size, patch, sizes in SIGLIP_TOWERS for img in sizes},
    **{f'simple_vit_{size}_patch16_siglip_naflex': ModelEntry(
        size, dict(_SIGLIP, img_size=256, patch_size=16, patch_embed='linear', pos_embed_resample='flexi'),
        f'SigLIP 2 NaFlex image tower {_SIGLIP_LABEL[size]}/16 (big_vision naflex_vit): a 16x16 learned table '
        "resized to each image's own grid, MAP head; takes a NaFlex dict or a list of images at their own sizes.")
       for size in ('base', 'so400m')},
}
# DINOv2, DINOv3, RoPE-ViT (dino_models.py), DeiT and DeiT-III (deit_models.py) and CLIP towers (clip_models.py)
MODELS.update({name: ModelEntry(*row) for rows in (DINO_ROWS, DEIT_ROWS, DEIT3_ROWS, CLIP_ROWS, EVA02_ROWS, BEIT_ROWS)
               for name, row in rows.items()})

# What must match for ``architecture`` to name a registered model, most telling first.
_DIMS = ('embed_dim', 'num_heads', 'mlp_dim', 'depth', 'patch_size', 'rep_size', 'img_size', 'global_pool', 'pos_embed',
         'class_token', 'dist_token', 'pre_norm', 'patch_bias', 'reg_tokens', 'init_values', 'block_type')


def _dim(config: SimpleViTConfig, name: str) -> Any:
    """A ``_DIMS`` field as it shapes the network: LayerScale's presence, not its initial value (a reader that does
    not know it, timm's, records 1.0 where DeiT-III's rows say 1e-4, and the stored gammas are what runs)."""
    value = getattr(config, name)
    return value is not None if name == 'init_values' else value


def architecture_for(config: SimpleViTConfig) -> str:
    """The registered model matching every dimension, else the nearest family member.

    ``config.json`` always carries the full ``model_args``, so the nearest name only labels the
    family; it never decides the network.
    """
    def distance(name: str) -> Tuple[int, ...]:
        ref = MODELS[name].config()
        return tuple(int(_dim(config, d) != _dim(ref, d)) for d in _DIMS)

    # timm's create_model drops None keyword arguments, so a row that sets a field this config leaves None
    # (DINOv3's init_values, a rep_size) would fill it when the folder is loaded: such rows cannot label it.
    eligible = [name for name, entry in MODELS.items()
                if not any(value is not None and getattr(config, key) is None for key, value in entry.kwargs.items())]
    return min(eligible, key=lambda name: (sum(distance(name)), distance(name)))


def heads_for_width(width: int) -> Optional[int]:
    """The head count of the standard ViT of this width (192: 3, 384: 6, 768: 12, 1024: 16, 1280: 16)."""
    return next((v.heads for v in VARIANTS.values() if v.width == width), None)
