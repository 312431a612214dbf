"""Position embeddings: big_vision's fixed 2D sin-cos table, a learned table at the runtime grid, timm NaFlexVit's
factorised tables, and CPVT's conditional position encoding generator.

Each is a position scheme (``positions.py``): the tables of the absolute kind (``add_to`` adds each patch
token's position, and hands back each image's prefix slots, in the one embedding step), CPVT's of the after-block
kind (``after_block``, with ``prepare_rows`` placing packed NaFlex rows on a canvas)."""
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.layers import register_notrace_module, trunc_normal_

from .capacity import check_fits
from .config import resample_rule
from .errors import ViTVariantsError
from .geometry import RESAMPLE_OFFSETS, RESAMPLE_RULES, interpolate_grid, is_capturing
from .rope import inverse_powers
from .scheme import SchemeModule

__all__ = ['sincos_2d', 'sincos_2d_at', 'grid_coords', 'SinCos2dPosEmbed', 'LearnedPosResampler', 'FactorizedPosEmbed',
           'PosEncodingGenerator', 'SquareTable']


def sincos_2d(
        grid_h: int,
        grid_w: int,
        dim: int,
        temperature: float = 10000.,
        device: Optional[torch.device] = None,
) -> torch.Tensor:
    """big_vision's ``posemb_sincos_2d`` as a (grid_h * grid_w, dim) float32 table.

    Row-major tokens, channels ``[sin(x w) | cos(x w) | sin(y w) | cos(y w)]`` with
    ``w_k = T ** -(k / (q - 1))``, q = dim // 4. timm's ``build_sincos2d_pos_embed``
    uses ``k / q`` and puts y first, so it cannot be reused here.
    """
    if dim % 4 != 0:
        raise ViTVariantsError(f'sin-cos position embedding needs a width divisible by 4, got {dim}', key='embed_dim')
    return sincos_2d_at(grid_coords(grid_h, grid_w, device), dim, temperature)


def grid_coords(grid_h: int, grid_w: int, device: Optional[torch.device] = None) -> torch.Tensor:
    """The (y, x) coordinates of a grid's tokens, row-major, as an (grid_h * grid_w, 2) long tensor."""
    y, x = torch.meshgrid(torch.arange(grid_h, device=device), torch.arange(grid_w, device=device), indexing='ij')
    return torch.stack([y.reshape(-1), x.reshape(-1)], dim=1)


def sincos_2d_at(coords: torch.Tensor, dim: int, temperature: float = 10000.) -> torch.Tensor:
    """``sincos_2d``'s rows for (y, x) grid coordinates, (N, 2) -> (N, dim): the table is these rows for every
    cell, so a token gets exactly the value the table of its image's grid holds (a row depends on (y, x) alone)."""
    q = dim // 4
    omega = inverse_powers(temperature, torch.arange(q, dtype=torch.float32, device=coords.device) / max(q - 1, 1))
    y = coords[:, 0].to(torch.float32).reshape(-1, 1) * omega.reshape(1, -1)
    x = coords[:, 1].to(torch.float32).reshape(-1, 1) * omega.reshape(1, -1)
    return torch.cat([x.sin(), x.cos(), y.sin(), y.cos()], dim=1)


@register_notrace_module
class SinCos2dPosEmbed(SchemeModule):
    """Fixed sin-cos table: a non-persistent buffer for the nominal grid, recomputed for any other grid."""

    def __init__(
            self,
            dim: int,
            grid_size: Tuple[int, int],
            temperature: float = 10000.,
            device: Optional[torch.device] = None,
    ) -> None:
        super().__init__()
        self.dim = dim
        self.temperature = temperature
        self.grid_size = tuple(grid_size)
        self.register_buffer('table', sincos_2d(*self.grid_size, dim, temperature, device=device), persistent=False)

    def set_grid_size(self, grid_size: Tuple[int, int]) -> None:
        self.grid_size = tuple(grid_size)
        self.init_non_persistent_buffers()

    def init_non_persistent_buffers(self) -> None:
        """Rebuild the table where it lives; a table on the meta device (a meta-device build) is rebuilt on the CPU."""
        device = None if self.table.device.type == 'meta' else self.table.device
        self.table = sincos_2d(*self.grid_size, self.dim, self.temperature, device=device)

    def add_to(self, tokens: torch.Tensor, coords: torch.Tensor, counts: List[int], grids: List[Tuple[int, int]],
               indexed: bool, table: Optional[torch.Tensor], nominal_h: int, nominal_w: int
               ) -> Tuple[torch.Tensor, List[Optional[torch.Tensor]]]:
        """The tokens plus their positions: images given whole take the table of their grid, others (several
        grids, or a NaFlex dict's tokens) their rows at (y, x); no prefix slots."""
        slots: List[Optional[torch.Tensor]] = [None for _ in grids]
        if len(grids) == 1 and not indexed:
            return tokens + self(grids[0][0], grids[0][1]).to(tokens.dtype), slots
        return tokens + sincos_2d_at(coords, self.dim, self.temperature).to(tokens.dtype), slots

    def forward(self, grid_h: int, grid_w: int) -> torch.Tensor:
        if not torch.jit.is_scripting():
            if is_capturing():  # computed in the graph from the (symbolic) grid, never the example's table
                return sincos_2d(grid_h, grid_w, self.dim, self.temperature, device=self.table.device)
        if grid_h == self.grid_size[0] and grid_w == self.grid_size[1]:
            return self.table
        return sincos_2d(grid_h, grid_w, self.dim, self.temperature, device=self.table.device)


