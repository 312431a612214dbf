"""FLAVA's reference: the folder's own transformers class (``FlavaImageModel``, or ``FlavaModel``'s
``image_model``): its ``last_hidden_state`` (every token after the final ``layernorm``) and its ``pooler_output``
(Linear + tanh on that [CLS]); at another grid through its own ``interpolate_pos_encoding`` (rule ``'hf'``)."""
from typing import Dict, Optional

import torch

from timm_vit_variants.families.flava import FLAVA_MODEL_TYPES

from ..verification.hf_ref import hf_config, hf_model_type, load, transformers_at
from ..verification.result import Check, Outputs

__all__ = ['is_hf_flava', 'hf_flava_outputs']


def is_hf_flava(check: Check) -> bool:
    """Whether the source is a transformers FLAVA folder."""
    return hf_model_type(check) in FLAVA_MODEL_TYPES


def hf_flava_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """The image model's tokens and pooled output for ``x``."""
    folder, cfg = hf_config(check)
    transformers = transformers_at(check, 'hf')
    model, name = load(transformers, folder, cfg, 'FlavaImageModel')
    tower = model if type(model).__name__ == 'FlavaImageModel' else model.image_model
    resize = check.target is not None
    with torch.no_grad():
        out = tower(pixel_values=x, interpolate_pos_encoding=resize)
    where = '' if tower is model else '.image_model'
    return Outputs(out.last_hidden_state, out.pooler_output,
                   name + where + (' with interpolate_pos_encoding' if resize else '') + ' (pooler_output: tanh '
                   'pooler on the normed [CLS])')
