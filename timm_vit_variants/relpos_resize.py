"""Resizing a relative position bias table to another patch grid, by BEiT's rule or by timm's.

A table is ``((2h-1)·(2w-1) + 3, heads)``: one row per relative offset (row-major over (dh, dw)), then BEiT's three
extra rows ([CLS]-to-token, token-to-[CLS], [CLS]-to-[CLS]), which no resize touches.

- ``beit_resize_table`` is the rule of unilm's ``run_class_finetuning.py`` (BEiT, BEiT v2, and so data2vec-vision):
  the source offsets are stretched along a geometric progression that reaches the target's extent, and each head's
  table is fitted by an interpolating bicubic spline (``scipy.interpolate.interp2d(x, y, z, kind='cubic')``)
  evaluated at the integer target offsets. SciPy 1.14 removed ``interp2d``; on a rectangular grid it called FITPACK's
  ``regrid_smth`` (s=0) and ``bispev``, which are what ``RectBivariateSpline`` calls, so the result is the same
  bits. The rule is only defined for square grids (unilm raises ``NotImplementedError`` otherwise).
- ``timm_resize_table`` is timm's ``resize_rel_pos_bias_table``: the same progression with linear interpolation,
  for any H×W.
"""
from typing import List, Optional, Tuple

import numpy as np
import torch

from .errors import ViTVariantsError

__all__ = ['beit_resize_table', 'timm_resize_table', 'table_rows', 'require_square', 'EXTRA_ROWS', 'RESIZERS']

EXTRA_ROWS = 3


def table_rows(grid: Tuple[int, int]) -> int:
    """Rows of a BEiT table for a patch grid ``(h, w)``: every relative offset, then the three [CLS] rows."""
    return (2 * grid[0] - 1) * (2 * grid[1] - 1) + EXTRA_ROWS


def _check(table: torch.Tensor, src_grid: Tuple[int, int]) -> None:
    if table.ndim != 2 or table.shape[0] != table_rows(src_grid):
        raise ViTVariantsError(
            f'a relative position table for a {src_grid[0]}x{src_grid[1]} grid has '
            f'{table_rows(src_grid)} rows (offsets and 3 [CLS] rows) by heads',
            shapes=[tuple(table.shape), (table_rows(src_grid), 'heads')])


def _offsets(src_size: int, dst_size: int) -> List[float]:
    """unilm's source offsets: a bisection for the ratio ``q`` whose progression ``1 + q + ... + q^(n-1)`` reaches
    the target's half extent, then the offsets ``±(1, 1+q, 1+q+q², ...)`` around 0 (plain Python floats, as there)."""
    half = src_size // 2
    left, right = 1.01, 1.5
    while right - left > 1e-6:
        q = (left + right) / 2.0
        if (1.0 - q ** half) / (1.0 - q) > dst_size // 2:
            right = q
        else:
            left = q
    dis = []
    cur = 1
    for i in range(half):
        dis.append(cur)
        cur += q ** (i + 1)
    return [-d for d in reversed(dis)] + [0] + dis


def require_square(src_grid: Tuple[int, int], dst_grid: Tuple[int, int], path: Optional[str] = None) -> None:
    """Refuse a resize BEiT's rule does not define: a non-square source or target grid (an equal grid is no resize)."""
    if tuple(src_grid) == tuple(dst_grid):
        return
    for name, grid in (('source', src_grid), ('target', dst_grid)):
        if grid[0] != grid[1]:
            raise ViTVariantsError(
                f'BEiT\'s relative position resize defines no non-square grid ({name} {grid[0]}x{grid[1]}); '
                f'resize with timm\'s linear rule instead (--resample-like timm)', path=path, key='rel_pos.tables')


def beit_resize_table(table: torch.Tensor, src_grid: Tuple[int, int], dst_grid: Tuple[int, int]) -> torch.Tensor:
    """``table`` for ``src_grid`` resized to ``dst_grid`` by BEiT's own rule (geometric progression, cubic spline).

    Square grids only: BEiT's rule defines no other. The spline is fitted in float64 on the float32 table, and the
    result comes back in the table's dtype. An equal grid returns the table unchanged, as unilm's script does.
    """
    require_square(src_grid, dst_grid)
    _check(table, src_grid)
    if tuple(src_grid) == tuple(dst_grid):
        return table
    if table.is_meta:  # no values to fit on the meta device: only the new shape matters
        return table.new_empty((table_rows(dst_grid), table.shape[1]))
    try:
        from scipy.interpolate import RectBivariateSpline  # the 'beit' extra; only this rule needs it
    except ImportError:
        raise ViTVariantsError("BEiT's relative position resize needs scipy: pip install 'timm-vit-variants[beit]', "
                               "or resize with timm's linear rule (--resample-like timm)") from None

    src_size, dst_size = 2 * src_grid[0] - 1, 2 * dst_grid[0] - 1
    body, extra = table[:-EXTRA_ROWS], table[-EXTRA_ROWS:]
    src = np.asarray(_offsets(src_size, dst_size), dtype=np.float64)
    t = dst_size // 2.0
    dst = np.arange(-t, t + 0.1, 1.0)
    heads = []
    for i in range(table.shape[1]):
        z = body[:, i].detach().reshape(src_size, src_size).float().cpu().numpy()  # rows dh (y), columns dw (x)
        spline = RectBivariateSpline(src, src, z.T, kx=3, ky=3, s=0)  # interp2d fitted z.T: x first
        heads.append(torch.from_numpy(np.ascontiguousarray(spline(dst, dst).T)).float().reshape(-1, 1))
    resized = torch.cat(heads, dim=1).to(device=table.device)
    return torch.cat((resized, extra.float()), dim=0).to(table.dtype)


def timm_resize_table(table: torch.Tensor, src_grid: Tuple[int, int], dst_grid: Tuple[int, int]) -> torch.Tensor:
    """``table`` for ``src_grid`` resized to ``dst_grid`` by timm's ``resize_rel_pos_bias_table`` (linear; any H×W)."""
    from timm.layers import resize_rel_pos_bias_table

    _check(table, src_grid)
    if tuple(src_grid) == tuple(dst_grid):
        return table
    rows = table_rows(dst_grid)
    return resize_rel_pos_bias_table(table, new_window_size=tuple(dst_grid), new_bias_shape=(rows, table.shape[1]),
                                     old_window_size=tuple(src_grid))


# ``source_rules.REL_POS_RESAMPLE_RULES`` -> the function that applies it to one (entries, heads) table
RESIZERS = {'beit': beit_resize_table, 'timm': timm_resize_table}
