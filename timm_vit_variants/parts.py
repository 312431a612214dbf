"""The parts of a ``SimpleViTConfig`` (patch embedding, prefix tokens, position schemes, block, head with its pool,
training), torch-free. Each is a frozen dataclass that validates itself (a ``ViTVariantsError`` naming the
release-0.2.0 flat key) and round-trips through plain JSON; checks needing two parts live in the config and read the
parts' properties. Position schemes and pools register by name (``scheme=``/``kind=``), so a family adds its own.
"""
import dataclasses
from dataclasses import dataclass, field, fields
from typing import Any, Callable, ClassVar, Dict, Mapping, Optional, Tuple, Type, TypeVar, Union

from .choices import (ACT_LAYERS, BLOCK_TYPES, MLP_LAYERS, NORM_TYPES, PATCH_EMBED_TYPES, PATCH_NORM_TYPES,
                      REL_POS_RESAMPLE_RULES, RESAMPLE_RULE_NAMES, ROPE_TYPES, _is_int, _is_number, activation_name,
                      pair, resample_rule)
from .errors import ViTVariantsError

__all__ = [
    'Part', 'PatchPart', 'TokensPart', 'PositionScheme', 'SinCos', 'Learned', 'Cpe', 'Rope', 'RelPos', 'BlockPart',
    'PoolPart', 'AvgPool', 'TokenPool', 'MapPool', 'CocaPool', 'NoPool', 'HeadPart', 'TrainingPart',
    'POSITION_SCHEMES', 'POOL_KINDS', 'pair', 'activation_name', 'resample_rule', 'RESAMPLE_RULE_NAMES',
    'PATCH_EMBED_TYPES', 'PATCH_NORM_TYPES', 'ACT_LAYERS', 'MLP_LAYERS', 'ROPE_TYPES', 'REL_POS_RESAMPLE_RULES',
    'BLOCK_TYPES', 'NORM_TYPES',
]

P = TypeVar('P', bound='Part')


class Part:
    """A frozen dataclass part: ``FLAT`` maps each field to its release-0.2.0 flat name (the error key);
    ``WRITTEN_IF_SET`` names the fields newer than the composed form, written only when they differ from their
    default, so a config without them is written as before they existed."""
    FLAT: ClassVar[Mapping[str, str]] = {}
    NAME: ClassVar[str] = 'part'
    WRITTEN_IF_SET: ClassVar[Tuple[str, ...]] = ()

    def _bad(self, name: str, why: str) -> ViTVariantsError:
        key = self.FLAT.get(name, name)
        return ViTVariantsError(f'{key}={getattr(self, name)!r}: {why}', key=key)

    def _check(self, name: str, test: Callable[[Any], bool], why: str) -> None:
        if not test(getattr(self, name)):
            raise self._bad(name, why)

    def _bools(self, *names: str) -> None:
        for name in names:
            self._check(name, lambda v: isinstance(v, bool), 'expected True or False')

    def _choice(self, name: str, allowed: Tuple[Any, ...]) -> None:
        self._check(name, lambda v: v in allowed, f'expected one of {allowed}')

    def to_dict(self) -> Dict[str, Any]:
        """Plain JSON: every field (a pair as a list), those of ``WRITTEN_IF_SET`` only when not their default."""
        values = {f.name: getattr(self, f.name) for f in fields(self)
                  if f.name not in self.WRITTEN_IF_SET or getattr(self, f.name) != f.default}
        return {name: list(v) if isinstance(v, tuple) else v for name, v in values.items()}

    @classmethod
    def _checked_keys(cls, data: Any, extra: Tuple[str, ...] = ()) -> Dict[str, Any]:
        if not isinstance(data, Mapping):
            raise ViTVariantsError(f'expected a JSON object for {cls.NAME}, got {data!r}', key=cls.NAME)
        known = {f.name for f in fields(cls)} | set(extra)
        unknown = sorted(set(data) - known)
        if unknown:
            raise ViTVariantsError(f'unknown {cls.NAME} option(s) {unknown}; expected some of {sorted(known)}',
                                   key=f'{cls.NAME}.{unknown[0]}')
        return {k: v for k, v in data.items() if k not in extra}

    @classmethod
    def from_dict(cls: Type[P], data: Mapping[str, Any]) -> P:
        """The part from ``to_dict`` output; unknown keys are refused."""
        return cls(**cls._checked_keys(data))


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


