"""Patch n' Pack (NaViT): the token sequences of many images packed into a few rows, attention kept inside each.

Every image keeps its own length. First-fit decreasing places the sequences into rows (of the longest
sequence's length), so a batch of mixed sizes carries almost no padding; an additive block-diagonal
mask keeps each image's attention to its own tokens, and timm's blocks run unchanged on the rows, one
attention call per block. Of the forms PyTorch offers, measured by ``benchmarks/bench_naflex.py``
(docs/benchmarks.md#naflex), it ties on CPU with one SDPA call per image (which timm's ``Attention``
cannot make) and beats padding to the longest (2.9x), FlexAttention (2.1x compiled) and nested jagged
tensors (23x).

The rows are run in chunks whose mask (rows x capacity^2) fits ``MASK_BUDGET``, each chunk at the length
of its own longest row, so the mask never grows with the batch: a row whose mask alone would exceed the
budget holds one sequence (which needs no mask when it fills the row). What else a chunk holds for each
(query, key) pair counts in the same budget (``pair_bytes``: a relative position bias per head and its
index). A sequence marked ``alone`` (an image whose tokens are not finite) gets a row of its own: an
additive mask gives a masked-out NaN a weight of 0, and 0 * NaN is NaN, so no mask can keep it from its
row's other images.
"""
from dataclasses import dataclass
from typing import Collection, List, Optional, Sequence

import torch

__all__ = ['MASK_BUDGET', 'PackedRows', 'pack_sequences']

MASK_BUDGET = 256 << 20  # bytes of one chunk's attention mask and per-pair inputs; the scores are at most heads x this


@dataclass
class PackedRows:
    """Where each token of some of the images sits in one chunk of packed rows.

    Attributes:
        rows, capacity: The chunk's shape (rows, capacity).
        image: (rows, capacity) image index of each slot, -1 where empty.
        source_index: The chunk's tokens in the concatenated sequences (image after image), image by image.
        flat_index: For each of those tokens, its slot ``row * capacity + column``.
        images: The indices of the chunk's images, in the order of ``source_index``.
    """
    rows: int
    capacity: int
    image: torch.Tensor
    source_index: torch.Tensor
    flat_index: torch.Tensor
    images: List[int]

    def scatter(self, tokens: torch.Tensor, fill: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The chunk's tokens of the (sum(lengths), D) sequences into (rows, capacity, D) rows; empty slots hold
        zeros, or the (D,) ``fill``."""
        rows = tokens.new_zeros(self.rows * self.capacity, tokens.shape[-1]) if fill is None else \
            fill.expand(self.rows * self.capacity, -1).clone()
        rows[self.flat_index] = tokens[self.source_index]
        return rows.view(self.rows, self.capacity, -1)

    def gather(self, rows: torch.Tensor, out: torch.Tensor) -> None:
        """The inverse of ``scatter``: the chunk's (rows, capacity, D) back into its places in ``out``."""
        out[self.source_index] = rows.reshape(self.rows * self.capacity, -1)[self.flat_index]

    def attn_mask(self, dtype: torch.dtype = torch.float32) -> Optional[torch.Tensor]:
        """(rows, 1, capacity, capacity) additive mask: a token attends to the tokens of its own image only.

        None for one row filled by one image, which needs none. Additive (0 / -inf) in the model's dtype,
        made once per chunk: a boolean mask would be converted by SDPA in every block. An empty slot
        attends to itself alone, so no row of the softmax is empty (SDPA would give NaN); nothing attends to it.
        """
        if self.rows == 1 and len(self.images) == 1 and self.source_index.numel() == self.capacity:
            return None
        same = (self.image[:, :, None] == self.image[:, None, :]) & (self.image[:, None, :] >= 0)
        allowed = same | torch.eye(self.capacity, dtype=torch.bool, device=self.image.device)
        mask = torch.zeros(allowed.shape, dtype=dtype, device=self.image.device)
        return mask.masked_fill_(~allowed, float('-inf'))[:, None]


def pack_sequences(lengths: Sequence[int], device=None, *, alone: Collection[int] = (), pair_bytes: int = 4,
                   budget: int = MASK_BUDGET) -> List[PackedRows]:
    """Pack sequences of ``lengths`` into rows by first-fit decreasing, in chunks whose mask fits ``budget`` bytes.

    Sequences in ``alone`` get a row each; ``pair_bytes`` is what a chunk holds per (query, key) pair: the mask's
    element (the model's dtype) and the position schemes' per-pair inputs.
    """
    capacity = max(lengths)
    alone = set(alone)
    rows: List[List[int]] = [[i] for i in sorted(alone)]
    free: List[int] = []  # room left in each shared row
    shared: List[List[int]] = []
    for i in sorted((i for i in range(len(lengths)) if i not in alone), key=lambda i: -lengths[i]):
        row = next((r for r, room in enumerate(free) if room >= lengths[i]), len(free))
        if row == len(free):
            free.append(capacity)
            shared.append([])
        shared[row].append(i)
        free[row] -= lengths[i]
    for members in shared:  # a row whose mask alone is over budget: its sequences each take a row instead
        used = sum(lengths[i] for i in members)
        rows.extend([[i] for i in members] if len(members) > 1 and used * used * pair_bytes > budget else [members])
    rows.sort(key=lambda members: -sum(lengths[i] for i in members))

    starts = [0] * len(lengths)
    for i in range(1, len(lengths)):
        starts[i] = starts[i - 1] + lengths[i - 1]
    chunks: List[PackedRows] = []
    first = 0
    while first < len(rows):
        width = sum(lengths[i] for i in rows[first])
        last = first + 1
        while last < len(rows) and (last - first + 1) * width * width * pair_bytes <= budget:
            last += 1
        chunks.append(_chunk(rows[first:last], width, lengths, starts, device))
        first = last
    return chunks


def _chunk(rows: List[List[int]], capacity: int, lengths: Sequence[int], starts: List[int], device) -> PackedRows:
    image = torch.full((len(rows), capacity), -1, dtype=torch.long, device=device)
    source, flat, images = [], [], []
    for r, members in enumerate(rows):
        column = 0
        for i in members:
            image[r, column:column + lengths[i]] = i
            source.append(torch.arange(starts[i], starts[i] + lengths[i], device=device))
            flat.append(torch.arange(r * capacity + column, r * capacity + column + lengths[i], device=device))
            images.append(i)
            column += lengths[i]
    return PackedRows(len(rows), capacity, image, torch.cat(source), torch.cat(flat), images)
