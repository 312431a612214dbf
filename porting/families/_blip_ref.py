"""BLIP's reference: the folder's own transformers class (``BlipVisionModel``, ``Blip2VisionModel``,
``InstructBlipVisionModel``): its ``last_hidden_state`` (every
token after ``post_layernorm``) and its ``pooler_output`` (that [CLS] normed again); at another grid through its own
``interpolate_pos_encoding`` (rule ``'hf'``; any other rule is refused by ``transformers_at``)."""
from typing import Dict, Optional

import torch

from timm_vit_variants.families.blip import BLIP_MODEL_TYPES

from ..verification.hf_ref import hf_config, hf_model_type, load, transformers_at
from ..verification.result import Check, Outputs

__all__ = ['is_hf_blip_vision', 'hf_blip_vision_outputs']


def is_hf_blip_vision(check: Check) -> bool:
    """Whether the source is a transformers BLIP, BLIP-2 or InstructBLIP image-tower folder."""
    return hf_model_type(check) in BLIP_MODEL_TYPES


def hf_blip_vision_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """The class's tokens and pooled output for ``x``."""
    folder, cfg = hf_config(check)
    transformers = transformers_at(check, 'hf')
    model, name = load(transformers, folder, cfg, BLIP_MODEL_TYPES[cfg['model_type']])
    resize = check.target is not None
    with torch.no_grad():
        out = model(pixel_values=x, interpolate_pos_encoding=resize)
    return Outputs(out.last_hidden_state, out.pooler_output,
                   name + (' with interpolate_pos_encoding' if resize else '') + ' (pooler_output: the [CLS] normed '
                   'twice)')
