"""The position-scheme parts of a ``SimpleViTConfig`` (re-exported by ``parts.py``), torch-free: each registers by
``scheme=`` name and says which slot of the model it fills, so a family adds its own."""
import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, Mapping, Optional, Tuple, Type, Union

from .choices import _is_int, _is_number, pair, resample_rule
from .source_rules import (DEFAULT_REL_POS_RULE, DEFAULT_ROPE_TYPE, REL_POS_RESAMPLE_RULES, ROPE_SCALED_TO_GRID,
                           ROPE_TYPES)
from .errors import ViTVariantsError
from .part_base import Part, TokensPart

__all__ = ['POSITION_SCHEMES', 'PositionScheme', 'SinCos', 'Learned', 'Factorized', 'Cpe', 'Rope', 'RelPos']

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
    registers have none); ``resample``: how it is resized for another grid (``geometry.RESAMPLE_RULES``);
    ``ar_preserving``: resized to the square of the grid's longer side, then its top-left grid kept (timm NaFlexVit's
    ``pos_embed_ar_preserving``), so every aspect ratio reads the table at one scale."""
    cls_slot: bool = False
    resample: str = 'bigvision'
    reg_slots: bool = False
    ar_preserving: bool = False
    slot: ClassVar[str] = 'abs_pos'
    FLAT: ClassVar[Mapping[str, str]] = {'cls_slot': 'pos_embed_cls_slot', 'resample': 'pos_embed_resample',
                                         'reg_slots': 'pos_embed_reg_slots', 'ar_preserving': 'pos_embed_ar_preserving'}
    WRITTEN_IF_SET: ClassVar[Tuple[str, ...]] = ('reg_slots', 'ar_preserving')

    def __post_init__(self) -> None:
        self._bools('cls_slot', 'reg_slots', 'ar_preserving')
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
class Factorized(PositionScheme, scheme='factorized'):
    """Factorised learned tables (timm NaFlexVit's ``pos_embed='factorized'``): one row per grid row, (G_h, D), and
    one per grid column, (G_w, D), a patch's position the sum of its row's and its column's. Each is resized linearly
    (half-pixel, no antialias) to the image grid's side (``ar_preserving``: both to its longer side), its first rows
    kept. The tables are stored at ``table_grid`` and never fitted to the nominal grid (``abs_pos.y``, ``abs_pos.x``)."""
    table_grid: Tuple[int, int] = (16, 16)
    ar_preserving: bool = False
    slot: ClassVar[str] = 'abs_pos'

    def __post_init__(self) -> None:
        object.__setattr__(self, 'table_grid', pair(self.table_grid, 'table_grid'))  # a JSON list read back
        self._bools('ar_preserving')


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
    kind: str = DEFAULT_ROPE_TYPE
    theta: float = 100.
    ref_grid: Optional[int] = None
    slot: ClassVar[str] = 'rope'
    needs_head_width_multiple_of_4: ClassVar[bool] = True
    FLAT: ClassVar[Mapping[str, str]] = {'kind': 'rope_type', 'theta': 'rope_theta', 'ref_grid': 'rope_ref_grid'}

    def __post_init__(self) -> None:
        self._choice('kind', ROPE_TYPES)
        self._check('theta', lambda v: _is_number(v) and v > 0, 'expected a positive number')
        self._check('ref_grid', lambda v: v is None or (_is_int(v) and v >= 1), 'expected a positive integer or None')
        scaled = self.kind in ROPE_SCALED_TO_GRID
        if scaled and self.ref_grid is None:
            raise self._bad('ref_grid', f'rope_type {self.kind!r} scales positions to its pretraining grid: give it '
                                        '(16 for EVA-02 at 224 px, patch 14)')
        if self.ref_grid is not None and not scaled:
            raise self._bad('ref_grid', f'only rope_type {" or ".join(map(repr, ROPE_SCALED_TO_GRID))} with rotary '
                                        'positions scales them to a grid')


@dataclass(frozen=True)
class RelPos(PositionScheme, scheme='relpos'):
    """BEiT's relative position bias (one ``rel_pos.tables`` table per block); ``resample``: how the tables are
    resized for another nominal grid, 'beit' (square grids only) or 'timm' (any grid)."""
    resample: str = DEFAULT_REL_POS_RULE
    slot: ClassVar[str] = 'rel_pos'
    needs_single_class_token: ClassVar[bool] = True
    FLAT: ClassVar[Mapping[str, str]] = {'resample': 'rel_pos_resample'}

    def __post_init__(self) -> None:
        self._choice('resample', REL_POS_RESAMPLE_RULES)
