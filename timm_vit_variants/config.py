"""The model's settings: one frozen ``SimpleViTConfig`` composed of parts (``parts.py``), and the variant table.

A config is the grid-level numbers (sizes, width, depth, heads, ``grid_mode``) plus the parts; each part validates
itself and the config checks only what needs two parts, through the parts' properties. ``SimpleViTConfig.of`` takes
parts (objects or JSON dicts) and every flat name of release 0.2.0 (``global_pool``, ``pos_embed='learn+rope'``, ...);
``to_flat`` gives that flat dict back, ``to_dict`` the composed JSON ``config.json`` is written from. Variants are
data, as in big_vision's ``decode_variant``; each registered model is one row of ``MODELS``.
"""
import dataclasses
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Dict, Mapping, Optional, Tuple, Type, TypeVar, Union

from .choices import (ACT_LAYERS, BLOCK_TYPES, DATA_CONFIG_KEYS, GRID_MODES, HEAD_KEYS, MLP_LAYERS,
                      PATCH_EMBED_TYPES, PATCH_NORM_TYPES, POS_EMBED_TYPES, PREPROCESSING_KEYS,
                      REL_POS_RESAMPLE_RULES, RESAMPLE_RULE_NAMES, ROPE_TYPES, TensorSpec, activation_name, grid_for,
                      is_family_architecture, pair, resample_rule)
from .clip_models import CLIP_ROWS
from .beit_models import BEIT_ROWS
from .deit_models import DEIT3_ROWS, DEIT_ROWS
from .dino_models import DINO_ROWS
from .eva02_models import EVA02_ROWS
from .errors import UnknownOptionError, ViTVariantsError
from .limits import DEFAULT_LIMITS, Limits, rel_pos_bytes
from .parts import (POOL_KINDS, POSITION_SCHEMES, BlockPart, HeadPart, Part, PatchPart, PoolPart, PositionScheme,
                    TokensPart, TrainingPart)

__all__ = [
    'SimpleViTConfig', 'Variant', 'VARIANTS', 'MODELS', 'POOL_TYPES', 'POS_EMBED_TYPES', 'RESAMPLE_RULE_NAMES',
    'PATCH_EMBED_TYPES', 'PATCH_NORM_TYPES', 'GRID_MODES', 'ACT_LAYERS', 'SIGLIP_TOWERS', 'pair', 'grid_for',
    'architecture_for', 'heads_for_width', 'activation_name', 'is_family_architecture', 'resample_rule', 'TensorSpec', 'HEAD_KEYS',
    'DATA_CONFIG_KEYS', 'PREPROCESSING_KEYS', 'MLP_LAYERS', 'ROPE_TYPES', 'REL_POS_RESAMPLE_RULES', 'BLOCK_TYPES',
    'FLAT_NAMES', 'ARGUMENT_NAMES',
]

POOL_TYPES = tuple(POOL_KINDS)
# The order position schemes are listed in (and joined in a flat ``pos_embed``): the table first.
_SLOT_ORDER = ('abs_pos', 'pos_cpe', 'rope', 'rel_pos')
_PARTS: Dict[str, Type[Part]] = {'patch': PatchPart, 'tokens': TokensPart, 'block': BlockPart, 'head': HeadPart,
                                 'training': TrainingPart}
_TOP = ('img_size', 'patch_size', 'in_chans', 'num_classes', 'embed_dim', 'depth', 'num_heads', 'grid_mode')
# Flat name -> (part, field) for the flat names that are one field of one part (pools and schemes: below).
_SIMPLE: Dict[str, Tuple[str, str]] = {flat: (name, f) for name, part in _PARTS.items()
                                       for f, flat in ({f.name: f.name for f in fields(part)} if not part.FLAT
                                                       else part.FLAT).items() if f != 'pool'}
