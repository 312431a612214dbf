"""NVIDIA's C-RADIO towers as timm's NaFlexVit holds them (``naflexvit_*_radio_v3``, ``naflexvit_*_radio_v4``): their
position table, RADIO's CPE, as the 'radio' position scheme (``RadioTable``, its part; ``RadioPosTable``, its
module), and the reader of those folders (``TimmRadioCheckpoint``).

RADIO keeps its learned table at its maximum size (128 x 128 patches, 2048 px at patch 16) whatever the input, and
gives an image of h x w patches the table resized bilinearly, without antialias, to the square of the longer side
(L = max(h, w)), then its top-left h x w (timm: ``pos_embed_interp_mode='bilinear'``, ``pos_embed_antialias=False``,
``pos_embed_ar_preserving=True``; ``align_corners`` as each checkpoint's Hub code: True for C-RADIOv3 B and H). So
the table is the scheme's own tensor (``abs_pos.table``, timm's (1, G_h, G_w, D) table row-major), stored at its own
grid and never resized: the model's nominal grid (its default input, the folder's ``pretrained_cfg.input_size``) is
independent of it, and every input grid reads the stored table as RADIO does, whole images and packed NaFlex rows
(each image its own grid) alike.

The reader is timm's NaFlexVit reader with the table taken as this scheme where the embedding's options are RADIO's
(any other NaFlexVit table reads as the core reader reads it). The ``vit_*_radio_*`` VisionTransformer entries resize
RADIO's table to a fixed grid when timm loads them, so they are plain timm ViTs and read by the core timm reader.
NVIDIA's own layout (its Hub folders' ``model.safetensors``) is read by ``radio_native.RadioCheckpoint``.
"""
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, Optional, Tuple

import torch
import torch.nn as nn
from timm.layers import register_notrace_module, trunc_normal_

from ..checkpoints.fills import batched_grid_table
from ..checkpoints.routes import Probe, Route
from ..checkpoints.source import Rule
from ..checkpoints.timm_naflex import TimmNaFlexCheckpoint
from ..choices import pair
from ..config import SimpleViTConfig
from ..parts import PositionScheme
from ..posemb import LearnedPosResampler
from ..positions import SCHEMES
from ..scheme import SchemeModule
from .radio_native import RADIO_PREFIX, RadioCheckpoint
from .registry import Family

__all__ = ['RadioTable', 'RadioPosTable', 'TimmRadioCheckpoint', 'is_radio_cpe', 'FAMILY']


@dataclass(frozen=True)
class RadioTable(PositionScheme, scheme='radio'):
    """RADIO's CPE (module docstring): a learned table stored at ``table_grid``, resized bilinearly without antialias
    (``align_corners`` as the checkpoint's) to the square of each image grid's longer side, its top-left kept."""
    table_grid: Tuple[int, int] = (128, 128)
    align_corners: bool = False
    slot: ClassVar[str] = 'abs_pos'

    def __post_init__(self) -> None:
        object.__setattr__(self, 'table_grid', pair(self.table_grid, 'table_grid'))  # a JSON list read back
        self._bools('align_corners')


@register_notrace_module
class RadioPosTable(LearnedPosResampler):
    """The 'radio' scheme's module: its own (1, G_h * G_w, D) table ``table``, resampled (and cached) for each image's
    grid as the learned scheme resamples ``pos_embed``, from the table's grid rather than the nominal one."""
    learned_table = False

    def __init__(self, dim: int, part: RadioTable, device: Optional[torch.device] = None,
                 dtype: Optional[torch.dtype] = None) -> None:
        super().__init__(0, ar_preserving=True)
        self.rule = 'radio'
        self.mode, self.align_corners, self.antialias, self.offset = 'bilinear', part.align_corners, False, 0.
        self.table_grid = part.table_grid
        self.table = nn.Parameter(torch.zeros(1, part.table_grid[0] * part.table_grid[1], dim, device=device,
                                              dtype=dtype))
        trunc_normal_(self.table, std=.02)

    def _stored(self, table: Optional[torch.Tensor], grid_h: int, grid_w: int) -> Tuple[torch.Tensor, int, int]:
        """Its own table at its own grid (the model's nominal grid plays no part)."""
        return self.table, self.table_grid[0], self.table_grid[1]