@register_notrace_module
class LearnedPosResampler(SchemeModule):
    """Resamples a learned table to the runtime grid; in inference, each grid is resampled once and cached.

    ``ar_preserving``: from the square of the grid's longer side, its top-left kept (``geometry.interpolate_grid``).
    The table is the model's ``pos_embed`` at the nominal grid; a scheme keeping a table of its own overrides
    ``_stored``.
    """

    __jit_ignored_attributes__ = ['_cache']  # a Python-side cache keyed by grid; TorchScript takes the uncached path
    learned_table = True

    def __init__(self, num_prefix_tokens: int = 0, rule: str = 'bigvision', ar_preserving: bool = False) -> None:
        super().__init__()
        self.num_prefix_tokens = num_prefix_tokens
        self.rule = rule
        self.mode, self.align_corners, self.antialias = RESAMPLE_RULES[resample_rule(rule)]
        self.offset = RESAMPLE_OFFSETS.get(rule, 0.)
        self.ar_preserving = ar_preserving
        self._cache: Dict[Tuple[int, int], Tuple[tuple, torch.Tensor]] = {}

    def _stored(self, table: Optional[torch.Tensor], grid_h: int, grid_w: int) -> Tuple[torch.Tensor, int, int]:
        """The table resampled from and its grid: the model's (``table``, at the nominal grid)."""
        assert table is not None  # the model's pos_embed, for TorchScript's Optional
        return table, grid_h, grid_w

    def add_to(self, tokens: torch.Tensor, coords: torch.Tensor, counts: List[int], grids: List[Tuple[int, int]],
               indexed: bool, table: Optional[torch.Tensor], nominal_h: int, nominal_w: int
               ) -> Tuple[torch.Tensor, List[Optional[torch.Tensor]]]:
        """The tokens plus the model's table (``table``, for the nominal grid) resampled to each image's grid, once
        per grid; images given whole take it as it is, a NaFlex dict's tokens index it. Also each image's
        prefix slots (its [CLS] / distillation rows), None without a cls slot."""
        table, nominal_h, nominal_w = self._stored(table, nominal_h, nominal_w)
        slots: List[Optional[torch.Tensor]] = [None for _ in grids]
        if not torch.jit.is_scripting():
            if len(grids) > 1 or indexed:
                self._check_table_fits(tokens, grids, indexed, (nominal_h, nominal_w))
        prefix = self.num_prefix_tokens
        per_image = [coords] if len(grids) == 1 else list(coords.split(counts))
        resampled: Dict[int, torch.Tensor] = {}  # by grid_h * 2**25 + grid_w (TorchScript keys cannot be tuples)
        rows: List[torch.Tensor] = []
        for i in range(len(grids)):
            grid_h, grid_w = grids[i]
            if len(grids) == 1:
                image_table = self(table, grid_h, grid_w, nominal_h, nominal_w)[0]
            else:  # each distinct grid resampled once
                key = grid_h * (1 << 25) + grid_w
                if key not in resampled:
                    resampled[key] = self(table, grid_h, grid_w, nominal_h, nominal_w)[0]
                image_table = resampled[key]
            slots[i] = image_table[:prefix] if prefix else None
            rows.append(image_table[prefix:] if not indexed else
                        image_table[prefix + per_image[i][:, 0] * grid_w + per_image[i][:, 1]])
        return tokens + (rows[0] if len(rows) == 1 else torch.cat(rows)).to(tokens.dtype), slots

    @torch.jit.ignore
    def _check_table_fits(self, tokens: torch.Tensor, grids: List[Tuple[int, int]], indexed: bool,
                          nominal: Tuple[int, int]) -> None:
        """Refuse NaFlex grids whose resampled tables could only run out of memory."""
        cells = sum(h * w for h, w in set(grids) - {tuple(nominal)})
        check_fits(2 * cells * tokens.shape[-1] * tokens.element_size(), 'resampling the position table to '
                   'the NaFlex grids', tokens.device, key='patch_coord' if indexed else None)

    def forward(
            self,
            pos_embed: torch.Tensor,
            grid_h: int,
            grid_w: int,
            old_grid_h: int,
            old_grid_w: int,
    ) -> torch.Tensor:
        capturing = False
        if not torch.jit.is_scripting():
            capturing = is_capturing()
        if not capturing:  # a captured graph resamples in the graph, never through the eager cache
            if grid_h == old_grid_h and grid_w == old_grid_w:
                return pos_embed
            if not torch.jit.is_scripting():
                if not (torch.is_grad_enabled() and pos_embed.requires_grad):
                    return self._cached(pos_embed, grid_h, grid_w, old_grid_h, old_grid_w)
        return interpolate_grid(
            pos_embed, grid_h, grid_w, old_grid_h, old_grid_w, self.num_prefix_tokens,
            self.mode, self.align_corners, self.antialias, self.offset, self.ar_preserving)

    @torch.jit.ignore
    def _cached(self, pos_embed: torch.Tensor, grid_h: int, grid_w: int, old_h: int, old_w: int) -> torch.Tensor:
        # The tag holds the parameter's identity and version, so an optimizer step, reload or .to() invalidates it.
        tag = (id(pos_embed), pos_embed._version, pos_embed.data_ptr(), pos_embed.dtype, pos_embed.device, old_h, old_w)
        hit = self._cache.get((grid_h, grid_w))
        if hit is not None and hit[0] == tag:
            return hit[1]
        out = interpolate_grid(pos_embed.detach(), grid_h, grid_w, old_h, old_w, self.num_prefix_tokens, self.mode,
                               self.align_corners, self.antialias, self.offset, self.ar_preserving)
        self._cache[(grid_h, grid_w)] = (tag, out)
        return out


