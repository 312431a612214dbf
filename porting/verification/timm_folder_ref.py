"""The reference of a timm source: the timm class its folder or state dict holds.

timm's ``VisionTransformer``; its ``Beit`` for beit* folders; its ``Eva`` for the rotary ports (DINOv3, RoPE-ViT),
which ``VisionTransformer`` cannot express; a folder transformers' ``TimmWrapperModel`` saved runs as that class.
"""
import functools
from typing import Dict, Optional

import torch

from timm_vit_variants.parts import Rope

from ..extras import require
from .beit_ref import beit_outputs, is_timm_beit_folder
from .dinov3_ref import timm_eva_outputs
from .hf_ref import is_timm_wrapper_folder, timm_wrapper_outputs
from .networks import timm_network
from .result import Check, Outputs
from .timm_ref import timm_model

__all__ = ['timm_outputs']


def timm_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]]) -> Outputs:
    """Run ``check``'s timm source in the timm class it holds (see the module docstring)."""
    if is_timm_wrapper_folder(check.path):
        require('hf', 'verifying a transformers TimmWrapperModel folder',
                'pass --no-verify to convert without the check')
        return timm_wrapper_outputs(check, x, mixed)
    if is_timm_beit_folder(check.path):
        return beit_outputs(check, x, mixed)
    if check.source.position(Rope) is not None:
        return timm_eva_outputs(check, x, mixed)
    build = functools.partial(timm_model, limits=check.limits, weights_key=check.weights_key)
    return timm_network(build)(check, x, mixed)
