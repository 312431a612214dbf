"""Patch n' Pack (NaViT): the token sequences of many images packed into a few rows, attention kept inside each.

Every image keeps its own length. First-fit decreasing places the sequences into rows of one
capacity (the longest sequence, or more), so a batch of mixed sizes carries almost no padding; an
additive block-diagonal mask keeps each image's attention to its own tokens, and timm's blocks run
unchanged on the rows, one attention call per block. Of the forms PyTorch offers, measured by
``benchmarks/bench_naflex.py`` (docs/benchmarks.md#naflex), it ties on CPU with one SDPA call per
image (which timm's ``Attention`` cannot make) and beats padding to the longest (2.9x),
FlexAttention (2.1x compiled) and nested jagged tensors (23x).
"""
from dataclasses import dataclass
from typing import List, Sequence, Tuple

import torch

__all__ = ['PackedRows', 'pack_sequences']


@dataclass
class PackedRows:
    """Where each token of each image sits in the packed rows.

    Attributes:
        rows, capacity: The packed shape (rows, capacity).
        image: (rows, capacity) image index of each slot, -1 where empty.
        flat_index: For each token of the concatenated sequences, its slot ``row * capacity + column``.
        lengths: Tokens per image, in image order.
    """
    rows: int
    capacity: int
    image: torch.Tensor
    flat_index: torch.Tensor
    lengths: List[int]

    def scatter(self, tokens: torch.Tensor) -> torch.Tensor:
        """(sum(lengths), D) tokens, images one after another, into (rows, capacity, D) rows (zeros where empty)."""
        rows = tokens.new_zeros(self.rows * self.capacity, tokens.shape[-1])
        rows[self.flat_index] = tokens
        return rows.view(self.rows, self.capacity, -1)

    def gather(self, rows: torch.Tensor) -> torch.Tensor:
        """The inverse of ``scatter``: (rows, capacity, D) back to (sum(lengths), D)."""
        return rows.reshape(self.rows * self.capacity, -1)[self.flat_index]

    def attn_mask(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """(rows, 1, capacity, capacity) additive mask: a token attends to the tokens of its own image only.

        Additive (0 / -inf) in the model's dtype, made once per batch: a boolean mask would be converted
        by SDPA in every block. An empty slot attends to itself alone, so no row of the softmax is empty
        (SDPA would give NaN); nothing attends to it.
        """
        same = (self.image[:, :, None] == self.image[:, None, :]) & (self.image[:, None, :] >= 0)
        allowed = same | torch.eye(self.capacity, dtype=torch.bool, device=self.image.device)
        mask = torch.zeros(allowed.shape, dtype=dtype, device=self.image.device)
        return mask.masked_fill_(~allowed, float('-inf'))[:, None]


def pack_sequences(lengths: Sequence[int], capacity: int = 0, device=None) -> PackedRows:
    """Pack sequences of ``lengths`` into rows of ``capacity`` (at least the longest) by first-fit decreasing."""
    capacity = max(capacity, max(lengths))
    free: List[int] = []  # room left in each row
    place: List[Tuple[int, int]] = [(0, 0)] * len(lengths)
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        row = next((r for r, room in enumerate(free) if room >= lengths[i]), len(free))
        if row == len(free):
            free.append(capacity)
        place[i] = (row, capacity - free[row])
        free[row] -= lengths[i]
    image = torch.full((len(free), capacity), -1, dtype=torch.long, device=device)
    flat = []
    for i, (row, start) in enumerate(place):
        image[row, start:start + lengths[i]] = i
        flat.append(torch.arange(row * capacity + start, row * capacity + start + lengths[i], device=device))
    return PackedRows(len(free), capacity, image, torch.cat(flat), list(lengths))
