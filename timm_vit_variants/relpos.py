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
"""
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn as nn
from timm.layers import register_notrace_module
from timm.models.beit import gen_relative_position_index

from .geometry import is_capturing
from .relpos_resize import table_rows, timm_resize_table

__all__ = ['RelPosBias']


def _bias(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """(heads, S, S) bias of a (entries, heads) table at an (S, S) index, as timm's Beit ``_get_rel_pos_bias``."""
    size = index.shape[0]
    return table[index.view(-1)].view(size, size, -1).permute(2, 0, 1).contiguous()


@register_notrace_module
class RelPosBias(nn.Module):
    """The relative-position scheme: ``tables`` (depth, entries, heads) and the nominal grid's index."""

    __jit_ignored_attributes__ = ['_cache']  # Python-side, by grid; TorchScript and captured graphs resize uncached

    def __init__(self, grid_size: Tuple[int, int], depth: int, num_heads: int, device=None, dtype=None) -> None:
        super().__init__()
        self.grid_size = (int(grid_size[0]), int(grid_size[1]))
        self.tables = nn.Parameter(torch.zeros(depth, table_rows(self.grid_size), num_heads, device=device,
                                               dtype=dtype))  # BEiT's and timm's zero init
        self.register_buffer('index', gen_relative_position_index(self.grid_size, device=device), persistent=False)
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
        self.index = gen_relative_position_index(self.grid_size, device=device)
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
                gen_relative_position_index(grid, device=self.tables.device))

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
            hit = (tag, resized, gen_relative_position_index(grid, device=tables.device))
            self._cache[grid] = hit
        return hit[1][layer], hit[2]

    @torch.jit.ignore
    def prepare_rows(self, chunk, patches, inputs: Dict[str, torch.Tensor], tensors: Dict[str, torch.Tensor],
                     sizes: Dict[str, List[int]]) -> None:
        """The chunk's (rows, capacity, capacity) index into the concatenated tables of its images' grids.

        Each image's block is its grid's index at its tokens' places ([CLS] first, then 1 + y * gw + x), offset
        to its grid's table in the concatenation; pairs across images or with empty slots take entry 0 (the
        rows' mask gives them -inf, or an empty slot attends to itself alone).
        """
        grids: Dict[Tuple[int, int], Tuple[int, torch.Tensor]] = {}  # grid -> (its table's offset, its index)
        total = 0
        device = patches.coords.device
        index = torch.zeros(chunk.rows, chunk.capacity, chunk.capacity, dtype=torch.long, device=device)
        coords = patches.coords.split(patches.counts)
        start = 0
        for i in chunk.images:
            grid = tuple(patches.grids[i])
            if grid not in grids:
                grids[grid] = (total, gen_relative_position_index(grid, device=device))
                total += table_rows(grid)
            offset, full = grids[grid]
            places = torch.cat([coords[i].new_zeros(1), 1 + coords[i][:, 0] * grid[1] + coords[i][:, 1]])
            slots = chunk.flat_index[start:start + len(places)]
            start += len(places)
            row, first = divmod(int(slots[0]), chunk.capacity)
            last = first + len(places)
            index[row, first:last, first:last] = full[places][:, places] + offset
        tensors['rel_pos'] = index
        sizes['rel_pos'] = [v for grid in grids for v in grid]

    @torch.jit.ignore
    def _rows_bias(self, layer: int, mask: Optional[torch.Tensor], tensors: Dict[str, torch.Tensor],
                   sizes: Dict[str, List[int]]) -> torch.Tensor:
        """Block ``layer``'s (rows, heads, capacity, capacity) bias of a chunk of packed rows, plus its mask."""
        flat = sizes['rel_pos']
        tables = []
        for k in range(0, len(flat), 2):
            grid_h, grid_w = flat[k], flat[k + 1]
            tables.append(self.tables[layer] if (grid_h, grid_w) == self.grid_size else
                          self._at_grid(layer, grid_h, grid_w)[0])
        bias = torch.cat(tables)[tensors['rel_pos']].permute(0, 3, 1, 2)
        return bias if mask is None else mask + bias
