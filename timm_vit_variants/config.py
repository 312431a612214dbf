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
from .errors import UnknownOptionError, ViTVariantsError
from .limits import DEFAULT_LIMITS, Limits, rel_pos_bytes
from .parts import (POOL_KINDS, POSITION_SCHEMES, BlockPart, HeadPart, Part, PatchPart, PoolPart, PositionScheme,
                    TokensPart, TrainingPart)

__all__ = [
    'SimpleViTConfig', 'POOL_TYPES', 'POS_EMBED_TYPES', 'RESAMPLE_RULE_NAMES',
    'PATCH_EMBED_TYPES', 'PATCH_NORM_TYPES', 'GRID_MODES', 'ACT_LAYERS', 'pair', 'grid_for',
    'activation_name', 'is_family_architecture', 'resample_rule', 'TensorSpec',
    'HEAD_KEYS',
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
_POOL_FLAT = {flat: (cls, f) for cls in POOL_KINDS.values() for f, flat in cls.FLAT.items()}
_SCHEME_FLAT = {flat: (cls, f) for cls in POSITION_SCHEMES.values() for f, flat in cls.FLAT.items()}
# Block and position-scheme options newer than release 0.2.0, with their defaults: in a flat dict only when they
# differ from the default, so a folder of the earlier release reads the same and the new field's default holds.
_NEWER: Dict[str, Any] = {
    **{flat: getattr(BlockPart, f) for f, flat in BlockPart.FLAT.items() if flat not in _FLAT_0_2},
    **{flat: getattr(cls, f) for flat, (cls, f) in {**_SCHEME_FLAT, **_POOL_FLAT}.items() if flat not in _FLAT_0_2}}
# Every flat name ``of`` accepts, and every name it accepts (the fields, parts whole, flat names).
FLAT_NAMES = _FLAT_0_2 + tuple(_NEWER) + _TRAINING + ('dynamic_img_pad',)
_PART_FIELDS = ('patch', 'tokens', 'positions', 'block', 'head', 'training')
ARGUMENT_NAMES = frozenset(_TOP + _PART_FIELDS + FLAT_NAMES)

Size = Union[int, Tuple[int, int]]
S = TypeVar('S', bound=PositionScheme)


def _beyond_flat(part: Part) -> bool:
    """Whether ``part`` sets a field that has no flat name (a family's scheme or pool) to other than its default."""
    return any(f.name not in part.FLAT and (f.default is dataclasses.MISSING or getattr(part, f.name) != f.default)
               for f in fields(part))


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
    """The scheme classes a flat ``pos_embed`` names ('learn+rope'; 'none' for none), in slot order as
    ``flat_pos_embed`` writes them (the table first)."""
    names = value.split('+') if isinstance(value, str) and value != 'none' else [] if value == 'none' else [None]
    schemes = tuple(POSITION_SCHEMES.get(name) for name in names)
    if None in schemes or list(schemes) != sorted(schemes, key=_slot_rank):
        raise ViTVariantsError(f'pos_embed={value!r}: expected one of {POS_EMBED_TYPES}', key='pos_embed')
    return schemes


def _slot_rank(scheme: Any) -> int:
    """Where a scheme is listed: by its slot, the table first (slots a family adds last)."""
    return _SLOT_ORDER.index(scheme.slot) if scheme.slot in _SLOT_ORDER else len(_SLOT_ORDER)


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
        fix('positions', tuple(sorted(schemes, key=_slot_rank)))
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
        if tokens.dist and not pool.ignores_distillation_token and (
                not tokens.cls or not pool.reads_distillation_token or head.rep_size or head.fc_norm):
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
        """Rows of a learned table that belong to prefix tokens: the class token and the distillation token, and
        the registers where the table has rows for them (the first rows, in the tokens' order)."""
        cls = 1 + int(self.tokens.dist) if any(s.table_cls_slot for s in self.positions) else 0
        return cls + (self.tokens.registers if any(s.table_reg_slots for s in self.positions) else 0)

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
        differ from their default; training ones on request; ``positions`` whole beside them where a family's
        scheme has settings other than its defaults."""
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
        for flat, (owner, name) in _POOL_FLAT.items():  # another kind's options: their defaults (CoCa's width ours)
            values[flat] = getattr(self.head.pool if isinstance(self.head.pool, owner) else
                                   coca if owner is POOL_KINDS['coca'] else owner(), name)
        values['global_pool'], values['pos_embed'] = self.head.pool.kind, self.flat_pos_embed
        out = {name: values[name] for name in _FLAT_0_2}
        out.update({name: values[name] for name, default in _NEWER.items() if values[name] != default})
        # A family's scheme or pool may hold settings no flat name carries: then the part is written whole (``of``
        # reads the parts, then the flat names on top, which agree).
        if any(_beyond_flat(s) for s in self.positions):
            out['positions'] = [s.to_dict() for s in self.positions]
        if _beyond_flat(self.head.pool):
            out['head'] = self.head.to_dict()
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
