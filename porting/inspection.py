"""``vit-port inspect``: what is in a checkpoint, what model it implies, and how its position table looks.

The plot shows, for every patch position, the cosine similarity of its position embedding to all
other positions (Fig. 7 of the ViT paper), for the source grid and, when a new size/patch is
requested, for the resized table. Sin-cos sources are plotted from the generated table.
"""
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np
import torch

from timm_vit_variants.errors import ViTVariantsError
from timm_vit_variants.geometry import fit_tensor
from timm_vit_variants.posemb import sincos_2d

from .pipeline import ConversionPlan

__all__ = ['tensor_table', 'config_table', 'position_tables', 'similarity_mosaic', 'plot_position_similarity']


def tensor_table(inventory: List[Tuple[str, Tuple[int, ...], Any]]) -> str:
    """Aligned name / shape / dtype columns, one row per stored tensor, plus a parameter count."""
    rows = [(str(n), 'x'.join(str(s) for s in shape) or 'scalar', str(dtype)) for n, shape, dtype in inventory]
    header = ('name', 'shape', 'dtype')
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(3)]
    lines = ['  '.join(c.ljust(w) for c, w in zip(header, widths)).rstrip()]
    lines += ['  '.join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    count = sum(int(np.prod(shape)) if len(shape) else 1 for _, shape, _ in inventory)
    lines.append(f'{len(rows)} tensors, {count:,} values')
    return '\n'.join(lines)


def config_table(fmt: str, model_args: Dict[str, Any], grid: Optional[Tuple[int, int]]) -> str:
    """The inferred SimpleVisionTransformer kwargs, one per line."""
    lines = [f'format: {fmt}', 'inferred SimpleVisionTransformer kwargs:']
    width = max(len(k) for k in model_args) if model_args else 0
    lines += [f'  {k.ljust(width)} = {v!r}' for k, v in model_args.items()]
    if grid is not None:
        lines.append(f'  (learned position grid {grid[0]}x{grid[1]})')
    return '\n'.join(lines)


def position_tables(src: Any, plan: ConversionPlan) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """(source grid table, resized table or None) as (tokens, D), without any cls slot.

    A learned table is read from the checkpoint (that one tensor only) and resized through
    ``geometry.fit_tensor`` with the plan's rule; sin-cos tables are generated for each grid, as the
    model does.
    """
    source, (src_geo, dst_geo) = plan.source, (plan.source_geometry, plan.target_geometry)
    resized = src_geo.grid != dst_geo.grid
    if source.pos_table == 'sincos':
        before = sincos_2d(*src_geo.grid, source.embed_dim, source.sincos_temperature)
        return before, sincos_2d(*dst_geo.grid, source.embed_dim, source.sincos_temperature) if resized else None
    if source.pos_table != 'learn':
        raise ViTVariantsError('the source has no position embedding to plot', path=plan.source_path)
    item = next(i for i in src.plan if i.key == 'pos_embed')
    table = src.fill(item, torch.empty(item.shape))
    after = fit_tensor('pos_embed', table, src_geo, replace(dst_geo, prefix=src_geo.prefix)) if resized else None
    return table[0, src_geo.prefix:], (after[0, src_geo.prefix:] if after is not None else None)


def similarity_mosaic(table: torch.Tensor, grid: Tuple[int, int]) -> np.ndarray:
    """An image tiling, for each position (r, c), the grid of its cosine similarities; NaN gutters."""
    rows, cols = grid
    unit = torch.nn.functional.normalize(table.float(), dim=-1)
    sims = (unit @ unit.T).reshape(rows, cols, rows, cols).numpy()
    mosaic = np.full((rows * (rows + 1) - 1, cols * (cols + 1) - 1), np.nan, dtype=np.float32)
    for r in range(rows):
        for c in range(cols):
            mosaic[r * (rows + 1):r * (rows + 1) + rows, c * (cols + 1):c * (cols + 1) + cols] = sims[r, c]
    return mosaic


def plot_position_similarity(src: Any, plan: ConversionPlan, path: Union[str, Path]) -> Path:
    """Draw the similarity mosaics (source, and resized when requested) into a PNG."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    before, after = position_tables(src, plan)
    src_grid, dst_grid = plan.source_geometry.grid, plan.target_geometry.grid
    panels = [(before, src_grid, f'source grid {src_grid[0]}x{src_grid[1]}')]
    if after is not None:
        how = 'regenerated sin-cos' if plan.source.pos_table == 'sincos' else f'{plan.rule} resample'
        panels.append((after, dst_grid, f'{dst_grid[0]}x{dst_grid[1]} ({how})'))
    mosaics = [similarity_mosaic(table, grid) for table, grid, _ in panels]
    # At least one screen pixel per mosaic pixel (dpi 100), so large grids do not alias.
    side = max(5.0, 1.1 * max(max(m.shape) for m in mosaics) / 100)
    fig, axes = plt.subplots(1, len(panels), figsize=(side * len(panels) + 1.5, side + 1), squeeze=False)
    image = None
    for ax, mosaic, (_, _, title) in zip(axes[0], mosaics, panels):
        image = ax.imshow(mosaic, cmap='viridis', vmin=-1, vmax=1, interpolation='nearest')
        ax.set_title(title)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle('Position embedding similarity (each tile: one position vs all)')
    fig.colorbar(image, ax=axes[0].tolist(), shrink=0.8, label='cosine similarity')
    path = Path(path)
    try:
        fig.savefig(path, dpi=100)
    except OSError as e:
        raise ViTVariantsError(f'cannot write the plot: {e.strerror or e}', path=str(path)) from None
    finally:
        plt.close(fig)
    return path
