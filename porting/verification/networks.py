"""References that are timm networks: run as built at the source geometry, or rebuilt at the target one.

``timm_network(build)`` turns a builder ``(path, config) -> TimmReference`` into a reference function; every
family whose source timm can rebuild (big_vision and vit_jax archives, timm folders) registers one.
"""
from typing import Callable, Dict, Optional

import torch
import torch.nn as nn

from timm_vit_variants.config import SimpleViTConfig
from timm_vit_variants.memory import release_after_use

from .result import Check, Outputs
from .streamed import trace_blocks
from .target import at_target
from .timm_ref import TimmReference, fit_input

__all__ = ['Reference', 'timm_network', 'release_as_it_runs']

Reference = Callable[[Check, torch.Tensor, Optional[Dict[str, torch.Tensor]]], Outputs]


def release_as_it_runs(model: nn.Module) -> None:
    """Hand back the mapped weight pages of each of ``model``'s blocks once it has run
    (``memory.release_after_use``)."""
    blocks = getattr(model, 'blocks', None)
    if isinstance(blocks, nn.Sequential) and len(blocks):
        release_after_use(blocks)
    trace_blocks(model)  # streamed: each block's output compared as ours runs


def timm_network(build: Callable[[str, SimpleViTConfig], TimmReference]) -> Reference:
    """The reference of a source that ``build`` loads into a timm network: run as built at the source geometry, or
    rebuilt at the target one by the source framework's own resize rule (``target.at_target``)."""
    def outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]]) -> Outputs:
        ref = build(check.path, check.source)
        if check.target is not None:
            ref, mixed = at_target(ref, check), None
            x = fit_input(x, check.target)  # padded or cropped to whole patches, as our model does
        release_as_it_runs(ref.model)
        return ref.outputs(x, mixed)
    return outputs
