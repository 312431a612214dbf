"""Position embeddings: big_vision's fixed 2D sin-cos table, a learned table at the runtime grid, and CPVT's
conditional position encoding generator."""
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn as nn
from timm.layers import register_notrace_module

from .config import resample_rule
from .errors import ViTVariantsError
from .geometry import RESAMPLE_OFFSETS, RESAMPLE_RULES, interpolate_grid, is_capturing, resample_table
from .rope import inverse_powers

__all__ = ['sincos_2d', 'sincos_2d_at', 'grid_coords', 'SinCos2dPosEmbed', 'LearnedPosResampler', 'PosEncodingGenerator']


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
class SinCos2dPosEmbed(nn.Module):
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

    def forward(self, grid_h: int, grid_w: int) -> torch.Tensor:
        if not torch.jit.is_scripting():
            if is_capturing():  # computed in the graph from the (symbolic) grid, never the example's table
                return sincos_2d(grid_h, grid_w, self.dim, self.temperature, device=self.table.device)
        if grid_h == self.grid_size[0] and grid_w == self.grid_size[1]:
            return self.table
        return sincos_2d(grid_h, grid_w, self.dim, self.temperature, device=self.table.device)


@register_notrace_module
class LearnedPosResampler(nn.Module):
    """Resamples a learned table to the runtime grid; in inference, each grid is resampled once and cached."""

    __jit_ignored_attributes__ = ['_cache']  # a Python-side cache keyed by grid; TorchScript takes the uncached path

    def __init__(self, num_prefix_tokens: int = 0, rule: str = 'bigvision') -> None:
        super().__init__()
        self.num_prefix_tokens = num_prefix_tokens
        self.rule = rule
        self.mode, self.align_corners, self.antialias = RESAMPLE_RULES[resample_rule(rule)]
        self.offset = RESAMPLE_OFFSETS.get(rule, 0.)
        self._cache: Dict[Tuple[int, int], Tuple[tuple, torch.Tensor]] = {}

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
            self.mode, self.align_corners, self.antialias, self.offset)

    @torch.jit.ignore
    def _cached(self, pos_embed: torch.Tensor, grid_h: int, grid_w: int, old_h: int, old_w: int) -> torch.Tensor:
        # The tag holds the parameter's identity and version, so an optimizer step, reload or .to() invalidates it.
        tag = (id(pos_embed), pos_embed._version, pos_embed.data_ptr(), pos_embed.dtype, pos_embed.device, old_h, old_w)
        hit = self._cache.get((grid_h, grid_w))
        if hit is not None and hit[0] == tag:
            return hit[1]
        out = resample_table(pos_embed.detach(), (grid_h, grid_w), (old_h, old_w), self.num_prefix_tokens, self.rule)
        self._cache[(grid_h, grid_w)] = (tag, out)
        return out


class PosEncodingGenerator(nn.Module):
    """CPVT's position encoding generator: tokens + depthwise 3x3 conv of the token grid; prefix tokens pass.

    Chu et al. 2021, *Conditional Positional Encodings for Vision Transformers* (arXiv:2102.10882).
    The encoding is computed from the tokens' neighbourhood, so it adapts to any grid by
    construction; zero padding at the border tells each token where the edge is.
    """

    def __init__(self, dim: int, num_prefix_tokens: int = 0, device=None, dtype=None) -> None:
        super().__init__()
        self.num_prefix_tokens = num_prefix_tokens
        self.proj = nn.Conv2d(dim, dim, 3, padding=1, groups=dim, device=device, dtype=dtype)

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
