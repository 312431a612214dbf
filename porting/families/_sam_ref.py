"""SAM's reference: timm's ``VisionTransformerSAM``, built from the folder's ``config.json`` with its weights
(``timm_ref.timm_model``), run on the image: ``forward_features`` (the neck's [B, C, H, W] outputs, compared as our
[B, H * W, C] tokens) and ``forward_head`` (the mean of the neck's outputs, then any classifier).

timm's SAM runs any whole-patch input as it is (its table resized bicubically with antialias and its relative-position
tables linearly on every call), so a target geometry runs the same model at the target's input size, if its patch
and its table's rule are timm's (``Check.require_own_resize``).
"""
from typing import Dict, Optional

import torch

from timm_vit_variants.parts import Learned

from ..verification.result import Check, Outputs
from ..verification.timm_ref import timm_model

__all__ = ['sam_outputs']


def sam_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """timm's neck outputs as tokens, and its pooled output or logits, for ``x``."""
    check.require_own_resize('timm', 'timm' if check.source.position(Learned) is not None else None)
    ref = timm_model(check.path, check.source, limits=check.limits)
    with torch.no_grad():
        feats = ref.model.forward_features(x)
        pooled = ref.model.forward_head(feats)
    return Outputs(feats.flatten(2).transpose(1, 2), pooled, ref.name + ' (VisionTransformerSAM)')
