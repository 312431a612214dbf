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
from timm_vit_variants.parts import Learned, SinCos
from timm_vit_variants.posemb import sincos_2d

from .plan import ConversionPlan

__all__ = ['tensor_table', 'config_table', 'position_tables', 'similarities', 'similarity_mosaic', 'colour_range',
           'plot_position_similarity']


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
    if source.position(SinCos) is not None:
        temperature = source.position(SinCos).temperature
        before = sincos_2d(*src_geo.grid, source.embed_dim, temperature)
        return before, sincos_2d(*dst_geo.grid, source.embed_dim, temperature) if resized else None
    if source.position(Learned) is None:
        raise ViTVariantsError('the source has no position embedding to plot', path=plan.source_path)
    item = next(i for i in src.plan if i.key == 'pos_embed')
    table = src.fill(item, torch.empty(item.shape))
    after = fit_tensor('pos_embed', table, src_geo, replace(dst_geo, prefix=src_geo.prefix)) if resized else None
    return table[0, src_geo.prefix:], (after[0, src_geo.prefix:] if after is not None else None)


def similarities(table: torch.Tensor) -> np.ndarray:
    """(tokens, tokens) cosine similarities of a (tokens, D) table."""
    unit = torch.nn.functional.normalize(table.float(), dim=-1)
    return (unit @ unit.T).numpy()


def similarity_mosaic(sims: np.ndarray, grid: Tuple[int, int]) -> np.ndarray:
    """An image tiling, for each position (r, c), the grid of its cosine similarities; NaN gutters."""
    rows, cols = grid
    sims = sims.reshape(rows, cols, rows, cols)
    mosaic = np.full((rows * (rows + 1) - 1, cols * (cols + 1) - 1), np.nan, dtype=np.float32)
    for r in range(rows):
        for c in range(cols):
            mosaic[r * (rows + 1):r * (rows + 1) + rows, c * (cols + 1):c * (cols + 1) + cols] = sims[r, c]
    return mosaic


def colour_range(sims: np.ndarray) -> Tuple[float, float]:
    """The colour scale a panel's data calls for: the smallest to the largest similarity between two different
    positions (each position's similarity to itself, 1, would otherwise flatten a smooth table to one colour)."""
    others = sims[~np.eye(len(sims), dtype=bool)]
    if others.size == 0:
        return -1.0, 1.0
    low, high = float(others.min()), float(others.max())
    if high - low < 1e-6:  # a constant table: centre a small range on it
        low, high = low - 0.5e-3, high + 0.5e-3
    return low, high


def plot_position_similarity(src: Any, plan: ConversionPlan, path: Union[str, Path],
                             source_name: Optional[str] = None) -> Path:
    """Draw the similarity mosaics (source, and resized when requested) into a PNG, each with its own colour scale.

    The figure is laid out tight (constrained layout, saved with a small pad), titled with ``source_name``, and
    carries a caption line saying how to read it and how the colour scale was chosen.
    """
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    before, after = position_tables(src, plan)
    src_grid, dst_grid = plan.source_geometry.grid, plan.target_geometry.grid
    panels = [(before, src_grid, f'source grid {src_grid[0]}x{src_grid[1]}')]
    if after is not None:
        how = 'regenerated sin-cos' if plan.source.position(SinCos) is not None else f'{plan.rule} resample'
        panels.append((after, dst_grid, f'{dst_grid[0]}x{dst_grid[1]} ({how})'))
    sims = [similarities(table) for table, _, _ in panels]
    mosaics = [similarity_mosaic(s, grid) for s, (_, grid, _) in zip(sims, panels)]
    # At least one screen pixel per mosaic pixel (dpi 100), so large grids do not alias.
    side = max(3.2, 1.05 * max(max(m.shape) for m in mosaics) / 100)
    fig, axes = plt.subplots(1, len(panels), figsize=(side * 1.22 * len(panels), side + 0.9), squeeze=False,
                             layout='constrained')
    for ax, mosaic, s, (_, _, title) in zip(axes[0], mosaics, sims, panels):
        low, high = colour_range(s)
        image = ax.imshow(mosaic, cmap='viridis', vmin=low, vmax=high, interpolation='nearest')
        ax.set_title(title, fontsize=10)
        ax.set_axis_off()
        bar = fig.colorbar(image, ax=ax, fraction=0.046, pad=0.02)
        bar.ax.tick_params(labelsize=8)
    what = f'{source_name}: ' if source_name else ''
    fig.suptitle(f'{what}position-embedding similarity', fontsize=11)
    fig.supxlabel('Tile (r, c): cosine similarity of position (r, c) to every position. Colour scale per panel, '
                  'from the data:\nthe least to the most similar pair of different positions (a tile\'s own '
                  'position, 1.0, shows at the top colour).', fontsize=8)
    path = Path(path)
    try:
        fig.savefig(path, dpi=100, bbox_inches='tight', pad_inches=0.05)
    except OSError as e:
        raise ViTVariantsError(f'cannot write the plot: {e.strerror or e}', path=str(path)) from None
    finally:
        plt.close(fig)
    return path
