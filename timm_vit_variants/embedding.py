"""The one embedding step of ``SimpleVisionTransformer``, for every input form.

An NCHW batch (its one-grid case), a list of images and timm's NaFlex dict all arrive as ``Patches`` (patch
tokens, each token's (y, x), each image's grid) and leave as sequences ready for the blocks: each image's absolute
positions for its own grid (the ``abs_pos`` scheme: a sin-cos row depends on (y, x) alone; a learned table is
resampled once per grid, with the model's rule), then its prefix ([CLS] with its table slot, DeiT's distillation
token with its own, then the registers, with rows of their own only in a table that has them) before its patch
tokens, and the attention-input schemes' per-token inputs (rotations, the identity on prefix tokens). Position
schemes are reached through ``positions.PositionsMixin``; ``naflex.py`` only turns its input forms into
``Patches`` and runs the packed rows.
"""
from typing import Dict, List, Optional, Tuple

import torch

from .naflex import Patches
from .posemb import grid_coords

__all__ = ['EmbeddingMixin']


class EmbeddingMixin:
    """The embedding step of ``SimpleVisionTransformer`` (which provides the modules used here)."""

    def _patches(self, x: torch.Tensor) -> Patches:
        """An NCHW batch's patch tokens: the one-grid case of ``Patches``, one image a row."""
        x = self.patch_embed(x)
        batch, grid_h, grid_w, dim = x.shape
        return Patches(x.reshape(batch, grid_h * grid_w, dim), grid_coords(grid_h, grid_w, x.device),
                       [grid_h * grid_w], [(grid_h, grid_w)])

    def _embed(self, patches: Patches) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
        """The one embedding step, for every input form: each image's positions for its own grid, then its prefix
        ([CLS] with its table slot, DeiT's distillation token with the next one, then the registers, with rows of
        their own in a table that has them) before its patch tokens.

        Returns the (rows, sequence, D) tokens and the attention-input schemes' per-token inputs by slot name.
        """
        x, slots = self._add_positions(patches.tokens, patches.coords, patches.counts, patches.grids,
                                       patches.valid is not None)
        x = self._with_prefix(x, patches.counts, slots)
        inputs = self._token_inputs(patches.coords, patches.counts, patches.grids)
        return self.norm_pre(self.pos_drop(x)), inputs

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
                reg = self.reg_token
                start = int(self.cls_token is not None) + int(self.dist_token is not None)
                if slot is not None and self.pos_embed_slots > start:  # a table with rows for the registers
                    reg = reg + slot[start:start + reg.shape[1]]
                pieces.append(reg.expand(batch, -1, -1).to(tokens.dtype))
            pieces.append(images[i])
        return torch.cat(pieces, dim=1)
