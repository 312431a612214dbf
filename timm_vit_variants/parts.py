"""The parts of a ``SimpleViTConfig`` (patch embedding, prefix tokens, position schemes, block, head with its pool,
training), torch-free. Each is a frozen dataclass that validates itself (a ``ViTVariantsError`` naming the
release-0.2.0 flat key) and round-trips through plain JSON; checks needing two parts live in the config and read the
parts' properties. Position schemes and pools register by name (``scheme=``/``kind=``), so a family adds its own.
"""
import dataclasses
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Dict, Mapping, Optional, Tuple, Type, Union

from .choices import (ACT_LAYERS, ATTN_TYPES, BLOCK_TYPES, MLP_LAYERS, NORM_TYPES, PATCH_EMBED_TYPES, PATCH_NORM_TYPES,
                      block_types,
                      REL_POS_RESAMPLE_RULES, RESAMPLE_RULE_NAMES, ROPE_TYPES, _is_int, _is_number, activation_name,
                      pair, resample_rule)
from .errors import ViTVariantsError
from .part_base import Part, TokensPart
from .position_parts import POSITION_SCHEMES, Cpe, Factorized, Learned, PositionScheme, RelPos, Rope, SinCos

__all__ = [
    'Part', 'PatchPart', 'TokensPart', 'PositionScheme', 'SinCos', 'Learned', 'Factorized', 'Cpe', 'Rope', 'RelPos',
    'BlockPart', 'PoolPart', 'AvgPool', 'TokenPool', 'MapPool', 'CocaPool', 'NoPool', 'HeadPart', 'TrainingPart',
    'POSITION_SCHEMES', 'POOL_KINDS', 'pair', 'activation_name', 'resample_rule', 'RESAMPLE_RULE_NAMES',
    'PATCH_EMBED_TYPES', 'PATCH_NORM_TYPES', 'ACT_LAYERS', 'MLP_LAYERS', 'ROPE_TYPES', 'REL_POS_RESAMPLE_RULES',
    'BLOCK_TYPES', 'NORM_TYPES',
]

@dataclass(frozen=True)
class PatchPart(Part):
    """How pixels become tokens: 'conv' (one PxP stride-P conv), 'linear' (Unfold + Linear, the same numbers),
    'conv_stem' (3x3 stride-2 convs + 1x1, Xiao et al. 2021), 'overlap' (a kernel wider than the stride) or 'mlp'
    (conv -> activation -> 1x1); ``norm`` around the projection: None, 'pre' (each patch's pixels), 'post' (the
    embedding) or 'dual' (both, Dual PatchNorm); ``bias`` of the projection (CLIP's ``conv1`` has none)."""
    kind: str = 'conv'
    norm: Optional[str] = None
    bias: bool = True
    FLAT: ClassVar[Mapping[str, str]] = {'kind': 'patch_embed', 'norm': 'patch_norm', 'bias': 'patch_bias'}
    NAME: ClassVar[str] = 'patch'

    def __post_init__(self) -> None:
        self._choice('kind', PATCH_EMBED_TYPES)
        self._choice('norm', PATCH_NORM_TYPES)
        self._bools('bias')
        if self.norm in ('pre', 'dual') and self.kind in ('conv_stem', 'overlap'):
            raise self._bad('norm', f"'pre' normalises the pixels of each patch before a per-patch projection; "
                                    f"patch_embed={self.kind!r} has none (its first layer sees across patches); "
                                    "use 'post' or patch_embed 'conv', 'linear' or 'mlp'")

    @property
    def embeds_patches_alone(self) -> bool:
        """Whether the embedding sees one patch at a time, so a flattened patch alone gives its token."""
        return self.kind in ('conv', 'linear', 'mlp')

    def check_patch_size(self, patch_size: Tuple[int, int]) -> None:
        """Refuse a patch size this embedding cannot reach ('conv_stem' strides by powers of 2)."""
        patch_h, patch_w = patch_size
        if self.kind == 'conv_stem' and (patch_h != patch_w or patch_h < 2 or patch_h & (patch_h - 1)):
            raise ViTVariantsError(f'patch_size={patch_size!r}: patch_embed=\'conv_stem\' stacks 3x3 stride-2 convs, '
                                   'so its total stride is a square power of 2 (2, 4, 8, 16, ...); use \'conv\', '
                                   "'overlap' or 'mlp' for other patch sizes", key='patch_size')


