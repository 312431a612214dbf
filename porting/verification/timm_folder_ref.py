"""The reference of a timm source: timm's ``VisionTransformer`` (or ``NaFlexVit``) holding its folder or state dict.

A timm source that needs another timm class, or another library, is claimed by its family
(``porting.families.registry.Claim``): a beit* folder, a rotary port run in timm's ``Eva``, a folder transformers'
``TimmWrapperModel`` saved.
"""
import functools
from typing import Dict, Optional

import torch

from .networks import timm_network
from .result import Check, Outputs
from .timm_ref import timm_model

__all__ = ['timm_outputs']


def timm_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]]) -> Outputs:
    """Run ``check``'s timm source in the timm network it loads into (see the module docstring)."""
    build = functools.partial(timm_model, limits=check.limits, weights_key=check.weights_key)
    return timm_network(build)(check, x, mixed)
