"""What the transformer blocks need beside the tokens: where the tokens sit, and the position schemes' inputs."""
from typing import Dict, List, NamedTuple, Optional

import torch

__all__ = ['BlockContext']


class BlockContext(NamedTuple):
    """The blocks' side inputs (a NamedTuple, so TorchScript, FX and torch.export take it as it is).

    Made once per forward for an NCHW batch, once per chunk of packed rows; it names no position scheme: each
    scheme (``positions.py``) keeps what it prepared for the run under its own slot name.

    Attributes:
        attn_mask: Packed rows' additive mask keeping each image's attention to itself; None for NCHW.
        grid: NCHW's token grid (rows, cols); None for packed rows.
        tensors: Each scheme's tensors for this run, by slot name (rotations, a canvas, an index).
        sizes: Each scheme's integer sizes for this run, by slot name.
    """
    attn_mask: Optional[torch.Tensor]
    grid: Optional[List[int]]
    tensors: Dict[str, torch.Tensor]
    sizes: Dict[str, List[int]]
