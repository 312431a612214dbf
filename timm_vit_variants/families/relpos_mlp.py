"""timm's MLP relative-position bias (``timm.layers.RelPosMlp``, Swin-v2's log-spaced coordinates through a small
MLP) as a position scheme: the 'relpos_mlp' part (``MlpRelPos``) and its module (``MlpRelPosBias``, registered in
``positions.SCHEMES``), filling the ``rel_pos`` slot: each block's bias is added to its attention mask.

For a gh x gw grid every (dy, dx) between two patch tokens gets log-spaced coordinates (timm's
``gen_relative_log_coords``: 'cr', ``sign * log(1 + |d|)``; or 'swin', d normalised by (side - 1) to [-8, 8], then
``sign * log2(1 + |d|) / 3``), a timm ``Mlp`` (2 -> ``hidden`` -> heads, ReLU; 'swin' without the second bias) maps
them to one bias per head, gathered to (heads, N, N) by timm's ``gen_relative_position_index`` ('swin': then
``16 * sigmoid``). Prefix tokens ([CLS]) get zero bias, their rows and columns padded as timm pads them. One MLP per
block (``rel_pos.mlps.{i}``), or one for every block (``shared``: timm's ``shared_rel_pos``, ``rel_pos.mlps.0``).

The bias is generated for the input's own grid, so any grid, square or not, gives what timm's model gives after its
``set_input_size`` to that grid (which regenerates the same coordinates). Nothing is stored per grid, so a change of
the nominal grid resizes nothing. Packed NaFlex rows give each image its own grid's bias, block-diagonally (every
image attended as if alone, as timm runs it at its size): the chunk's index points each pair of an image's patch
tokens into its grid's (2 gh - 1)(2 gw - 1) generated entries, from the tokens' (y, x) alone, and every other pair
at a zero entry (prefix tokens; pairs across images, which the rows' mask gives -inf). 'swin' at a grid with a side
of 1 is refused (timm divides by zero there).
"""
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, Iterable, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.layers import Mlp, gen_relative_log_coords, gen_relative_position_index, register_notrace_module

from ..capacity import check_fits, gib
from ..choices import _is_int
from ..config import SimpleViTConfig
from ..errors import ViTVariantsError
from ..limits import Limits, rel_pos_bytes
from ..parts import PositionScheme
from ..positions import SCHEMES
from ..scheme import SchemeModule

__all__ = ['MlpRelPos', 'MlpRelPosBias', 'RELPOS_MLP_MODES']

RELPOS_MLP_MODES = ('cr', 'swin')  # timm's RelPosMlp modes (its gen_relative_log_coords knows these two)


def _check_grid(mode: str, grid_h: int, grid_w: int) -> None:
    """Refuse a grid timm's coordinates have no value for ('swin' with a side of 1)."""
    if mode == 'swin' and min(grid_h, grid_w) < 2:
        raise ViTVariantsError(f"timm's 'swin' relative coordinates divide by (side - 1), so a {grid_h}x{grid_w} "
                               'grid has none (timm gives NaN there); give an image at least 2 patches on each side',
                               key='img_size')


