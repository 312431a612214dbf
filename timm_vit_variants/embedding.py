"""The one embedding step of ``SimpleVisionTransformer``, for every input form.

An NCHW batch (its one-grid case), a list of images and timm's NaFlex dict all arrive as ``Patches`` (patch
tokens, each token's (y, x), each image's grid) and leave as sequences ready for the blocks: each image's absolute
positions for its own grid (a sin-cos row depends on (y, x) alone; a learned table is resampled once per grid, with
the model's rule), then its prefix ([CLS] with its table slot, DeiT's distillation token with its own, then the
registers, which have no position) before its patch tokens, and, for rotary models, each token's rotations (the
identity on prefix tokens). Positions, prefix tokens and rotations are written here once; ``naflex.py`` only turns its input forms into ``Patches`` and
runs the packed rows.
"""
from typing import Dict, List, Optional, Tuple

import torch

from .capacity import check_fits
from .naflex import Patches
from .posemb import grid_coords, sincos_2d_at

__all__ = ['EmbeddingMixin']


class EmbeddingMixin:
    """The embedding step of ``SimpleVisionTransformer`` (which provides the modules used here)."""

    def _patches(self, x: torch.Tensor) -> Patches:
        """An NCHW batch's patch tokens: the one-grid case of ``Patches``, one image a row."""
        x = self.patch_embed(x)
        batch, grid_h, grid_w, dim = x.shape
        return Patches(x.reshape(batch, grid_h * grid_w, dim), grid_coords(grid_h, grid_w, x.device),
                       [grid_h * grid_w], [(grid_h, grid_w)])

    def _embed(self, patches: Patches) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """The one embedding step, for every input form: each image's positions for its own grid, then its prefix
        ([CLS] with its table slot, DeiT's distillation token with the next one, then the registers, which have no
        position) before its patch tokens.

        Returns the (rows, sequence, D) tokens and, for rotary positions, their (L, H or 1, sequence, 2R) rotations
        (the identity on prefix tokens).
        """
        rows, slots = self._positions(patches)
        x = patches.tokens if rows is None else patches.tokens + rows
        x = self._with_prefix(x, patches.counts, slots)
        rope: Optional[torch.Tensor] = None
        if self.rope is not None:
            rope = self._rope_with_prefix(self.rope(patches.coords, _token_grids(patches)), patches.counts)
        return self.norm_pre(self.pos_drop(x)), rope

    def _positions(self, patches: Patches) -> Tuple[Optional[torch.Tensor], List[Optional[torch.Tensor]]]:
        """Each patch token's absolute position (N or T, D) for its image's own grid, and each image's cls-slot row.

        A sin-cos row depends on (y, x) alone; a learned table is resampled once per grid (and cached by the
        resampler). Images given whole (NCHW, a list) take their table as it is; a NaFlex dict's tokens index it.
        """
        slots: List[Optional[torch.Tensor]] = [None for _ in patches.grids]
        dtype = patches.tokens.dtype
        if self.pos_sincos is not None:
            if len(patches.grids) == 1 and patches.valid is None:
                return self.pos_sincos(patches.grids[0][0], patches.grids[0][1]).to(dtype), slots
            return sincos_2d_at(patches.coords, self.embed_dim, self.pos_sincos.temperature).to(dtype), slots
        if self.pos_embed is None or self.pos_resampler is None:
            return None, slots
        if not torch.jit.is_scripting():
            if len(patches.grids) > 1 or patches.valid is not None:
                self._check_table_fits(patches)
        nominal, prefix = self.patch_embed.grid_size, self.pos_resampler.num_prefix_tokens
        coords = [patches.coords] if len(patches.grids) == 1 else list(patches.coords.split(patches.counts))
        tables: Dict[int, torch.Tensor] = {}  # by grid_h * 2**25 + grid_w (TorchScript keys cannot be tuples)
        rows: List[torch.Tensor] = []
        for i in range(len(patches.grids)):
            grid_h, grid_w = patches.grids[i]
            if len(patches.grids) == 1:
                table = self.pos_resampler(self.pos_embed, grid_h, grid_w, nominal[0], nominal[1])[0]
            else:  # each distinct grid resampled once
                key = grid_h * (1 << 25) + grid_w
                if key not in tables:
                    tables[key] = self.pos_resampler(self.pos_embed, grid_h, grid_w, nominal[0], nominal[1])[0]
                table = tables[key]
            slots[i] = table[:prefix] if prefix else None
            rows.append(table[prefix:] if patches.valid is None else
                        table[prefix + coords[i][:, 0] * grid_w + coords[i][:, 1]])
        return (rows[0] if len(rows) == 1 else torch.cat(rows)).to(dtype), slots

    @torch.jit.ignore
    def _check_table_fits(self, patches: Patches) -> None:
        """Refuse NaFlex grids whose resampled tables could only run out of memory."""
        cells = sum(h * w for h, w in set(patches.grids) - {tuple(self.patch_embed.grid_size)})
        check_fits(2 * cells * self.embed_dim * patches.tokens.element_size(), 'resampling the position table to '
                   'the NaFlex grids', patches.tokens.device, key='patch_coord' if patches.valid is not None else None)

    def _with_prefix(self, tokens: torch.Tensor, counts: List[int], slots: List[Optional[torch.Tensor]]
                     ) -> torch.Tensor:
        """Each image's prefix tokens before its patch tokens, in every row of ``tokens``."""
        if self.num_prefix_tokens == 0:
            return tokens
        batch = tokens.shape[0]
        images = [tokens] if len(counts) == 1 else list(tokens.split(counts, dim=1))
        pieces: List[torch.Tensor] = []
        for i in range(len(images)):
            slot = slots[i]
            if self.cls_token is not None:
                cls = self.cls_token if slot is None else self.cls_token + slot[:1]
                pieces.append(cls.expand(batch, -1, -1).to(tokens.dtype))
            if self.dist_token is not None:  # DeiT's distillation token, with the table's second slot
                dist = self.dist_token if slot is None else self.dist_token + slot[1:2]
                pieces.append(dist.expand(batch, -1, -1).to(tokens.dtype))
            if self.reg_token is not None:
                pieces.append(self.reg_token.expand(batch, -1, -1).to(tokens.dtype))
            pieces.append(images[i])
        return torch.cat(pieces, dim=1)

    def _rope_with_prefix(self, rope: torch.Tensor, counts: List[int]) -> torch.Tensor:
        """(L, H, T, 2R) rotations of the patch tokens with the identity (sin 0, cos 1) before each image's."""
        if self.num_prefix_tokens == 0:
            return rope
        half = rope.shape[-1] // 2
        identity = torch.cat([rope.new_zeros(half), rope.new_ones(half)]).expand(
            rope.shape[0], rope.shape[1], self.num_prefix_tokens, -1)
        images = [rope] if len(counts) == 1 else list(rope.split(counts, dim=2))
        pieces: List[torch.Tensor] = []
        for image in images:
            pieces.append(identity)
            pieces.append(image)
        return torch.cat(pieces, dim=2)


def _token_grids(patches: Patches) -> torch.Tensor:
    """(T, 2): the grid (rows, cols) of each patch token's image."""
    if len(patches.grids) == 1:
        ones = torch.ones_like(patches.coords[:, :1])
        return torch.cat([ones * patches.grids[0][0], ones * patches.grids[0][1]], dim=1)
    sizes = torch.tensor(patches.grids, device=patches.coords.device)
    return sizes.repeat_interleave(torch.tensor(patches.counts, device=patches.coords.device), dim=0)
