"""The two position schemes of timm's Qwen3 vision towers (``qwen3_vit``), applied together: the 'stretched' learned
table (``Stretched``, module ``StretchedTable``) and the 'axial_half' rotary positions (``AxialHalf``, module
``AxialHalfRope``), both registered in ``positions.SCHEMES``.

* 'stretched': a learned (side * side, D) table, read for an image of h x w patches by resizing it to h x w with
  bilinear ``align_corners=True`` in float32 (the table as it is at h = w = side): timm's ``resample_pos_embed_grid``,
  which the towers run on every forward. The table is the scheme's own tensor (``abs_pos.table``), sized at build time
  by the square nominal grid and never resized (no ``geometry.fit_tensor`` rule: a conversion to another nominal grid
  is refused), so the model gives at every input grid what timm's gives; resizing it to a nominal grid and again to
  the input's would not.
* 'axial_half': timm's ``RotaryEmbeddingCat`` as the towers build it (no reference grid, positions not in pixels):
  integer patch coordinates, head_dim / 4 frequencies ``1 / 10000 ** (4k / head_dim)`` per axis laid out
  [rows | cols], tiled twice for the half-split rotation (``rotate_half``). It differs from RoPE-ViT's 'axial' (cols
  first, interleaved pairs) and EVA-02's (positions scaled to a grid, interleaved).
"""
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, List, Optional, Tuple

import torch
from timm.layers import register_notrace_module

from ..config import SimpleViTConfig
from ..errors import ViTVariantsError
from ..geometry import interpolate_grid
from ..parts import PositionScheme
from ..positions import SCHEMES
from ..rope import RotaryScheme, rope_frequencies
from ..posemb import SquareTable
from ..scheme import SchemeModule

__all__ = ['Stretched', 'StretchedTable', 'AxialHalf', 'AxialHalfRope', 'THETA']

THETA = 10000.  # the base of the towers' RoPE (timm's rope_temperature)


@dataclass(frozen=True)
class Stretched(PositionScheme, scheme='stretched'):
    """A learned square table, stretched to each image's grid (module docstring); the table's grid is the model's
    nominal grid when it is built."""
    slot: ClassVar[str] = 'abs_pos'


@register_notrace_module
class StretchedTable(SquareTable):
    """The 'stretched' scheme's module: the (side * side, D) table, resized bilinearly (corners aligned) to each
    image's grid."""
    def forward(self, rows: int, cols: int) -> torch.Tensor:
        """(rows * cols, D): the table resized to a rows x cols grid (``geometry.interpolate_grid``: float32, the
        table's dtype back; the table itself at its own grid, except while a graph is captured)."""
        return interpolate_grid(self.table[None], rows, cols, self.side, self.side, 0, 'bilinear', True, False)[0]

    def add_to(self, tokens: torch.Tensor, coords: torch.Tensor, counts: List[int], grids: List[Tuple[int, int]],
               indexed: bool, table: Optional[torch.Tensor], nominal_h: int, nominal_w: int
               ) -> Tuple[torch.Tensor, List[Optional[torch.Tensor]]]:
        """The tokens plus the table stretched to each image's grid (a NaFlex dict's tokens index it); no prefix
        slots."""
        slots: List[Optional[torch.Tensor]] = [None for _ in grids]
        if len(grids) == 1 and not indexed:
            return tokens + self(grids[0][0], grids[0][1]).to(tokens.dtype), slots
        per_image = [coords] if len(grids) == 1 else list(coords.split(counts))
        rows = [self(h, w)[at[:, 0] * w + at[:, 1]] for (h, w), at in zip(grids, per_image)]
        return tokens + torch.cat(rows).to(tokens.dtype), slots


@dataclass(frozen=True)
class AxialHalf(PositionScheme, scheme='axial_half'):
    """Rotary positions of timm's ``RotaryEmbeddingCat`` on integer coordinates, [rows | cols], half-split rotation,
    base ``THETA`` (module docstring)."""
    slot: ClassVar[str] = 'rope'
    needs_head_width_multiple_of_4: ClassVar[bool] = True


class AxialHalfRope(RotaryScheme):
    """The 'axial_half' scheme's module (no tensors stored)."""
    rotate_half = True

    def __init__(self, head_dim: int, theta: float = THETA) -> None:
        super().__init__()
        self.head_dim, self.theta = head_dim, float(theta)

    def forward(self, coords: torch.Tensor, grids: torch.Tensor) -> torch.Tensor:
        freqs = rope_frequencies(self.head_dim // 2, self.theta, coords.device)  # hd / 4 per axis
        t = coords.float()
        angles = torch.cat([t[:, 0, None] * freqs, t[:, 1, None] * freqs], dim=-1).tile(2)  # (T, hd)
        return torch.cat([angles.sin(), angles.cos()], dim=-1)[None, None]


def _stretched(cfg: SimpleViTConfig, part: Stretched, grid: Tuple[int, int], dd: Dict[str, Any]) -> SchemeModule:
    if grid[0] != grid[1]:
        raise ViTVariantsError(f'the stretched table is square: a {grid[0]}x{grid[1]} nominal grid has none; use a '
                               'square image size', key='img_size')
    return StretchedTable(cfg.embed_dim, grid[0], **dd)


def _axial_half(cfg: SimpleViTConfig, part: AxialHalf, grid: Tuple[int, int], dd: Dict[str, Any]) -> SchemeModule:
    return AxialHalfRope(cfg.embed_dim // cfg.num_heads)


SCHEMES[Stretched.scheme] = _stretched  # the parts' modules, in the one registry of schemes
SCHEMES[AxialHalf.scheme] = _axial_half
