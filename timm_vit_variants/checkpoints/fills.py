"""The fills: each writes one of our tensors into ``dst`` from source views, checking shapes exactly.

A reader's rule names the source tensors and one of these; the reader skeleton (``source.py``) runs it
on meta tensors to plan, then on real ones to convert. Each is the one place a layout change between
an ecosystem and ours (a transpose, fused q/k/v, per-head kernels, a grid table) is written.
"""
from typing import Callable, Optional, Tuple

import torch

__all__ = ['Fill', 'Misfit', 'copy', 'transpose', 'hwio_to_oihw', 'dense_patch_kernel', 'linear_patch_kernel',
           'flatten_grid_table', 'batched_grid_table', 'stack_rows', 'split_rows', 'token_rows', 'add_leading_axis',
           'fuse_heads',
           'fuse_head_bias', 'merge_heads']

Fill = Callable[..., None]


class Misfit(Exception):
    """A fill met a source of the wrong shape (``got`` vs ``want``, in our layout)."""

    def __init__(self, reason: str, got: Tuple[int, ...] = (), want: Tuple[int, ...] = ()) -> None:
        super().__init__(reason)
        self.shapes = (tuple(got), tuple(want)) if want else None


def _put(dst: torch.Tensor, value: torch.Tensor) -> None:
    if tuple(value.shape) != tuple(dst.shape):
        raise Misfit('shape does not fit', value.shape, dst.shape)
    dst.copy_(value)


def _rank(tensor: torch.Tensor, ndim: int) -> torch.Tensor:
    if tensor.ndim != ndim:
        raise Misfit(f'expected {ndim} dimensions, got shape {tuple(tensor.shape)}')
    return tensor


def copy(dst: torch.Tensor, src: torch.Tensor) -> None:
    """Same layout."""
    _put(dst, src)


def transpose(dst: torch.Tensor, kernel: torch.Tensor) -> None:
    """flax Dense (in, out) -> torch Linear (out, in); the transpose happens inside the copy."""
    _put(dst, _rank(kernel, 2).T)


def hwio_to_oihw(dst: torch.Tensor, kernel: torch.Tensor) -> None:
    """flax Conv (P, P, C, D) -> torch Conv2d (D, C, P, P)."""
    _put(dst, _rank(kernel, 4).permute(3, 2, 0, 1))


def stack_rows(dst: torch.Tensor, *parts: torch.Tensor) -> None:
    """Separate q, k, v projections copied into their row slices of a fused qkv tensor (never concatenated)."""
    rows = dst.shape[0] // len(parts)
    for i, part in enumerate(parts):
        _put(dst[i * rows:(i + 1) * rows], part)


def split_rows(first: int, stop: int, parts: int) -> Fill:
    """A fill taking rows [first, stop) of ``parts`` equal row blocks of one source (q, then k and v of a packed
    ``in_proj``)."""
    def fill(dst: torch.Tensor, src: torch.Tensor) -> None:
        rows = src.shape[0] // parts
        _put(dst, src[first * rows:stop * rows])

    fill.__name__ = fill.__qualname__ = f'rows_{first}_to_{stop}_of_{parts}'
    return fill


def token_rows(first: int, stop: Optional[int] = None) -> Fill:
    """A fill taking tokens [first, stop) of one (1, N, D) source (stop None: to the end): the first of several
    class tokens as ours, the others as registers."""
    def fill(dst: torch.Tensor, src: torch.Tensor) -> None:
        _put(dst, _rank(src, 3)[:, first:stop])

    fill.__name__ = fill.__qualname__ = f'tokens_{first}_to_{stop}'
    return fill


def add_leading_axis(dst: torch.Tensor, src: torch.Tensor) -> None:
    """A (N, D) table (an ``nn.Embedding``'s weight) as our (1, N, D)."""
    _put(dst, _rank(src, 2).unsqueeze(0))


def dense_patch_kernel(dst: torch.Tensor, kernel: torch.Tensor) -> None:
    """A Dense over P-P-C flattened patches (P*P*C, D) -> torch Conv2d (D, C, P, P): the same map, as a conv."""
    dim, chans, patch_h, patch_w = dst.shape
    if tuple(_rank(kernel, 2).shape) != (patch_h * patch_w * chans, dim):
        raise Misfit('shape does not fit', kernel.shape, (patch_h * patch_w * chans, dim))
    _put(dst, kernel.reshape(patch_h, patch_w, chans, dim).permute(3, 2, 0, 1))


def linear_patch_kernel(dst: torch.Tensor, weight: torch.Tensor) -> None:
    """A torch Linear over P-P-C flattened patches (D, P*P*C) -> torch Conv2d (D, C, P, P)."""
    dense_patch_kernel(dst, _rank(weight, 2).T)


def flatten_grid_table(dst: torch.Tensor, table: torch.Tensor) -> None:
    """A (G_h, G_w, D) grid of position vectors as our row-major (1, G_h * G_w, D)."""
    _put(dst, _rank(table, 3).reshape(1, -1, table.shape[-1]))


def batched_grid_table(dst: torch.Tensor, table: torch.Tensor) -> None:
    """timm NaFlexVit's (1, G_h, G_w, D) table as our row-major (1, G_h * G_w, D)."""
    if _rank(table, 4).shape[0] != 1:
        raise Misfit('expected a leading axis of 1', table.shape, (1, 'rows', 'cols', dst.shape[-1]))
    flatten_grid_table(dst, table[0])


def fuse_heads(dst: torch.Tensor, *parts: torch.Tensor) -> None:
    """flax per-head kernels (D, heads, head_dim) -> rows of torch's fused qkv (3 * heads * head_dim, D)."""
    rows = dst.shape[0] // len(parts)
    for i, part in enumerate(parts):
        _put(dst[i * rows:(i + 1) * rows], _rank(part, 3).reshape(part.shape[0], -1).T)


def fuse_head_bias(dst: torch.Tensor, *parts: torch.Tensor) -> None:
    """flax per-head biases (heads, head_dim) -> slices of torch's fused qkv bias."""
    rows = dst.shape[0] // len(parts)
    for i, part in enumerate(parts):
        _put(dst[i * rows:(i + 1) * rows], _rank(part, 2).reshape(-1))


def merge_heads(dst: torch.Tensor, kernel: torch.Tensor) -> None:
    """flax attention output kernel (heads, head_dim, D) -> torch Linear (D, heads * head_dim)."""
    _put(dst, _rank(kernel, 3).reshape(-1, kernel.shape[-1]).T)
