"""What the transformer blocks need beside the tokens, made once by the embedding step for every input form."""
from typing import List, NamedTuple, Optional

import torch

__all__ = ['BlockContext']


class BlockContext(NamedTuple):
    """The blocks' side inputs (a NamedTuple, so TorchScript, FX and torch.export take it as it is).

    Attributes:
        attn_mask: Packed rows' additive mask keeping each image's attention to itself; None for NCHW.
        grid: NCHW's token grid (rows, cols), for CPVT's encoding.
        cells, canvas: Packed rows' canvas cell of each slot and the canvas shape, for CPVT's encoding.
        rope: Rotary positions (L, B or rows, H or 1, sequence, 2R) in timm's [sin, cos] layout, L = 1 when the
            layers share them; identity on prefix and empty slots.
    """
    attn_mask: Optional[torch.Tensor] = None
    grid: Optional[List[int]] = None
    cells: Optional[torch.Tensor] = None
    canvas: Optional[List[int]] = None
    rope: Optional[torch.Tensor] = None
