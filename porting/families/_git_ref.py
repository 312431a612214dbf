"""GIT's reference: the transformers class a GIT folder declares, run on the image.

``GitVisionModel``'s output, or the captioning model's image encoder's (``GitModel.image_encoder``, the same
``GitVisionModel``): ``last_hidden_state``, every token after ``post_layernorm``. There is no pooler; the pooled
output compared is its first token, the normed [CLS]. At a target geometry the class runs with
``interpolate_pos_encoding=True`` (bicubic, no antialias: the 'hf' rule), which is the only resize it has.
"""
from typing import Dict, Optional

import torch

from ..verification.hf_ref import hf_config, load, transformers_at
from ..verification.result import Check, Outputs

__all__ = ['git_outputs']


def git_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """The folder's class on ``x``: its image tower's normed tokens, and the first of them as the pooled output."""
    transformers = transformers_at(check, 'hf')
    folder, cfg = hf_config(check)
    model, name = load(transformers, folder, cfg, 'GitVisionModel')
    tower = model if type(model).__name__ == 'GitVisionModel' else \
        getattr(model, 'git', model).image_encoder  # GitForCausalLM holds a GitModel, which holds the tower
    resize = check.target is not None
    with torch.no_grad():
        tokens = tower(pixel_values=x, interpolate_pos_encoding=resize).last_hidden_state
    where = '' if type(model).__name__ == 'GitVisionModel' else '.image_encoder'
    return Outputs(tokens, tokens[:, 0], name + where + (' with interpolate_pos_encoding' if resize else ''),
                   note='no pooler: the pooled output is its first token, the normed [CLS]')
