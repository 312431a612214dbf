"""Perception Encoder's RoPE, as timm's ``Eva`` builds it for its ``vit_pe_*`` entries: the 'pe_rope' position scheme
(``PeRope``, its part) and its module (``PeRotary``, registered in ``positions.SCHEMES``).

timm's ``RotaryEmbeddingCat`` with ``in_pixels=False``, ``grid_indexing='xy'``, ``grid_offset`` and
``ref_feat_shape``: patch (i, j) of an h x w grid sits at ``(i + offset) / h * ref_rows`` and
``(j + offset) / w * ref_cols`` (the offset added before the scaling to the reference grid, so each side spans the
reference grid whatever its own length), and the head's frequencies ``1 / theta^(4k / hd)`` rotate the column
angles first, then the row ones ([cols | rows], the 'xy' order), on interleaved pairs. The offset is 1 where PE has
a [CLS] token: Meta's ``Rope2D`` gives [CLS] position 0 (no rotation) and the patches 1..n; timm, and this
scheme, leave the prefix tokens unrotated and start the patches at 1. No tensor is stored: the rotations are made
for each image's own grid, so any grid (square or not, an NCHW batch or packed NaFlex rows) gets timm's rotations
for that grid, as its ``set_input_size`` or ``dynamic_img_size`` would make them.
"""
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, Tuple

import torch

from ..choices import _is_int, _is_number
from ..config import SimpleViTConfig
from ..parts import PositionScheme
from ..positions import SCHEMES
from ..rope import RotaryScheme, _check_head_dim, _interleaved, rope_frequencies
from ..scheme import SchemeModule

__all__ = ['PeRope', 'PeRotary']


@dataclass(frozen=True)
class PeRope(PositionScheme, scheme='pe_rope'):
    """PE's 2D RoPE (module docstring): base ``theta``, positions scaled to ``ref_grid`` (rows, cols) after adding
    ``offset``, [cols | rows] on interleaved pairs; prefix tokens are not rotated. The defaults are PE-Core T/S/L's."""
    theta: float = 10000.
    ref_grid: Tuple[int, int] = (24, 24)
    offset: float = 1.
    slot: ClassVar[str] = 'rope'
    needs_head_width_multiple_of_4: ClassVar[bool] = True

    def __post_init__(self) -> None:
        self._check('theta', lambda v: _is_number(v) and v > 0, 'expected a positive number')
        self._check('offset', lambda v: _is_number(v) and v >= 0, 'expected a number >= 0')
        self._check('ref_grid', lambda v: isinstance(v, (list, tuple)) and len(v) == 2 and
                    all(_is_int(n) and n >= 1 for n in v), 'expected two positive integers (rows, cols)')
        object.__setattr__(self, 'ref_grid', tuple(self.ref_grid))  # JSON gives a list


class PeRotary(RotaryScheme):
    """The 'pe_rope' scheme's module: each patch token's rotation from its (row, col) and its image's grid."""

    def __init__(self, head_dim: int, theta: float, ref_grid: Tuple[int, int], offset: float) -> None:
        super().__init__()
        _check_head_dim(head_dim)
        self.head_dim, self.theta, self.ref_grid, self.offset = head_dim, float(theta), ref_grid, float(offset)

    def forward(self, coords: torch.Tensor, grids: torch.Tensor) -> torch.Tensor:
        freqs = rope_frequencies(self.head_dim // 2, self.theta, coords.device)
        ref = torch.tensor(self.ref_grid, dtype=torch.float32, device=coords.device)
        t = (coords.float() + self.offset) / grids.float() * ref  # (T, 2): timm's (arange(n) + offset) / n * ref
        angles = torch.cat([t[:, 1, None] * freqs, t[:, 0, None] * freqs], dim=-1)  # (T, hd/2): [cols | rows]
        return _interleaved(angles)[None, None]


def _build(cfg: SimpleViTConfig, part: PeRope, grid: Tuple[int, int], dd: Dict[str, Any]) -> SchemeModule:
    return PeRotary(cfg.embed_dim // cfg.num_heads, part.theta, part.ref_grid, part.offset)


SCHEMES[PeRope.scheme] = _build  # the 'pe_rope' part's module, in the one registry of schemes