# Release 0.2.0's flat ``model_args``, in its order (``to_flat`` writes them so, and ``of`` reads them).
_FLAT_0_2 = ('img_size', 'patch_size', 'in_chans', 'num_classes', 'global_pool', 'embed_dim', 'depth', 'num_heads',
             'mlp_dim', 'mlp_layer', 'init_values', 'qkv_bias', 'class_token', 'dist_token', 'reg_tokens',
             'patch_embed', 'patch_norm', 'pos_embed', 'pos_embed_cls_slot', 'pos_embed_resample',
             'sincos_temperature', 'rope_type', 'rope_theta', 'rope_ref_grid', 'block_type', 'qkv_fused', 'mlp_norm',
             'rel_pos_resample', 'untie_cls_and_patch_norms', 'rep_size', 'pre_norm', 'patch_bias', 'fc_norm',
             'final_norm', 'head_bias', 'attn_pool_queries', 'attn_pool_heads', 'attn_pool_dim', 'act_layer',
             'norm_eps', 'grid_mode')
_TRAINING = tuple(f.name for f in fields(TrainingPart))
# Block options newer than release 0.2.0: in a flat dict only when they differ from the default.
_NEWER = tuple(flat for flat in BlockPart.FLAT.values() if flat not in _FLAT_0_2)
_POOL_FLAT = {flat: (cls, f) for cls in POOL_KINDS.values() for f, flat in cls.FLAT.items()}
_SCHEME_FLAT = {flat: (cls, f) for cls in POSITION_SCHEMES.values() for f, flat in cls.FLAT.items()}
# Every flat name ``of`` accepts, and every name it accepts (the fields, parts whole, flat names).
FLAT_NAMES = _FLAT_0_2 + _NEWER + _TRAINING + ('dynamic_img_pad',)
_PART_FIELDS = ('patch', 'tokens', 'positions', 'block', 'head', 'training')
ARGUMENT_NAMES = frozenset(_TOP + _PART_FIELDS + FLAT_NAMES)

Size = Union[int, Tuple[int, int]]
S = TypeVar('S', bound=PositionScheme)


def _grid_mode(mode: Any, legacy: Any) -> Optional[str]:
    """``grid_mode``, taking the older ``dynamic_img_pad`` (True: 'pad', False: 'strict') into account."""
    if legacy is not None and not isinstance(legacy, bool):
        raise ViTVariantsError(f'dynamic_img_pad={legacy!r}: expected True, False or None', key='dynamic_img_pad')
    if mode is None:
        return None if legacy is None else 'pad' if legacy else 'strict'
    if mode in GRID_MODES and legacy is not None and legacy != (mode in ('pad', 'pool')):
        raise ViTVariantsError(f"dynamic_img_pad={legacy} contradicts grid_mode={mode!r} (the older name: True "
                               "means 'pad', False means 'strict')", key='dynamic_img_pad')
    return mode


def _parse_pos_embed(value: Any) -> Tuple[Type[PositionScheme], ...]:
    """The scheme classes a flat ``pos_embed`` names ('learn+rope'; 'none' for none)."""
    names = value.split('+') if isinstance(value, str) and value != 'none' else [] if value == 'none' else [None]
    if not all(name in POSITION_SCHEMES for name in names):
        raise ViTVariantsError(f'pos_embed={value!r}: expected one of {POS_EMBED_TYPES}', key='pos_embed')
    return tuple(POSITION_SCHEMES[name] for name in names)


