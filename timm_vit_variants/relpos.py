"""BEiT's relative position bias as a position scheme: one learned table per block, added to the attention mask.

Each block's table (``rel_pos.tables``, (depth, (2 gh - 1)(2 gw - 1) + 3, heads) for the nominal gh x gw grid) holds
a bias per head for every (dy, dx) between two patch tokens, and three more entries: [CLS] to token, token to [CLS]
and [CLS] to [CLS], in the order of timm's ``gen_relative_position_index`` (which builds the (1 + N, 1 + N) index,
a non-persistent buffer here). BEiT's pretraining files share one table; their readers expand it into depth copies,
as BEiT's fine-tuning script does.

Any grid runs: a grid other than the nominal one takes the table resized with timm's ``resize_rel_pos_bias_table``
(its linear rule), cached by grid in inference. An NCHW batch gets each layer's (1, heads, 1 + N, 1 + N) bias as
its attention mask; packed NaFlex rows get each image's own bias block-diagonally, beside the rows' -inf between
images, so every image is attended as if it were alone. Biases are made one layer at a time, inside the block loop,
so memory holds one layer's. Resizing the nominal table itself (a conversion, ``set_input_size``) follows the
model's ``rel_pos_resample`` rule, in ``geometry.fit_tensor``.

The cost grows with the square of an image's tokens (and a NaFlex image's table with its grid's extent), so
``check_cost`` refuses an input whose bias, index and resized tables would exceed ``Limits.rel_pos_bytes`` or the
memory there is, before any of it is made; the index is computed from the tokens' (y, x) alone, never for a whole
grid a sparse NaFlex image merely spans. Packed rows count each chunk's bias in the packing budget (``pair_bytes``).
"""
from typing import Dict, Iterable, List, Optional, Tuple

import torch
import torch.nn as nn
from timm.layers import register_notrace_module

from .capacity import check_fits, gib
from .errors import ViTVariantsError
from .geometry import is_capturing
from .limits import Limits, rel_pos_bytes
from .posemb import grid_coords
from .relpos_resize import table_rows, timm_resize_table
from .scheme import SchemeModule

__all__ = ['RelPosBias', 'relative_index']


def relative_index(coords: torch.Tensor, grid: Tuple[int, int], out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The (1 + n, 1 + n) index into a ``grid``'s table of [CLS] and n patch tokens at (y, x) ``coords``: timm's
    ``gen_relative_position_index`` at those tokens' rows and columns (all of a grid's, row-major, give it whole).

    Made in place in ``out`` (or a new tensor), from the coordinates alone: no memory beyond the index itself.
    """
    n = coords.shape[0]
    rows, (grid_h, grid_w) = table_rows(grid), grid
    index = coords.new_empty(n + 1, n + 1) if out is None else out
    y, x = coords[:, 0], coords[:, 1]
    body = index[1:, 1:]
    body.copy_(y[:, None].expand(n, n)).sub_(y[None, :]).add_(grid_h - 1).mul_(2 * grid_w - 1)
    body.add_(x[:, None]).sub_(x[None, :]).add_(grid_w - 1)
    index[0, :] = rows - 3  # [CLS] to token
    index[:, 0] = rows - 2  # token to [CLS]
    index[0, 0] = rows - 1
    return index


def _grid_index(grid: Tuple[int, int], device: Optional[torch.device]) -> torch.Tensor:
    """A whole grid's (1 + N, 1 + N) index."""
    return relative_index(grid_coords(grid[0], grid[1], device), grid)


