"""Idefics2's, Idefics3's and SmolVLM's reference: the folder's own transformers class (a tower,
``Idefics3VisionTransformer`` / ``SmolVLMVisionTransformer``, or the full model holding one), its tower fed the whole
image with an all-true ``patch_attention_mask``: its ``last_hidden_state`` (every token after ``post_layernorm``; the
tower has no pooled output). The tower buckets its table for any grid itself, so a target grid needs no rule of
ours; a patch-size change has no reference (``transformers_at``)."""
from typing import Any, Dict, Optional

import torch

from timm_vit_variants.families.idefics import IDEFICS_MODEL_TYPES

from ..verification.hf_ref import hf_config, hf_model_type, load, transformers_at
from ..verification.result import Check, Outputs

__all__ = ['is_hf_idefics_vision', 'hf_idefics_vision_outputs']


def is_hf_idefics_vision(check: Check) -> bool:
    """Whether the source is a transformers Idefics2, Idefics3 or SmolVLM folder (a tower or a full model)."""
    return hf_model_type(check) in IDEFICS_MODEL_TYPES


def _tower(model: Any) -> Any:
    """The image tower of a loaded class: itself, its ``vision_model``, or its ``model.vision_model``."""
    inner = getattr(model, 'model', model)
    return getattr(inner, 'vision_model', inner)


def hf_idefics_vision_outputs(check: Check, x: torch.Tensor,
                              mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """The tower's tokens for the whole image ``x``."""
    folder, cfg = hf_config(check)
    transformers = transformers_at(check, None)
    model, name = load(transformers, folder, cfg, IDEFICS_MODEL_TYPES[cfg['model_type']][0])
    patch = check.runs_at.patch_size
    mask = torch.ones(x.shape[0], x.shape[2] // patch[0], x.shape[3] // patch[1], dtype=torch.bool)
    with torch.no_grad():
        out = _tower(model)(pixel_values=x, patch_attention_mask=mask)
    return Outputs(out.last_hidden_state, None, name + ' (its image tower, an all-true patch_attention_mask)')
