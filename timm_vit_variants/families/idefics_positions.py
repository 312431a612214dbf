"""NaViT-style bucketed positions, as the Idefics2, Idefics3 and SmolVLM image towers read their table: the
'bucketed' position scheme (``Bucketed``, its part) and its module (``BucketedTable``, registered in
``positions.SCHEMES``).

The tower stores a learned (n * n, D) table for its square n x n pretraining grid. An image of h x w patches gives
its patch (i, j) the table row ``bucket(i / h) * n + bucket(j / w)``, ``bucket(f)`` the number of the boundaries
``arange(1 / n, 1, 1 / n)`` at or below f (``torch.bucketize(..., right=True)``), f clamped below 1: at h = w = n the
rows in order (a plain SigLIP table), at other grids a nearest-like gather from the cell of the stored grid each
patch's top-left corner falls in. ``bucket_rows`` computes it as the towers' embeddings do, in float32, so the rows
are the same ones.

The table is the scheme's own tensor (``abs_pos.table``), sized at build time by the nominal grid and never resized:
every input grid reads the stored table, so the model at any grid gives what the tower gives an image of that size.
An image the towers' patch mask pads is, in its valid patches, an image of the valid size; packed NaFlex rows
(each image its own grid) are read the same way.
"""
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, List, Optional, Tuple

import torch
from timm.layers import register_notrace_module

from ..config import SimpleViTConfig
from ..errors import ViTVariantsError
from ..parts import PositionScheme
from ..positions import SCHEMES
from ..posemb import SquareTable
from ..scheme import SchemeModule

__all__ = ['Bucketed', 'BucketedTable', 'bucket_rows']


@dataclass(frozen=True)
class Bucketed(PositionScheme, scheme='bucketed'):
    """A learned square table read by bucketing each patch's fractional coordinates into its grid (module
    docstring); the table's grid is the model's nominal grid when it is built."""
    slot: ClassVar[str] = 'abs_pos'


def bucket_rows(coords: torch.Tensor, sizes: torch.Tensor, side: int) -> torch.Tensor:
    """(T,) table rows of (T, 2) patch coordinates (y, x) on images of (T, 2) or (1, 2) grid sizes (rows, cols),
    for a ``side`` x ``side`` table: the towers' bucketing, operation for operation."""
    boundaries = torch.arange(1 / side, 1.0, 1 / side, device=coords.device)
    fractional = coords.to(torch.float32) * (1.0 / sizes.to(torch.float32))
    buckets = torch.bucketize(fractional.clamp(max=1.0 - 1e-6), boundaries, right=True)
    return buckets[:, 0] * side + buckets[:, 1]


@register_notrace_module
class BucketedTable(SquareTable):
    """The 'bucketed' scheme's module: the (side * side, D) table, each patch token given its bucketed row."""
    def add_to(self, tokens: torch.Tensor, coords: torch.Tensor, counts: List[int], grids: List[Tuple[int, int]],
               indexed: bool, table: Optional[torch.Tensor], nominal_h: int, nominal_w: int
               ) -> Tuple[torch.Tensor, List[Optional[torch.Tensor]]]:
        """The tokens plus each one's row for its image's grid (whole images and NaFlex tokens alike); no prefix
        slots."""
        slots: List[Optional[torch.Tensor]] = [None for _ in grids]
        sizes = torch.tensor(grids, device=coords.device)
        if len(grids) > 1:
            sizes = sizes.repeat_interleave(torch.tensor(counts, device=coords.device), dim=0)
        rows = self.table[bucket_rows(coords, sizes, self.side)]
        return tokens + rows.to(tokens.dtype), slots


def _build(cfg: SimpleViTConfig, part: Bucketed, grid: Tuple[int, int], dd: Dict[str, Any]) -> SchemeModule:
    if grid[0] != grid[1]:
        raise ViTVariantsError(f'the bucketed table is square: a {grid[0]}x{grid[1]} nominal grid has none; use a '
                               'square image size', key='img_size')
    return BucketedTable(cfg.embed_dim, grid[0], **dd)


SCHEMES[Bucketed.scheme] = _build  # the 'bucketed' part's module, in the one registry of schemes