# -- block ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BlockPart(Part):
    """The transformer block. ``kind`` 'vit' (timm's pre-norm ``Block``), 'eva' (timm's ``EvaBlock``: q/v-only
    bias when ``qkv_bias``, LayerScale as ``gamma_1``/``gamma_2``, split q/k/v when not ``qkv_fused``, the MLP's
    sub-LN ``mlp_norm``), 'res_post' / 'eva_post' (timm's post-norm ``ResPostBlock`` / ``EvaBlockPostNorm``: each
    branch's output normalised before it is added, no LayerScale), 'parallel' (timm's ``ParallelThingsBlock``: two
    attention branches summed, then two MLP branches) or 'parallel_scaling' (timm's ``ParallelScalingBlock``: one
    norm and one input projection feeding attention and MLP side by side, their outputs summed; ``qkv_bias`` is that
    projection's, ``proj_bias`` both output projections'); ``attn`` 'attention' (timm's ``Attention``) or 'diff'
    (its ``DiffAttention``; ``DiffParallelScalingBlock`` in a 'parallel_scaling' block); ``qk_norm`` the norm layer on
    each head's queries and keys; ``attn_norm`` the attention's sub-LN before its output projection (timm's
    ``scale_attn_norm`` / ``scale_attn_inner``: EVA-02 CLIP, BEiT-3); ``norm`` the model's norm layer and ``norm_eps``
    its epsilon; ``act`` the MLP activation (flax ``nn.gelu`` is 'gelu_tanh'); ``mlp`` 'mlp', 'swiglu_packed' or
    'swiglu' and ``mlp_dim`` its exact hidden (gated) width, None for 4 * embed_dim; ``init_values`` LayerScale's
    initial value, None for none."""
    kind: str = 'vit'
    norm: str = 'layernorm'
    norm_eps: float = 1e-6
    act: Any = 'gelu_tanh'
    mlp: str = 'mlp'
    mlp_dim: Optional[int] = None
    mlp_norm: bool = False
    mlp_bias: bool = True
    qkv_bias: bool = True
    qkv_fused: bool = True
    qk_norm: bool = False
    proj_bias: bool = True
    init_values: Optional[float] = None
    attn_norm: bool = False
    attn: str = 'attention'
    FLAT: ClassVar[Mapping[str, str]] = {
        'kind': 'block_type', 'norm': 'norm_layer', 'norm_eps': 'norm_eps', 'act': 'act_layer', 'mlp': 'mlp_layer',
        'mlp_dim': 'mlp_dim', 'mlp_norm': 'mlp_norm', 'mlp_bias': 'mlp_bias', 'qkv_bias': 'qkv_bias',
        'qkv_fused': 'qkv_fused', 'qk_norm': 'qk_norm', 'proj_bias': 'proj_bias', 'init_values': 'init_values',
        'attn_norm': 'attn_norm', 'attn': 'attn_layer'}
    WRITTEN_IF_SET: ClassVar[Tuple[str, ...]] = ('attn_norm', 'attn')
    NAME: ClassVar[str] = 'block'

    def __post_init__(self) -> None:
        object.__setattr__(self, 'act', activation_name(self.act))
        self._choice('kind', block_types())  # read when checked: a family may add its kind
        self._choice('attn', ATTN_TYPES)
        self._choice('norm', NORM_TYPES)
        self._choice('act', ACT_LAYERS)
        self._choice('mlp', MLP_LAYERS)
        self._check('norm_eps', lambda v: _is_number(v) and v > 0, 'expected a positive number')
        self._check('mlp_dim', lambda v: v is None or (_is_int(v) and v >= 1), 'expected a positive integer')
        self._bools('mlp_norm', 'mlp_bias', 'qkv_bias', 'qkv_fused', 'qk_norm', 'proj_bias', 'attn_norm')
        self._check('init_values', lambda v: v is None or _is_number(v), 'expected a number or None')
        if self.mlp in ('swiglu_packed', 'swiglu') and self.act != 'silu':
            raise self._bad('mlp', f"{self.mlp!r} gates with silu: set act_layer='silu'")
        eva = self.kind in ('eva', 'eva_post')
        if not eva and not self.qkv_fused:
            raise self._bad('qkv_fused', "split q/k/v projections are EvaBlock's: set block_type='eva'")
        if not eva and self.mlp_norm and self.mlp != 'mlp':  # timm's Block: scale_mlp_norm, Mlp only
            raise self._bad('mlp_norm', "a gated MLP's sub-LN is EvaBlock's: set block_type='eva'")
        if eva and self.attn != 'attention':
            raise self._bad('attn', "timm's EvaBlock has EVA's own attention: set attn_layer='attention'")
        if self.kind == 'eva_post' and self.qk_norm:
            raise self._bad('qk_norm', "timm's EvaBlockPostNorm has no q/k norm")
        if self.kind == 'parallel_scaling':
            self._parallel_scaling()
        if self.mlp_norm and self.mlp == 'swiglu_packed':
            raise self._bad('mlp_norm', "timm's EvaBlock normalises a SwiGLU's hidden features only in its split "
                                        "form: use mlp_layer='swiglu'")

    def _parallel_scaling(self) -> None:
        """What timm's ``ParallelScalingBlock`` has: a plain MLP whose first layer sits in the fused input projection
        (always with a bias, ``mlp_bias`` there unless ``qkv_bias``), no sub-LNs, no LayerScale but one, shared."""
        if self.mlp != 'mlp':
            raise self._bad('mlp', "block_type='parallel_scaling' fuses a plain MLP's first layer into its input "
                                   "projection: use mlp_layer='mlp'")
        if not self.mlp_bias:
            raise self._bad('mlp_bias', "block_type='parallel_scaling' always has a bias on its MLP's first layer")
        for name in ('mlp_norm', 'attn_norm'):
            if getattr(self, name):
                raise self._bad(name, "timm's ParallelScalingBlock has no sub-LN")