@register_notrace_module
class FactorizedPosEmbed(SchemeModule):
    """timm NaFlexVit's factorised tables (``parts.Factorized``): ``y`` (1, G_h, D) and ``x`` (1, G_w, D), each
    resized linearly to its side of each image's grid (both to the longer side with ``ar_preserving``), a patch
    at (y, x) given the sum of their rows. Its own tensors, at their own lengths: never fitted to the nominal grid."""

    def __init__(self, dim: int, table_grid: Tuple[int, int], ar_preserving: bool = False,
                 device: Optional[torch.device] = None, dtype: Optional[torch.dtype] = None) -> None:
        super().__init__()
        self.ar_preserving = ar_preserving
        self.y = nn.Parameter(torch.zeros(1, table_grid[0], dim, device=device, dtype=dtype))
        self.x = nn.Parameter(torch.zeros(1, table_grid[1], dim, device=device, dtype=dtype))
        trunc_normal_(self.y, std=.02)
        trunc_normal_(self.x, std=.02)

    @staticmethod
    def _axis(table: torch.Tensor, length: int, keep: int, dtype: torch.dtype) -> torch.Tensor:
        """(keep, D): a (1, L, D) table resized to ``length`` rows (linear, half-pixel, in float32), its first kept."""
        if length != table.shape[1]:
            table = F.interpolate(table.permute(0, 2, 1).float(), size=length, mode='linear',
                                  align_corners=False).permute(0, 2, 1)
        return table[0, :keep].to(dtype)

    def add_to(self, tokens: torch.Tensor, coords: torch.Tensor, counts: List[int], grids: List[Tuple[int, int]],
               indexed: bool, table: Optional[torch.Tensor], nominal_h: int, nominal_w: int
               ) -> Tuple[torch.Tensor, List[Optional[torch.Tensor]]]:
        """The tokens plus each one's row and column rows at its image's grid (whole images and NaFlex tokens
        alike); no prefix slots."""
        slots: List[Optional[torch.Tensor]] = [None for _ in grids]
        per_image = [coords] if len(grids) == 1 else list(coords.split(counts))
        rows: List[torch.Tensor] = []
        for i in range(len(grids)):
            grid_h, grid_w = grids[i]
            side_h, side_w = grid_h, grid_w
            if self.ar_preserving:
                side_h = side_w = max(grid_h, grid_w)
            pe_y = self._axis(self.y, side_h, grid_h, tokens.dtype)
            pe_x = self._axis(self.x, side_w, grid_w, tokens.dtype)
            rows.append(pe_y[per_image[i][:, 0]] + pe_x[per_image[i][:, 1]])
        return tokens + (rows[0] if len(rows) == 1 else torch.cat(rows)), slots