@dataclass(frozen=True)
class SimpleViTConfig:
    """Every constructor argument of ``SimpleVisionTransformer``, as the numbers of the grid and the parts.

    Attributes:
        img_size: Nominal input size (H, W); any other size also works at forward time.
        patch_size: Patch size (H, W); change it later with ``set_input_size(patch_size=...)``.
        in_chans, num_classes, embed_dim, depth, num_heads: as timm's.
        grid_mode: Input sizes the patch does not divide: 'pad' (right/bottom, the default), 'strict'
            (raise), 'pool' (pad, then adaptive-average-pool the token grid to the nominal grid, so
            every input size gives the same token count) or 'crop' (drop the last pixel rows and
            columns, as big_vision's and timm's VALID patch conv do: 384 px at patch 14 is 27x27).
        patch, tokens, block, head, training: the parts (``parts.py``); ``block.mlp_dim`` None is 4 * embed_dim.
        positions: The position schemes, at most one per slot, the table first; () for none.
    """
    img_size: Size = 224
    patch_size: Size = 16
    in_chans: int = 3
    num_classes: int = 1000
    embed_dim: int = 768
    depth: int = 12
    num_heads: int = 12
    grid_mode: Optional[str] = None
    patch: PatchPart = field(default_factory=PatchPart)
    tokens: TokensPart = field(default_factory=TokensPart)
    positions: Tuple[PositionScheme, ...] = field(default_factory=lambda: (POSITION_SCHEMES['sincos'](),))
    block: BlockPart = field(default_factory=BlockPart)
    head: HeadPart = field(default_factory=HeadPart)
    training: TrainingPart = field(default_factory=TrainingPart)
    # The names of the fields that hold parts (``of`` and ``replace`` take them whole, objects or JSON dicts).
    PARTS: ClassVar[Tuple[str, ...]] = _PART_FIELDS

    def __post_init__(self) -> None:
        fix = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731  (frozen dataclass)
        fix('img_size', pair(self.img_size, 'img_size'))
        fix('patch_size', pair(self.patch_size, 'patch_size'))
        for name in ('in_chans', 'embed_dim', 'depth', 'num_heads'):
            self._positive(name)
        if isinstance(self.num_classes, bool) or not isinstance(self.num_classes, int) or self.num_classes < 0:
            raise self._bad('num_classes', self.num_classes, 'expected an integer >= 0')
        fix('grid_mode', self.grid_mode or 'pad')
        if self.grid_mode not in GRID_MODES:
            raise self._bad('grid_mode', self.grid_mode, f'expected one of {GRID_MODES}')
        for name, part in _PARTS.items():
            value = getattr(self, name)
            fix(name, value if isinstance(value, part) else part.from_dict(value))
        schemes = tuple(PositionScheme.parse(s).normalised(self.tokens) for s in self.positions)
        slots = [s.slot for s in schemes]
        if len(set(slots)) != len(slots):
            raise self._bad('pos_embed', [s.scheme for s in schemes], 'at most one position scheme per slot')
        order = lambda s: _SLOT_ORDER.index(s.slot) if s.slot in _SLOT_ORDER else len(_SLOT_ORDER)  # noqa: E731
        fix('positions', tuple(sorted(schemes, key=order)))
        fix('block', dataclasses.replace(self.block, mlp_dim=self.block.mlp_dim or 4 * self.embed_dim))
        fix('head', dataclasses.replace(self.head, pool=self.head.pool.resolved(self.embed_dim)))
        self._validate()

    @staticmethod
    def _bad(name: str, value: Any, why: str) -> ViTVariantsError:
        return ViTVariantsError(f'{name}={value!r}: {why}', key=name)

    def _positive(self, name: str) -> None:
        value = getattr(self, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self._bad(name, value, 'expected a positive integer')

    def _validate(self) -> None:
        """The checks that need two parts (each part checked its own values already)."""
        tokens, head, pool = self.tokens, self.head, self.head.pool
        if self.embed_dim % self.num_heads:
            raise self._bad('num_heads', self.num_heads, f'embed_dim {self.embed_dim} is not divisible by '
                                                         f'{self.num_heads} heads')
        for scheme in self.positions:
            if self.embed_dim % scheme.width_multiple:
                raise self._bad('embed_dim', self.embed_dim, f'a {scheme.scheme!r} position embedding needs a '
                                                             f'width divisible by {scheme.width_multiple}')
            if scheme.needs_head_width_multiple_of_4 and (self.embed_dim // self.num_heads) % 4:
                raise self._bad('num_heads', self.num_heads, f'2D rotary positions need a head width divisible by '
                                                             f'4, got {self.embed_dim // self.num_heads}')
            if scheme.needs_single_class_token and (not tokens.cls or tokens.registers or tokens.dist):
                raise self._bad('pos_embed', self.flat_pos_embed, "BEiT's relative position bias has table entries "
                                'for one [CLS] token only: it needs class_token=True, reg_tokens=0 and '
                                'dist_token=False')
        if head.untie_norms and not tokens.count:
            raise self._bad('untie_cls_and_patch_norms', True, 'needs prefix tokens ([CLS] or registers)')
        self.patch.check_patch_size(self.patch_size)
        if pool.needs_class_token and not tokens.cls:
            raise self._bad('global_pool', pool.kind, f"{pool.kind!r} pooling needs class_token=True")
        if tokens.dist and (not tokens.cls or not pool.reads_distillation_token or head.rep_size or head.fc_norm):
            raise self._bad('dist_token', True, "DeiT's distilled head reads the [CLS] and distillation tokens: it "
                                                "needs class_token=True, 'token' (or '') pooling, no rep_size and "
                                                'no fc_norm')

    # -- construction from parts and flat names -------------------------------------------------------
    @classmethod
    def of(cls, **kwargs: Any) -> 'SimpleViTConfig':
        """The config from parts (objects or their JSON dicts) and/or release 0.2.0's flat names (``FLAT_NAMES``);
        flat names apply on top of the parts. Unknown names are refused, naming the key."""
        return cls._compose(cls(), kwargs, fresh=True)

    def replace(self, **changes: Any) -> 'SimpleViTConfig':
        """A copy with parts, then flat names, changed (validated again); a new grid_mode or dynamic_img_pad wins."""
        return self._compose(self, changes, fresh=False)

    @classmethod
    def _compose(cls, base: 'SimpleViTConfig', kwargs: Mapping[str, Any], fresh: bool) -> 'SimpleViTConfig':
        unknown = [k for k in kwargs if k not in ARGUMENT_NAMES]
        if unknown:
            raise UnknownOptionError(f'unknown model argument(s) {sorted(unknown)} for SimpleViTConfig',
                                     key=sorted(unknown)[0])
        top = {name: kwargs.get(name, getattr(base, name)) for name in _TOP}
        if fresh and 'grid_mode' not in kwargs:
            top['grid_mode'] = None
        if 'dynamic_img_pad' in kwargs:
            top['grid_mode'] = _grid_mode(kwargs.get('grid_mode'), kwargs['dynamic_img_pad'])
        parts = {name: {f.name: getattr(part, f.name) for f in fields(part)}
                 for name, part in ((name, kwargs.get(name, getattr(base, name))) for name in _PARTS)
                 for part in [part if isinstance(part, Part) else _PARTS[name].from_dict(part)]}
        positions = [PositionScheme.parse(s) for s in kwargs.get('positions', base.positions)]
        if fresh and 'block' not in kwargs:
            parts['block']['mlp_dim'] = None
        for flat, value in kwargs.items():
            if flat in _SIMPLE:
                part, name = _SIMPLE[flat]
                parts[part][name] = value
        parts['head']['pool'] = cls._flat_pool(parts['head']['pool'], kwargs)
        if 'pos_embed' in kwargs:
            by_class = {type(s): s for s in positions}
            positions = [by_class.get(scheme, scheme()) for scheme in _parse_pos_embed(kwargs['pos_embed'])]
        for i, scheme in enumerate(positions):
            changes = {f: kwargs[flat] for flat, (owner, f) in _SCHEME_FLAT.items()
                       if owner is type(scheme) and flat in kwargs}
            positions[i] = dataclasses.replace(scheme, **changes) if changes else scheme
        try:
            return cls(**top, positions=tuple(positions),
                       **{name: _PARTS[name](**values) for name, values in parts.items()})
        except TypeError as e:
            raise ViTVariantsError(f'bad model arguments: {e}') from None

    @staticmethod
    def _flat_pool(pool: PoolPart, kwargs: Mapping[str, Any]) -> PoolPart:
        """The pool after the flat ``global_pool`` and its options (``attn_pool_*``) are applied."""
        kind = kwargs.get('global_pool', pool.kind)
        options = {f: kwargs[flat] for flat, (owner, f) in _POOL_FLAT.items()
                   if owner is POOL_KINDS.get(kind) and flat in kwargs}
        if kind == pool.kind and not options:
            return pool
        kept = pool.to_dict() if kind == pool.kind else {}
        return PoolPart.parse({**kept, **options, 'kind': kind} if kind in POOL_KINDS else kind)

    # -- derived ----------------------------------------------------------------------------------
    def position(self, scheme: Type[S]) -> Optional[S]:
        """This config's position scheme of that class, or None."""
        return next((s for s in self.positions if isinstance(s, scheme)), None)

    @property
    def flat_pos_embed(self) -> str:
        """The release-0.2.0 ``pos_embed`` string of the position schemes ('learn+rope'; 'none')."""
        return '+'.join(s.scheme for s in self.positions) or 'none'

    @property
    def pool_width(self) -> int:
        """The width of the pooled feature the head reads (before ``rep_size``): CoCa's pooler has its own."""
        return self.head.pool.width(self.embed_dim)

    @property
    def dynamic_img_pad(self) -> bool:
        """Whether input sizes the patch does not divide are padded ('pad', 'pool')."""
        return self.grid_mode in ('pad', 'pool')

    @property
    def grid_size(self) -> Tuple[int, int]:
        """The nominal token grid (ceil division when padding)."""
        return grid_for(self.img_size, self.patch_size, self.dynamic_img_pad)

    @property
    def num_prefix_slots(self) -> int:
        """Rows of a learned table that belong to the class token and the distillation token (0, 1 or 2)."""
        return 1 + int(self.tokens.dist) if any(s.table_cls_slot for s in self.positions) else 0

    @property
    def num_prefix_tokens(self) -> int:
        """Tokens before the patch tokens: the class token, the distillation token, then the registers."""
        return self.tokens.count

    @property
    def embeds_patches_alone(self) -> bool:
        """Whether the patch embedding sees one patch at a time, so a flattened patch alone gives its token."""
        return self.patch.embeds_patches_alone

    def check_limits(self, limits: Limits = DEFAULT_LIMITS, path: Optional[str] = None) -> 'SimpleViTConfig':
        """Refuse sizes beyond ``limits`` (before any model is built from this config); returns self."""
        grid = self.grid_size
        limits.check_dims(path=path, depth=self.depth, width=max(self.embed_dim, self.head.rep_size or 0),
                          mlp=self.block.mlp_dim, heads=self.num_heads, classes=self.num_classes,
                          img_size=max(*self.img_size, *self.patch_size),
                          tokens=grid[0] * grid[1] + self.tokens.registers)
        if any(s.needs_single_class_token for s in self.positions):  # each block's bias over the grid, float32
            limits.check('rel_pos_bytes', rel_pos_bytes(grid[0] * grid[1] + self.num_prefix_tokens, self.num_heads),
                         path=path)
        return self

    # -- JSON round trip --------------------------------------------------------------------------
    def to_flat(self, include_training: bool = False) -> Dict[str, Any]:
        """Release 0.2.0's flat constructor kwargs (squares as ints); block options newer than it only where they
        differ from their default; training ones on request."""
        values: Dict[str, Any] = {name: getattr(self, name) for name in _TOP}
        for name in ('img_size', 'patch_size'):
            values[name] = values[name][0] if values[name][0] == values[name][1] else tuple(values[name])
        for flat, (part, name) in _SIMPLE.items():
            values[flat] = getattr(getattr(self, part), name)
        defaults = {cls: cls() for cls in POSITION_SCHEMES.values() if not any(f.default is dataclasses.MISSING
                                                                               for f in fields(cls))}
        for flat, (owner, name) in _SCHEME_FLAT.items():
            values[flat] = getattr(self.position(owner) or defaults.get(owner), name, None)
        coca = POOL_KINDS['coca'](dim=self.embed_dim)
        for flat, (owner, name) in _POOL_FLAT.items():
            values[flat] = getattr(self.head.pool if isinstance(self.head.pool, owner) else coca, name, None)
        values['global_pool'], values['pos_embed'] = self.head.pool.kind, self.flat_pos_embed
        out = {name: values[name] for name in _FLAT_0_2}
        out.update({name: values[name] for name in _NEWER if values[name] != getattr(BlockPart, _SIMPLE[name][1])})
        if include_training:
            out.update({name: values[name] for name in _TRAINING})
        return out

    def to_dict(self, include_training: bool = False) -> Dict[str, Any]:
        """The composed JSON form (parts as plain dicts, squares as ints); training settings on request."""
        out: Dict[str, Any] = {name: getattr(self, name) for name in _TOP}
        for name in ('img_size', 'patch_size'):
            out[name] = out[name][0] if out[name][0] == out[name][1] else list(out[name])
        out.update(patch=self.patch.to_dict(), tokens=self.tokens.to_dict(),
                   positions=[s.to_dict() for s in self.positions], block=self.block.to_dict(),
                   head=self.head.to_dict())
        if include_training:
            out['training'] = self.training.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], path: Optional[str] = None) -> 'SimpleViTConfig':
        """A config from ``to_dict`` or ``to_flat`` output (``config.json``'s ``model_args``, either form); unknown
        keys are refused."""
        if not isinstance(data, Mapping):
            raise ViTVariantsError(f'model arguments must be a JSON object, got {type(data).__name__}', path=path)
        try:
            return cls.of(**data)
        except ViTVariantsError as e:
            raise ViTVariantsError(e.reason, path=path, key=e.key) from None
        except (TypeError, ValueError) as e:
            raise ViTVariantsError(f'bad model arguments: {e}', path=path) from None


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
        """This row's config with ``overrides`` (a folder's model_args, a caller's kwargs) on top: a part given whole
        replaces the row's, flat names win over both."""
        if any(name in SimpleViTConfig.PARTS for name in overrides):
            return SimpleViTConfig.of(**self.kwargs).replace(**overrides)
        return SimpleViTConfig.of(**{**self.kwargs, **overrides})


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
    value = config.to_flat()[name]
    return value is not None if name == 'init_values' else value


def architecture_for(config: SimpleViTConfig) -> str:
    """The registered model matching every dimension, else the nearest family member.

    ``config.json`` always carries the full ``model_args``, so the nearest name only labels the
    family; it never decides the network.
    """
    def distance(name: str) -> Tuple[int, ...]:
        ref = MODELS[name].config()
        return tuple(int(_dim(config, d) != _dim(ref, d)) for d in _DIMS)

    flat = config.to_flat(include_training=True)
    # timm's create_model drops None keyword arguments, so a row that sets a field this config leaves None
    # (DINOv3's init_values, a rep_size) would fill it when the folder is loaded: such rows cannot label it.
    eligible = [name for name, entry in MODELS.items()
                if not any(value is not None and flat.get(key) is None for key, value in entry.kwargs.items())]
    return min(eligible, key=lambda name: (sum(distance(name)), distance(name)))


def heads_for_width(width: int) -> Optional[int]:
    """The head count of the standard ViT of this width (192: 3, 384: 6, 768: 12, 1024: 16, 1280: 16)."""
    return next((v.heads for v in VARIANTS.values() if v.width == width), None)
