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
the nominal grid resizes nothing. 'swin' at a grid with a side of 1 is refused (timm divides by zero there), and so
are packed NaFlex rows (images of several grids in one batch), which this scheme does not lay out.
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
_SWIN_GAIN = 16  # RelPosMlp's bias_gain in 'swin' mode
_PACKED = ("timm's MLP relative-position bias is made for one grid per batch: packed NaFlex rows (images of several "
           'grids) are not expressed; give an NCHW batch of one size')


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

    @torch.jit.ignore
    def _grid_inputs(self, grid_h: int, grid_w: int, device: torch.device, dtype: torch.dtype
                     ) -> Tuple[torch.Tensor, torch.Tensor]:
        """A grid's log coordinates (2 gh - 1, 2 gw - 1, 2) and its (N * N,) index, as timm's ``RelPosMlp`` makes
        its buffers (by its own functions), kept by grid: they hold no weights."""
        if self.mode == 'swin' and min(grid_h, grid_w) < 2:
            raise ViTVariantsError(f"timm's 'swin' relative coordinates divide by (side - 1), so a {grid_h}x{grid_w} "
                                   'grid has none (timm gives NaN there); give an image at least 2 patches on each '
                                   'side', key='img_size')
        key = (int(grid_h), int(grid_w), str(device), dtype)
        hit = self._inputs.get(key)
        if hit is None:
            grid = (int(grid_h), int(grid_w))
            hit = (gen_relative_log_coords(grid, mode=self.mode, device=device, dtype=dtype),
                   gen_relative_position_index(grid, device=device).view(-1))
            self._inputs[key] = hit
        return hit

    def bias(self, layer: int, grid_h: int, grid_w: int) -> torch.Tensor:
        """Block ``layer``'s (1, heads, prefix + N, prefix + N) bias for an NCHW batch of grid ``grid_h`` x
        ``grid_w``: timm's ``RelPosMlp.get_bias`` at that grid, step for step."""
        mlp = self.mlps[0 if self.shared else layer]
        weight = mlp.fc1.weight
        coords, index = self._grid_inputs(grid_h, grid_w, weight.device, weight.dtype)
        tokens = grid_h * grid_w
        bias = mlp(coords).view(-1, self.num_heads)[index].view(tokens, tokens, self.num_heads).permute(2, 0, 1)
        if self.mode == 'swin':
            bias = _SWIN_GAIN * torch.sigmoid(bias)
        if self.prefix:
            bias = F.pad(bias, [self.prefix, 0, self.prefix, 0])
        return bias.unsqueeze(0).contiguous()

    def join_mask(self, layer: int, grid: Optional[List[int]], mask: Optional[torch.Tensor],
                  tensors: Dict[str, torch.Tensor], sizes: Dict[str, List[int]]) -> torch.Tensor:
        """The attention mask of block ``layer`` with its bias added (NCHW; packed rows are refused before)."""
        if grid is None:
            raise ViTVariantsError(_PACKED, key='rel_pos')
        bias = self.bias(layer, grid[0], grid[1])
        return bias if mask is None else mask + bias

    @torch.jit.ignore
    def prepare_rows(self, chunk, patches, inputs: Dict[str, torch.Tensor], tensors: Dict[str, torch.Tensor],
                     sizes: Dict[str, List[int]]) -> None:
        raise ViTVariantsError(_PACKED, key='rel_pos')

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