@torch.jit.ignore
def _make_grid_inputs(mode: str, grid_h: int, grid_w: int, like: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """A grid's log coordinates (in ``like``'s dtype) and index, on ``like``'s device, made as timm's ``RelPosMlp``
    makes its buffers, by its own functions."""
    _check_grid(mode, grid_h, grid_w)
    grid = (int(grid_h), int(grid_w))
    return (gen_relative_log_coords(grid, mode=mode, device=like.device, dtype=like.dtype),
            gen_relative_position_index(grid, device=like.device).view(-1))


@dataclass(frozen=True)
class MlpRelPos(PositionScheme, scheme='relpos_mlp'):
    """timm's MLP relative-position bias (module docstring): ``mode`` of the log coordinates, ``hidden`` the MLP's
    width, ``shared`` one MLP for every block."""
    mode: str = 'cr'
    hidden: int = 128
    shared: bool = False
    slot: ClassVar[str] = 'rel_pos'

    def __post_init__(self) -> None:
        self._choice('mode', RELPOS_MLP_MODES)
        self._check('hidden', lambda v: _is_int(v) and v >= 1, 'expected a positive integer')
        self._bools('shared')


@register_notrace_module
class MlpRelPosBias(SchemeModule):
    """The 'relpos_mlp' scheme's module: ``mlps`` (one timm ``Mlp`` per block, or one shared), each block's bias
    made for the input's grid."""

    __jit_ignored_attributes__ = ['_inputs']

    def __init__(self, part: MlpRelPos, depth: int, num_heads: int, prefix: int, device=None, dtype=None) -> None:
        super().__init__()
        self.mode, self.shared, self.num_heads, self.prefix = part.mode, part.shared, num_heads, prefix
        swin = part.mode == 'swin'
        self.mlps = nn.ModuleList([
            Mlp(2, hidden_features=part.hidden, out_features=num_heads, act_layer=nn.ReLU,
                bias=(True, False) if swin else True, drop=(0.125, 0.), device=device, dtype=dtype)
            for _ in range(1 if part.shared else depth)])
        self._inputs: Dict[Tuple[int, int, str, torch.dtype], Tuple[torch.Tensor, torch.Tensor]] = {}

    def _grid_inputs(self, grid_h: int, grid_w: int, like: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """A grid's log coordinates (2 gh - 1, 2 gw - 1, 2) and its (N * N,) index, kept by grid (they hold no
        weights); TorchScript keeps no Python cache, so there they are made on each call."""
        if torch.jit.is_scripting():
            return _make_grid_inputs(self.mode, grid_h, grid_w, like)
        return self._cached_inputs(grid_h, grid_w, like)

    @torch.jit.ignore
    def _cached_inputs(self, grid_h: int, grid_w: int, like: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        key = (int(grid_h), int(grid_w), str(like.device), like.dtype)
        hit = self._inputs.get(key)
        if hit is None:
            hit = self._inputs[key] = _make_grid_inputs(self.mode, grid_h, grid_w, like)
        return hit

    def _entries(self, layer: int, grid_h: int, grid_w: int) -> torch.Tensor:
        """Block ``layer``'s ((2 gh - 1)(2 gw - 1), heads) bias for every (dy, dx) of a grid: timm's MLP over its log
        coordinates, then ('swin') its gain on the sigmoid."""
        want = 0 if self.shared else layer
        entries = torch.empty(0)
        for i, mlp in enumerate(self.mlps):  # not ``self.mlps[want]``: TorchScript indexes modules by literals only
            if i == want:
                entries = mlp(self._grid_inputs(grid_h, grid_w, mlp.fc1.weight)[0]).view(-1, self.num_heads)
        return 16 * torch.sigmoid(entries) if self.mode == 'swin' else entries  # RelPosMlp's bias_gain: 16

    def bias(self, layer: int, grid_h: int, grid_w: int) -> torch.Tensor:
        """Block ``layer``'s (1, heads, prefix + N, prefix + N) bias for an NCHW batch of grid ``grid_h`` x
        ``grid_w``: timm's ``RelPosMlp.get_bias`` at that grid (its activation applied to the entries before the
        gather, which takes them as they are)."""
        _, index = self._grid_inputs(grid_h, grid_w, self.mlps[0].fc1.weight)
        tokens = grid_h * grid_w
        bias = self._entries(layer, grid_h, grid_w)[index].view(tokens, tokens, self.num_heads).permute(2, 0, 1)
        if self.prefix:
            bias = F.pad(bias, [self.prefix, 0, self.prefix, 0])
        return bias.unsqueeze(0).contiguous()

    def join_mask(self, layer: int, grid: Optional[List[int]], mask: Optional[torch.Tensor],
                  tensors: Dict[str, torch.Tensor], sizes: Dict[str, List[int]]) -> torch.Tensor:
        """The attention mask of block ``layer`` with its bias added: NCHW's (``grid``), or packed rows'."""
        if grid is not None:
            bias = self.bias(layer, grid[0], grid[1])
            return bias if mask is None else mask + bias
        return self._rows_bias(layer, mask, tensors, sizes)

    @torch.jit.ignore
    def prepare_rows(self, chunk, patches, inputs: Dict[str, torch.Tensor], tensors: Dict[str, torch.Tensor],
                     sizes: Dict[str, List[int]]) -> None:
        """The chunk's (rows, capacity, capacity) index into a zero entry followed by the entries of its images'
        grids (module docstring)."""
        offsets: Dict[Tuple[int, int], int] = {}  # grid -> its entries' offset after the zero entry
        total = 1
        index = torch.zeros(chunk.rows, chunk.capacity, chunk.capacity, dtype=torch.long, device=patches.coords.device)
        coords = patches.coords.split(patches.counts)
        start = 0
        for i in chunk.images:
            grid_h, grid_w = grid = (int(patches.grids[i][0]), int(patches.grids[i][1]))
            if grid not in offsets:
                _check_grid(self.mode, grid_h, grid_w)
                offsets[grid] = total
                total += (2 * grid_h - 1) * (2 * grid_w - 1)
            row, first = divmod(int(chunk.flat_index[start]), chunk.capacity)
            start += self.prefix + patches.counts[i]
            y, x = coords[i][:, 0], coords[i][:, 1]
            first += self.prefix
            block = index[row, first:first + len(y), first:first + len(y)]
            block.copy_((y[:, None] - y[None, :] + grid_h - 1) * (2 * grid_w - 1) + x[:, None] - x[None, :])
            block.add_(grid_w - 1 + offsets[grid])
        tensors['rel_pos'] = index
        sizes['rel_pos'] = [v for grid in offsets for v in grid]

    @torch.jit.ignore
    def _rows_bias(self, layer: int, mask: Optional[torch.Tensor], tensors: Dict[str, torch.Tensor],
                   sizes: Dict[str, List[int]]) -> torch.Tensor:
        """Block ``layer``'s (rows, heads, capacity, capacity) bias of a chunk of packed rows, plus its mask."""
        flat = sizes['rel_pos']
        entries = [self._entries(layer, flat[k], flat[k + 1]) for k in range(0, len(flat), 2)]
        table = torch.cat([entries[0].new_zeros(1, self.num_heads), *entries])
        bias = table[tensors['rel_pos']].permute(0, 3, 1, 2)
        return bias if mask is None else bias.add_(mask)

    @torch.jit.ignore
    def pair_bytes(self, itemsize: int) -> int:
        """Bytes this scheme adds to each (query, key) pair of a chunk of packed rows: its bias and its index."""
        return rel_pos_bytes(1, self.num_heads, itemsize)

    @torch.jit.ignore
    def keep_layers(self, depth: int) -> None:
        """Keep the first ``depth`` blocks' MLPs (a shared one stays)."""
        if not self.shared:
            self.mlps = self.mlps[:depth]

    @torch.jit.ignore
    def check_cost(self, longest: int, grids: Iterable[Tuple[int, int]], itemsize: int, limits: Limits, what: str,
                   device: Optional[torch.device] = None, key: Optional[str] = None) -> None:
        """Refuse, before it is made, a block's bias and index over the ``longest`` sequence beyond
        ``limits.rel_pos_bytes`` or the memory there is."""
        need = rel_pos_bytes(longest, self.num_heads, itemsize)
        if need > limits.rel_pos_bytes:
            raise ViTVariantsError(
                f'relative positions for {what} need {gib(need)} (a {self.num_heads}-head bias and its index over '
                f'{longest} tokens), more than the rel_pos_bytes limit of {gib(limits.rel_pos_bytes)}; refusing '
                f"before making them (give a smaller grid, or lift the model's limits.rel_pos_bytes to {need})",
                key=key, needs=f'limit:rel_pos_bytes={need}')
        check_fits(need, f'relative positions for {what}', device, key)


def _build(cfg: SimpleViTConfig, part: MlpRelPos, grid: Tuple[int, int], dd: Dict[str, Any]) -> SchemeModule:
    return MlpRelPosBias(part, cfg.depth, cfg.num_heads, cfg.num_prefix_tokens, **dd)


SCHEMES[MlpRelPos.scheme] = _build  # the 'relpos_mlp' part's module, in the one registry of schemes
