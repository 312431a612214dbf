"""Probes of a model's public modules for tests: what the embedding step hands to the blocks."""
from typing import Tuple

import torch


def embedded(model: torch.nn.Module, x: torch.Tensor) -> Tuple[torch.Tensor, int, int]:
    """The tokens the first block receives (the output of ``norm_pre``) and the token grid, for an NCHW batch."""
    seen = []
    handle = model.norm_pre.register_forward_hook(lambda module, args, out: seen.append(out))
    try:
        model.forward_intermediates(x, indices=[0], stop_early=True, intermediates_only=True)
    finally:
        handle.remove()
    grid_h, grid_w = model.patch_embed(x).shape[1:3]
    return seen[0], grid_h, grid_w