class PosEncodingGenerator(SchemeModule):
    """CPVT's position encoding generator: tokens + depthwise 3x3 conv of the token grid; prefix tokens pass.

    Chu et al. 2021, *Conditional Positional Encodings for Vision Transformers* (arXiv:2102.10882).
    The encoding is computed from the tokens' neighbourhood, so it adapts to any grid by
    construction; zero padding at the border tells each token where the edge is.
    """

    def __init__(self, dim: int, num_prefix_tokens: int = 0, device=None, dtype=None) -> None:
        super().__init__()
        self.num_prefix_tokens = num_prefix_tokens
        self.proj = nn.Conv2d(dim, dim, 3, padding=1, groups=dim, device=device, dtype=dtype)

    def after_block(self, index: int, x: torch.Tensor, grid: Optional[List[int]], tensors: Dict[str, torch.Tensor],
                    sizes: Dict[str, List[int]]) -> torch.Tensor:
        """CPVT's place: after the first block, on NCHW's ``grid`` or on packed rows' canvas (``prepare_rows``)."""
        if index != 0:
            return x
        if grid is not None:
            return self(x, grid[0], grid[1])
        return self.forward_packed(x, tensors['pos_cpe'], sizes['pos_cpe'])

    @torch.jit.ignore
    def prepare_rows(self, chunk, patches, inputs: Dict[str, torch.Tensor], tensors: Dict[str, torch.Tensor],
                     sizes: Dict[str, List[int]]) -> None:
        """Each slot's cell in an (images, rows, cols) canvas of the chunk's largest grid, for ``forward_packed``."""
        grids = [patches.grids[i] for i in chunk.images]
        height, width = max(h for h, _ in grids), max(w for _, w in grids)
        tokens = patches.tokens
        check_fits(2 * len(grids) * height * width * tokens.shape[-1] * tokens.element_size(),
                   f"CPVT's encoding on a canvas of {len(grids)} images of {height}x{width} patches", tokens.device,
                   key='patch_coord' if patches.valid is not None else None)
        coords = patches.coords.split(patches.counts)
        prefix = coords[0].new_full((self.num_prefix_tokens,), -1)
        sequence_cells = torch.cat([torch.cat([prefix, j * height * width + coords[i][:, 0] * width + coords[i][:, 1]])
                                    for j, i in enumerate(chunk.images)])
        flat = sequence_cells.new_full((chunk.rows * chunk.capacity,), -1)
        flat[chunk.flat_index] = sequence_cells
        tensors['pos_cpe'] = flat.view(chunk.rows, chunk.capacity)
        sizes['pos_cpe'] = [len(grids), height, width]

    def forward(self, x: torch.Tensor, grid_h: int, grid_w: int) -> torch.Tensor:
        prefix, tokens = x[:, :self.num_prefix_tokens], x[:, self.num_prefix_tokens:]
        batch, _, dim = tokens.shape
        grid = tokens.transpose(1, 2).reshape(batch, dim, grid_h, grid_w)
        tokens = tokens + self.proj(grid).flatten(2).transpose(1, 2)
        return torch.cat([prefix, tokens], dim=1) if self.num_prefix_tokens else tokens

    def forward_packed(self, x: torch.Tensor, cells: torch.Tensor, canvas: List[int]) -> torch.Tensor:
        """The same on packed rows of images of different grids: ``cells`` (rows, capacity) gives each slot's
        cell in an (images, rows, cols) ``canvas`` (-1: a prefix token or an empty slot).

        Each image sits at the top-left of its canvas with zeros beyond its grid, which is exactly the
        zero padding its own grid would get, so every image is encoded as if it were alone.
        """
        images, height, width = canvas[0], canvas[1], canvas[2]
        flat = x.reshape(-1, x.shape[-1])
        used = (cells >= 0).reshape(-1)
        where = cells.reshape(-1)[used]
        grid = flat.new_zeros(images * height * width, flat.shape[-1])
        grid[where] = flat[used]
        grid = grid.reshape(images, height, width, -1).permute(0, 3, 1, 2)
        encoded = self.proj(grid).permute(0, 2, 3, 1).reshape(images * height * width, -1)
        out = flat.clone()
        out[used] = flat[used] + encoded[where]
        return out.reshape(x.shape)


class SquareTable(SchemeModule):
    """A scheme's own learned (side * side, D) table (``table``, timm's init, kept out of weight decay as timm keeps
    ``pos_embed``), for schemes that read it their own way at each grid (a family's: Idefics' buckets, Qwen3's
    stretch) rather than through the model's ``pos_embed``."""
    undecayed = ('table',)

    def __init__(self, dim: int, side: int, device: Optional[torch.device] = None,
                 dtype: Optional[torch.dtype] = None) -> None:
        super().__init__()
        self.side = side
        self.table = nn.Parameter(torch.zeros(side * side, dim, device=device, dtype=dtype))
        trunc_normal_(self.table, std=.02)