def _bias(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """(heads, *index.shape) bias of a (entries, heads) table at an index, as timm's Beit ``_get_rel_pos_bias``
    (gathered straight into that layout: no second copy)."""
    return table.t()[:, index]


@register_notrace_module
class RelPosBias(SchemeModule):
    """The relative-position scheme: ``tables`` (depth, entries, heads) and the nominal grid's index."""

    __jit_ignored_attributes__ = ['_cache']  # Python-side, by grid; TorchScript and captured graphs resize uncached

    def __init__(self, grid_size: Tuple[int, int], depth: int, num_heads: int, device=None, dtype=None) -> None:
        super().__init__()
        self.grid_size = (int(grid_size[0]), int(grid_size[1]))
        self.tables = nn.Parameter(torch.zeros(depth, table_rows(self.grid_size), num_heads, device=device,
                                               dtype=dtype))  # BEiT's and timm's zero init
        self.register_buffer('index', _grid_index(self.grid_size, device), persistent=False)
        self._cache: Dict[Tuple[int, int], Tuple[tuple, torch.Tensor, torch.Tensor]] = {}

    def set_grid_size(self, grid_size: Tuple[int, int]) -> None:
        """A new nominal grid (the tables are resized by the model, through ``geometry.fit_tensor``)."""
        self.grid_size = (int(grid_size[0]), int(grid_size[1]))
        self.init_non_persistent_buffers()

    @torch.jit.ignore
    def keep_layers(self, depth: int) -> None:
        """Keep the first ``depth`` blocks' tables (``prune_intermediate_layers``)."""
        self.tables = nn.Parameter(self.tables.detach()[:depth].clone(), requires_grad=self.tables.requires_grad)
        self._cache = {}

    def init_non_persistent_buffers(self) -> None:
        """Rebuild the index where it lives; on the meta device (a meta-device build), on the CPU."""
        device = None if self.index.device.type == 'meta' else self.index.device
        self.index = _grid_index(self.grid_size, device)
        self._cache = {}

    def forward(self, layer: int, grid_h: int, grid_w: int) -> torch.Tensor:
        """Block ``layer``'s (1, heads, 1 + N, 1 + N) bias for an NCHW batch of grid ``grid_h`` x ``grid_w``."""
        if grid_h == self.grid_size[0] and grid_w == self.grid_size[1]:
            return _bias(self.tables[layer], self.index)[None]
        if torch.jit.is_scripting():  # TorchScript keeps no Python cache: resized on each call
            table, index = self._resized(layer, grid_h, grid_w)
        else:
            table, index = self._at_grid(layer, grid_h, grid_w)
        return _bias(table, index)[None]

    def join_mask(self, layer: int, grid: Optional[List[int]], mask: Optional[torch.Tensor],
                  tensors: Dict[str, torch.Tensor], sizes: Dict[str, List[int]]) -> torch.Tensor:
        """The attention mask of block ``layer`` with its bias added: NCHW's (``grid``), or packed rows'."""
        if grid is not None:
            bias = self(layer, grid[0], grid[1])
            return bias if mask is None else mask + bias
        return self._rows_bias(layer, mask, tensors, sizes)

    @torch.jit.ignore
    def _resized(self, layer: int, grid_h: int, grid_w: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """Block ``layer``'s table resized to another grid by timm's rule, and that grid's index."""
        grid = (int(grid_h), int(grid_w))
        return (timm_resize_table(self.tables[layer], self.grid_size, grid),
                _grid_index(grid, self.tables.device))

    @torch.jit.ignore
    def _at_grid(self, layer: int, grid_h: int, grid_w: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """``_resized``, cached by grid in inference (the tag holds the parameter's identity and version, so a
        step, reload or ``.to()`` invalidates it); a captured graph or training resizes each call."""
        tables = self.tables
        grid = (int(grid_h), int(grid_w))
        if is_capturing() or (torch.is_grad_enabled() and tables.requires_grad):
            return self._resized(layer, grid_h, grid_w)
        tag = (id(tables), tables._version, tables.data_ptr(), tables.dtype, tables.device, self.grid_size)
        hit = self._cache.get(grid)
        if hit is None or hit[0] != tag:
            with torch.no_grad():
                resized = torch.stack([timm_resize_table(t, self.grid_size, grid) for t in tables.detach()])
            hit = (tag, resized, _grid_index(grid, tables.device))
            self._cache[grid] = hit
        return hit[1][layer], hit[2]

    @torch.jit.ignore
    def pair_bytes(self, itemsize: int) -> int:
        """Bytes this scheme adds to each (query, key) pair of a chunk of packed rows: its bias and its index."""
        return rel_pos_bytes(1, self.tables.shape[2], itemsize)

    @torch.jit.ignore
    def check_cost(self, longest: int, grids: Iterable[Tuple[int, int]], itemsize: int, limits: Limits, what: str,
                   device: Optional[torch.device] = None, key: Optional[str] = None) -> None:
        """Refuse, before any of it is made, relative positions for ``what`` that would need more than
        ``limits.rel_pos_bytes`` or the memory there is: each block's bias and index over the ``longest`` sequence,
        and the tables resized to the ``grids`` other than the nominal one (made per block, then stacked)."""
        depth, _, heads = self.tables.shape
        bias = rel_pos_bytes(longest, heads, itemsize)
        other = {(int(g[0]), int(g[1])) for g in grids} - {self.grid_size}
        tables = 2 * depth * heads * itemsize * sum(table_rows(g) for g in other)
        need = bias + tables
        if need > limits.rel_pos_bytes:
            raise ViTVariantsError(
                f'relative positions for {what} need {gib(need)} (a {heads}-head bias and its index over {longest} '
                f'tokens, {gib(bias)}; the tables resized to {len(other)} other grid(s), {gib(tables)}), more than '
                f'the rel_pos_bytes limit of {gib(limits.rel_pos_bytes)}; refusing before making them (give fewer '
                f'patches or a smaller grid, or lift the model\'s limits.rel_pos_bytes to {need})', key=key,
                needs=f'limit:rel_pos_bytes={need}')
        check_fits(need, f'relative positions for {what}', device, key)

    @torch.jit.ignore
    def prepare_rows(self, chunk, patches, inputs: Dict[str, torch.Tensor], tensors: Dict[str, torch.Tensor],
                     sizes: Dict[str, List[int]]) -> None:
        """The chunk's (rows, capacity, capacity) index into the concatenated tables of its images' grids.

        Each image's block is its tokens' index ([CLS] first, then its patches; ``relative_index``), offset to its
        grid's table in the concatenation; pairs across images or with empty slots take entry 0 (the rows' mask
        gives them -inf, or an empty slot attends to itself alone).
        """
        offsets: Dict[Tuple[int, int], int] = {}  # grid -> its table's offset in the concatenation
        total = 0
        index = torch.zeros(chunk.rows, chunk.capacity, chunk.capacity, dtype=torch.long, device=patches.coords.device)
        coords = patches.coords.split(patches.counts)
        start = 0
        for i in chunk.images:
            grid = tuple(patches.grids[i])
            if grid not in offsets:
                offsets[grid] = total
                total += table_rows(grid)
            length = 1 + patches.counts[i]
            row, first = divmod(int(chunk.flat_index[start]), chunk.capacity)
            start += length
            relative_index(coords[i], grid, out=index[row, first:first + length, first:first + length]).add_(
                offsets[grid])
        tensors['rel_pos'] = index
        sizes['rel_pos'] = [v for grid in offsets for v in grid]

    @torch.jit.ignore
    def _rows_bias(self, layer: int, mask: Optional[torch.Tensor], tensors: Dict[str, torch.Tensor],
                   sizes: Dict[str, List[int]]) -> torch.Tensor:
        """Block ``layer``'s (rows, heads, capacity, capacity) bias of a chunk of packed rows, plus its mask (added in
        place: one tensor of the chunk's bias is all it holds)."""
        flat = sizes['rel_pos']
        tables = []
        for k in range(0, len(flat), 2):
            grid_h, grid_w = flat[k], flat[k + 1]
            tables.append(self.tables[layer] if (grid_h, grid_w) == self.grid_size else
                          self._at_grid(layer, grid_h, grid_w)[0])
        bias = _bias(torch.cat(tables), tensors['rel_pos']).transpose(0, 1)
        return bias if mask is None else bias.add_(mask)