@dataclass(frozen=True)
class TokensPart(Part):
    """The prefix tokens: a learned [CLS] token, DeiT's distillation token right after it (its own table slot and
    classifier ``head_dist``), ``registers`` register tokens (Darcet et al. 2024, no position information), and
    ``pre_norm``: a norm (``norm_pre``) after positions and prefix tokens are added (CLIP's ``ln_pre``)."""
    cls: bool = False
    dist: bool = False
    registers: int = 0
    pre_norm: bool = False
    FLAT: ClassVar[Mapping[str, str]] = {'cls': 'class_token', 'dist': 'dist_token', 'registers': 'reg_tokens',
                                         'pre_norm': 'pre_norm'}
    NAME: ClassVar[str] = 'tokens'

    def __post_init__(self) -> None:
        self._bools('cls', 'dist', 'pre_norm')
        self._check('registers', lambda v: _is_int(v) and v >= 0, 'expected an integer >= 0')

    @property
    def count(self) -> int:
        """Tokens before the patch tokens: [CLS], the distillation token, then the registers."""
        return int(self.cls) + int(self.dist) + self.registers


# -- positions --------------------------------------------------------------------------------------

POSITION_SCHEMES: Dict[str, Type['PositionScheme']] = {}


@dataclass(frozen=True)
class PositionScheme(Part):
    """One position scheme; subclasses register by ``scheme`` name and say which ``slot`` of the model they fill
    ('abs_pos': a table added to the patch tokens, 'pos_cpe', 'rope', 'rel_pos'). A config holds at most one per
    slot. Cross-part needs are properties, read by the config."""
    scheme: ClassVar[str] = ''
    slot: ClassVar[str] = ''
    NAME: ClassVar[str] = 'positions'
    # What the scheme needs of the rest of the model (the config checks these).
    width_multiple: ClassVar[int] = 1  # embed_dim divisible by this
    needs_head_width_multiple_of_4: ClassVar[bool] = False
    needs_single_class_token: ClassVar[bool] = False  # a [CLS] token, no registers, no distillation token

    def __init_subclass__(cls, scheme: str = '', **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if scheme:
            cls.scheme = scheme
            POSITION_SCHEMES[scheme] = cls

    @property
    def table_cls_slot(self) -> bool:
        """Whether an absolute table carries rows for the prefix tokens (only ``Learned`` can)."""
        return False

    @property
    def table_reg_slots(self) -> bool:
        """Whether an absolute table carries rows for the register tokens too (only ``Learned`` can)."""
        return False

    def normalised(self, tokens: TokensPart) -> 'PositionScheme':
        """This scheme with values that have no effect next to ``tokens`` dropped (the default: as it is)."""
        return self

    def to_dict(self) -> Dict[str, Any]:
        return {'scheme': self.scheme, **super().to_dict()}

    @staticmethod
    def parse(data: Union['PositionScheme', Mapping[str, Any]]) -> 'PositionScheme':
        """A scheme from itself or its JSON dict (``{'scheme': 'learn', ...}``)."""
        if isinstance(data, PositionScheme):
            return data
        name = data.get('scheme') if isinstance(data, Mapping) else None
        if name not in POSITION_SCHEMES:
            raise ViTVariantsError(f'unknown position scheme {data!r}; expected a dict with a scheme key, one of '
                                   f'{sorted(POSITION_SCHEMES)}', key='positions')
        return POSITION_SCHEMES[name]._from(data)

    @classmethod
    def _from(cls, data: Mapping[str, Any]) -> 'PositionScheme':
        return cls(**cls._checked_keys(data, extra=('scheme',)))


@dataclass(frozen=True)
class SinCos(PositionScheme, scheme='sincos'):
    """The fixed big_vision 2D sin-cos table (never saved)."""
    temperature: float = 10000.
    slot: ClassVar[str] = 'abs_pos'
    width_multiple: ClassVar[int] = 4
    FLAT: ClassVar[Mapping[str, str]] = {'temperature': 'sincos_temperature'}

    def __post_init__(self) -> None:
        self._check('temperature', lambda v: _is_number(v) and v > 0, 'expected a positive number')


@dataclass(frozen=True)
class Learned(PositionScheme, scheme='learn'):
    """A learned table; ``cls_slot``: it carries rows for [CLS] (and the distillation token) as vit_jax / timm,
    rather than being added before the class token is prepended (big_vision); ``reg_slots``: rows for the register
    tokens too, every prefix token then having one (timm's ``no_embed_class=False`` with ``reg_tokens``; DINOv2's
    registers have none); ``resample``: how it is resized for another grid (``geometry.RESAMPLE_RULES``)."""
    cls_slot: bool = False
    resample: str = 'bigvision'
    reg_slots: bool = False
    slot: ClassVar[str] = 'abs_pos'
    FLAT: ClassVar[Mapping[str, str]] = {'cls_slot': 'pos_embed_cls_slot', 'resample': 'pos_embed_resample',
                                         'reg_slots': 'pos_embed_reg_slots'}
    WRITTEN_IF_SET: ClassVar[Tuple[str, ...]] = ('reg_slots',)

    def __post_init__(self) -> None:
        self._bools('cls_slot', 'reg_slots')
        resample_rule(self.resample)

    @property
    def table_cls_slot(self) -> bool:
        return self.cls_slot

    @property
    def table_reg_slots(self) -> bool:
        return self.reg_slots

    def normalised(self, tokens: TokensPart) -> 'Learned':
        """A cls slot exists only next to a class token, register slots only next to registers; with both, the
        [CLS] has a row whenever the registers do (timm's table covers every prefix token or none of them)."""
        regs = self.reg_slots and tokens.registers > 0
        if regs and tokens.cls and not self.cls_slot:
            raise self._bad('reg_slots', 'a table with rows for the registers has one for the class token too')
        return dataclasses.replace(self, cls_slot=self.cls_slot and tokens.cls, reg_slots=regs)


@dataclass(frozen=True)
class Cpe(PositionScheme, scheme='cpe'):
    """CPVT's conditional position encoding: a depthwise conv after the first block."""
    slot: ClassVar[str] = 'pos_cpe'


@dataclass(frozen=True)
class Rope(PositionScheme, scheme='rope'):
    """2D rotary positions in every block's attention, from each image's own grid: ``kind`` 'dinov3' (coordinates
    normalised per side, half-split rotation, a stored ``rope.periods`` buffer), 'axial' (RoPE-ViT: integer
    coordinates, interleaved pairs), 'mixed' (RoPE-ViT: learned per-layer, per-head ``rope.freqs``) or 'eva02'
    (positions scaled to ``ref_grid``, EVA-02's pretraining grid, interleaved pairs); ``theta``: the base."""
    kind: str = 'dinov3'
    theta: float = 100.
    ref_grid: Optional[int] = None
    slot: ClassVar[str] = 'rope'
    needs_head_width_multiple_of_4: ClassVar[bool] = True
    FLAT: ClassVar[Mapping[str, str]] = {'kind': 'rope_type', 'theta': 'rope_theta', 'ref_grid': 'rope_ref_grid'}

    def __post_init__(self) -> None:
        self._choice('kind', ROPE_TYPES)
        self._check('theta', lambda v: _is_number(v) and v > 0, 'expected a positive number')
        self._check('ref_grid', lambda v: v is None or (_is_int(v) and v >= 1), 'expected a positive integer or None')
        if self.kind == 'eva02' and self.ref_grid is None:
            raise self._bad('ref_grid', "rope_type 'eva02' scales positions to its pretraining grid: give it (16 for "
                                        'EVA-02 at 224 px, patch 14)')
        if self.ref_grid is not None and self.kind != 'eva02':
            raise self._bad('ref_grid', "only rope_type 'eva02' with rotary positions scales them to a grid")


@dataclass(frozen=True)
class RelPos(PositionScheme, scheme='relpos'):
    """BEiT's relative position bias (one ``rel_pos.tables`` table per block); ``resample``: how the tables are
    resized for another nominal grid, 'beit' (square grids only) or 'timm' (any grid)."""
    resample: str = 'beit'
    slot: ClassVar[str] = 'rel_pos'
    needs_single_class_token: ClassVar[bool] = True
    FLAT: ClassVar[Mapping[str, str]] = {'resample': 'rel_pos_resample'}

    def __post_init__(self) -> None:
        self._choice('resample', REL_POS_RESAMPLE_RULES)


# -- block ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BlockPart(Part):
    """The transformer block. ``kind`` 'vit' (timm's pre-norm ``Block``) or 'eva' (timm's ``EvaBlock``: q/v-only
    bias when ``qkv_bias``, LayerScale as ``gamma_1``/``gamma_2``, split q/k/v when not ``qkv_fused``, the MLP's
    sub-LN ``mlp_norm``); ``attn_norm`` the attention's sub-LN before its output projection (timm's
    ``scale_attn_norm`` / ``scale_attn_inner``: EVA-02 CLIP, BEiT-3); ``norm`` the model's norm layer and ``norm_eps`` its epsilon; ``act`` the MLP activation
    (flax ``nn.gelu`` is 'gelu_tanh'); ``mlp`` 'mlp', 'swiglu_packed' or 'swiglu' and ``mlp_dim`` its exact hidden
    (gated) width, None for 4 * embed_dim; ``init_values`` LayerScale's initial value, None for none."""
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
    FLAT: ClassVar[Mapping[str, str]] = {
        'kind': 'block_type', 'norm': 'norm_layer', 'norm_eps': 'norm_eps', 'act': 'act_layer', 'mlp': 'mlp_layer',
        'mlp_dim': 'mlp_dim', 'mlp_norm': 'mlp_norm', 'mlp_bias': 'mlp_bias', 'qkv_bias': 'qkv_bias',
        'qkv_fused': 'qkv_fused', 'qk_norm': 'qk_norm', 'proj_bias': 'proj_bias', 'init_values': 'init_values',
        'attn_norm': 'attn_norm'}
    WRITTEN_IF_SET: ClassVar[Tuple[str, ...]] = ('attn_norm',)
    NAME: ClassVar[str] = 'block'

    def __post_init__(self) -> None:
        object.__setattr__(self, 'act', activation_name(self.act))
        self._choice('kind', BLOCK_TYPES)
        self._choice('norm', NORM_TYPES)
        self._choice('act', ACT_LAYERS)
        self._choice('mlp', MLP_LAYERS)
        self._check('norm_eps', lambda v: _is_number(v) and v > 0, 'expected a positive number')
        self._check('mlp_dim', lambda v: v is None or (_is_int(v) and v >= 1), 'expected a positive integer')
        self._bools('mlp_norm', 'mlp_bias', 'qkv_bias', 'qkv_fused', 'qk_norm', 'proj_bias', 'attn_norm')
        self._check('init_values', lambda v: v is None or _is_number(v), 'expected a number or None')
        if self.mlp in ('swiglu_packed', 'swiglu') and self.act != 'silu':
            raise self._bad('mlp', f"{self.mlp!r} gates with silu: set act_layer='silu'")
        if self.kind == 'vit' and not self.qkv_fused:
            raise self._bad('qkv_fused', "split q/k/v projections are EvaBlock's: set block_type='eva'")
        if self.kind == 'vit' and self.mlp_norm and self.mlp != 'mlp':  # timm's Block: scale_mlp_norm, Mlp only
            raise self._bad('mlp_norm', "a gated MLP's sub-LN is EvaBlock's: set block_type='eva'")
        if self.mlp_norm and self.mlp == 'swiglu_packed':
            raise self._bad('mlp_norm', "timm's EvaBlock normalises a SwiGLU's hidden features only in its split "
                                        "form: use mlp_layer='swiglu'")


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
    tokens)."""
    include_prefix: bool = True
    FLAT: ClassVar[Mapping[str, str]] = {'include_prefix': 'attn_pool_include_prefix'}
    WRITTEN_IF_SET: ClassVar[Tuple[str, ...]] = ('include_prefix',)

    def __post_init__(self) -> None:
        self._bools('include_prefix')


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