# -- head -------------------------------------------------------------------------------------------

POOL_KINDS: Dict[str, Type['PoolPart']] = {}


@dataclass(frozen=True)
class PoolPart(Part):
    """How the head pools the tokens; subclasses register by ``kind`` name. Properties say what the pool needs of,
    and offers to, the rest of the model (the config checks them)."""
    kind: ClassVar[str] = ''
    NAME: ClassVar[str] = 'pool'
    needs_class_token: ClassVar[bool] = False
    reads_distillation_token: ClassVar[bool] = False  # DeiT's distilled head can read [CLS] and dist tokens
    ignores_distillation_token: ClassVar[bool] = False  # reads [CLS] alone beside it, with one classifier
    owns_final_norm: ClassVar[bool] = False  # the pool applies the final norm itself, after pooling

    def __init_subclass__(cls, kind: Optional[str] = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if kind is not None:
            cls.kind = kind
            POOL_KINDS[kind] = cls

    def width(self, embed_dim: int) -> int:
        """The width of the pooled feature (the token width unless the pool has its own)."""
        return embed_dim

    def resolved(self, embed_dim: int) -> 'PoolPart':
        """This pool with widths left open (None) filled from the token width."""
        return self

    def to_dict(self) -> Dict[str, Any]:
        return {'kind': self.kind, **super().to_dict()}

    @staticmethod
    def parse(data: Union['PoolPart', Mapping[str, Any], str]) -> 'PoolPart':
        """A pool from itself, its JSON dict (``{'kind': 'coca', ...}``) or its kind name."""
        if isinstance(data, PoolPart):
            return data
        name = data.get('kind') if isinstance(data, Mapping) else data
        if not isinstance(name, str) or name not in POOL_KINDS:
            raise ViTVariantsError(f'global_pool={name!r}: expected one of {tuple(POOL_KINDS)}', key='global_pool')
        cls = POOL_KINDS[name]
        return cls(**cls._checked_keys(data, extra=('kind',))) if isinstance(data, Mapping) else cls()


@dataclass(frozen=True)
class AvgPool(PoolPart, kind='avg'):
    """big_vision 'gap': the final norm over every token, then the mean of the patch tokens."""


@dataclass(frozen=True)
class TokenPool(PoolPart, kind='token'):
    """The [CLS] token (with DeiT's distillation token: the mean of the two heads)."""
    needs_class_token: ClassVar[bool] = True
    reads_distillation_token: ClassVar[bool] = True


@dataclass(frozen=True)
class MapPool(PoolPart, kind='map'):
    """big_vision's MAPHead: attention pooling with a learned probe (SigLIP's); ``include_prefix``: its keys are
    every token, else the patch tokens alone (timm's ``pool_include_prefix=False``, its default beside prefix
    tokens); ``heads`` and ``mlp_dim``: its own head count and MLP width (timm's Eva ``attn_pool_num_heads``,
    ``attn_pool_mlp_ratio``), None for the blocks' ones."""
    include_prefix: bool = True
    heads: Optional[int] = None
    mlp_dim: Optional[int] = None
    FLAT: ClassVar[Mapping[str, str]] = {'include_prefix': 'attn_pool_include_prefix', 'heads': 'attn_pool_map_heads',
                                         'mlp_dim': 'attn_pool_mlp_dim'}
    WRITTEN_IF_SET: ClassVar[Tuple[str, ...]] = ('include_prefix', 'heads', 'mlp_dim')

    def __post_init__(self) -> None:
        self._bools('include_prefix')
        for name in ('heads', 'mlp_dim'):
            self._check(name, lambda v: v is None or (_is_int(v) and v >= 1), 'expected a positive integer or None')

    def resolved(self, embed_dim: int) -> 'MapPool':
        """This pool, its own head count checked against the token width it attends over."""
        if self.heads is not None and embed_dim % self.heads:
            raise self._bad('heads', f'embed_dim {embed_dim} is not divisible by {self.heads} attention-pool heads')
        return self


@dataclass(frozen=True)
class CocaPool(PoolPart, kind='coca'):
    """CoCa's attentional pooler: ``queries`` learned queries, ``heads`` heads, width ``dim`` (None: the token
    width; keys and values come in at the token width), norms on queries and keys, the final norm over its
    outputs, output 0 pooled."""
    queries: int = 256
    heads: int = 8
    dim: Optional[int] = None
    owns_final_norm: ClassVar[bool] = True
    FLAT: ClassVar[Mapping[str, str]] = {'queries': 'attn_pool_queries', 'heads': 'attn_pool_heads',
                                         'dim': 'attn_pool_dim'}

    def __post_init__(self) -> None:
        for name in ('queries', 'heads'):
            self._check(name, lambda v: _is_int(v) and v >= 1, 'expected a positive integer')
        self._check('dim', lambda v: v is None or (_is_int(v) and v >= 1), 'expected a positive integer')
        if self.dim is not None and self.dim % self.heads:
            raise self._bad('heads', f'attn_pool_dim {self.dim} is not divisible by {self.heads} heads')

    def width(self, embed_dim: int) -> int:
        return self.dim or embed_dim

    def resolved(self, embed_dim: int) -> 'CocaPool':
        return dataclasses.replace(self, dim=self.dim or embed_dim)


@dataclass(frozen=True)
class NoPool(PoolPart, kind=''):
    """No pooling: the head sees every token."""
    reads_distillation_token: ClassVar[bool] = True


@dataclass(frozen=True)
class HeadPart(Part):
    """The head: ``pool``; ``final_norm`` at all (False leaves the last block's tokens as they are); ``fc_norm``:
    the final norm on the pooled vector instead of every token (open_clip's ``final_ln_after_pool``);
    ``untie_norms``: DINOv3's ``cls_norm`` for the prefix tokens beside ``norm`` for the patch tokens;
    ``rep_size``: an optional pre-logits layer (Linear + tanh); ``bias`` of the classifier (CLIP's ``proj`` has
    none)."""
    pool: PoolPart = field(default_factory=AvgPool)
    final_norm: bool = True
    fc_norm: bool = False
    untie_norms: bool = False
    rep_size: Optional[int] = None
    bias: bool = True
    FLAT: ClassVar[Mapping[str, str]] = {'pool': 'global_pool', 'final_norm': 'final_norm', 'fc_norm': 'fc_norm',
                                         'untie_norms': 'untie_cls_and_patch_norms', 'rep_size': 'rep_size',
                                         'bias': 'head_bias'}
    NAME: ClassVar[str] = 'head'

    def __post_init__(self) -> None:
        object.__setattr__(self, 'pool', PoolPart.parse(self.pool))
        object.__setattr__(self, 'rep_size', self.rep_size or None)
        self._bools('final_norm', 'fc_norm', 'untie_norms', 'bias')
        self._check('rep_size', lambda v: v is None or (_is_int(v) and v >= 1), 'expected a positive integer or None')
        if self.fc_norm and self.pool.owns_final_norm:
            raise self._bad('fc_norm', f"{self.pool.kind!r} pooling holds its own norm after the pool")
        if self.untie_norms and (self.fc_norm or self.pool.owns_final_norm):
            raise self._bad('untie_norms', 'needs prefix tokens ([CLS] or registers) and the final norm on every '
                                           'token (no fc_norm, no pool that holds its own norm)')
        if not self.final_norm and (self.fc_norm or self.pool.owns_final_norm or self.untie_norms):
            raise self._bad('final_norm', 'without a final norm there is none to put after the pool (fc_norm), in '
                                          'the pool or on the prefix tokens (untie_cls_and_patch_norms)')

    def to_dict(self) -> Dict[str, Any]:
        return {**super().to_dict(), 'pool': self.pool.to_dict()}


@dataclass(frozen=True)
class TrainingPart(Part):
    """Settings that shape training, not the network: never written to ``config.json``. ``patch_drop_rate``: NaViT's
    token dropping for NaFlex inputs; ``weight_init``: 'jax' (big_vision initialisers, zero head) or 'skip'."""
    drop_rate: float = 0.
    pos_drop_rate: float = 0.
    proj_drop_rate: float = 0.
    attn_drop_rate: float = 0.
    drop_path_rate: float = 0.
    patch_drop_rate: float = 0.
    weight_init: str = 'jax'
    NAME: ClassVar[str] = 'training'

    def __post_init__(self) -> None:
        for f in fields(self)[:-1]:
            self._check(f.name, lambda v: _is_number(v) and 0 <= v <= 1, 'expected a rate in [0, 1]')
        if self.patch_drop_rate >= 1:
            raise self._bad('patch_drop_rate', 'expected a rate in [0, 1): every image keeps at least one token')
        self._choice('weight_init', ('jax', 'skip'))
