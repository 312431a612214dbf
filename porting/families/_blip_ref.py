"""BLIP's reference: the folder's own transformers class, run on the image. An image-tower class
(``BlipVisionModel``, ``Blip2VisionModel``, ``InstructBlipVisionModel``) gives its ``last_hidden_state`` (every
token after ``post_layernorm``) and its ``pooler_output`` (that [CLS] normed again); a full model gives what it
computes of the image with its ``vision_model``: those outputs, projected by ``BlipModel``'s ``visual_projection``
(its ``get_image_features``) or, for ``BlipForImageTextRetrieval``, its ``vision_proj`` of the [CLS] normed once.
At another grid it runs its own ``interpolate_pos_encoding`` (rule ``'hf'``; any other rule is refused by
``transformers_at``)."""
from typing import Dict, Optional

import torch

from timm_vit_variants.families.blip import BLIP_FOLDERS, BLIP_HEADS, BLIP_MODEL_TYPES

from ..verification.hf_ref import hf_config, hf_model_type, load, transformers_at
from ..verification.result import Check, Outputs

__all__ = ['is_hf_blip_vision', 'hf_blip_vision_outputs']


def is_hf_blip_vision(check: Check) -> bool:
    """Whether the source is a transformers BLIP, BLIP-2 or InstructBLIP folder."""
    return hf_model_type(check) in BLIP_MODEL_TYPES or hf_model_type(check) in BLIP_FOLDERS


def hf_blip_vision_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """The class's tokens and pooled (or projected) output for ``x``."""
    folder, cfg = hf_config(check)
    transformers = transformers_at(check, 'hf')
    tower_class = BLIP_MODEL_TYPES.get(cfg['model_type'])
    model, name = load(transformers, folder, cfg, tower_class or next(iter(BLIP_FOLDERS[cfg['model_type']])))
    resize = check.target is not None
    tower = model if tower_class else model.vision_model
    with torch.no_grad():
        out = tower(pixel_values=x, interpolate_pos_encoding=resize)
        head = BLIP_HEADS.get(type(model).__name__)
        if head is None:
            pooled, what = out.pooler_output, 'pooler_output: the [CLS] normed twice'
        else:
            pooled = getattr(model, head[0])(out.pooler_output if head[1] else out.last_hidden_state[:, 0])
            what = f"{head[0]} of {'the pooler_output' if head[1] else 'the [CLS] normed once'}"
    where = '' if tower_class else '.vision_model'
    return Outputs(out.last_hidden_state, pooled,
                   name + where + (' with interpolate_pos_encoding' if resize else '') + f' ({what})')