def _build(cfg: SimpleViTConfig, part: RadioTable, grid: Tuple[int, int], dd: Dict[str, Any]) -> SchemeModule:
    return RadioPosTable(cfg.embed_dim, part, **dd)


SCHEMES[RadioTable.scheme] = _build  # the 'radio' part's module, in the one registry of schemes


def is_radio_cpe(embeds: nn.Module) -> bool:
    """Whether a timm ``NaFlexEmbeds`` resizes its learned table as RADIO does (module docstring)."""
    return (getattr(embeds, 'pos_embed_type', None) == 'learned' and embeds.pos_embed_interp_mode == 'bilinear'
            and not embeds.pos_embed_antialias and embeds.pos_embed_ar_preserving
            and not getattr(embeds, 'pos_embed_use_grid_sample', False))


class TimmRadioCheckpoint(TimmNaFlexCheckpoint):
    """A timm NaFlexVit RADIO folder: its table read as the 'radio' scheme where its options are RADIO's CPE."""
    RULES = {**TimmNaFlexCheckpoint.RULES, 'abs_pos.table': Rule(('{p}embeds.pos_embed',), batched_grid_table)}
    _corners: Optional[bool] = None  # RADIO's CPE: its align_corners (``_table_facts``)

    def _table_facts(self, embeds: nn.Module) -> Dict[str, Any]:
        if not is_radio_cpe(embeds):
            return super()._table_facts(embeds)
        self._corners = bool(embeds.pos_embed_align_corners)
        return dict(pos_embed_resample=self.SETTINGS['pos_embed_resample'])  # no learned scheme: it has no effect

    def _embedding_facts(self, model: nn.Module, arch: str) -> Dict[str, Any]:
        """The core reader's, the nominal input RADIO's default one (``pretrained_cfg.input_size``, 512 px) rather
        than its table's 2048 px."""
        facts = super()._embedding_facts(model, arch)
        size = (self.source_config.get('pretrained_cfg') or {}).get('input_size')
        if self._corners is not None and isinstance(size, (list, tuple)) and len(size) == 3:
            facts['img_size'] = tuple(size[1:])
        return facts

    def _position(self, local: set, dim: int, patch: Tuple[int, int], class_token: bool,
                  facts: Dict[str, Any]) -> Tuple[str, bool]:
        found = super()._position(local, dim, patch, class_token, facts)
        if self._corners is None:
            return found
        self._scheme = RadioTable(table_grid=self.grid, align_corners=self._corners)
        self.notes.append(f"detected: RADIO's CPE, its {self.grid[0]}x{self.grid[1]} table read at every grid as RADIO "
                          'reads it (bilinear, no antialias, from the square of the longer side, align_corners='
                          f"{self._corners}): the 'radio' position scheme")
        self.grid = None  # the table is never fitted to the nominal grid
        return RadioTable.scheme, False


def _radio_folder(p: Probe) -> bool:
    """A timm NaFlexVit folder of a RADIO architecture."""
    return 'radio' in str(p.config.get('architecture')) and p.prefix + 'embeds.proj.weight' in p.store


FAMILY = Family(
    'radio',
    # timm's NaFlexVit RADIO folders before timm's NaFlexVit folders (1000); NVIDIA's own layout (radio_native.py)
    routes=(Route(950., _radio_folder, TimmRadioCheckpoint),
            Route(2045., lambda p: RADIO_PREFIX + 'patch_generator.embedder.weight' in p.names, RadioCheckpoint)),
)
