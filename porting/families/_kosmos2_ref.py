"""Kosmos-2's reference: the transformers class a Kosmos-2 folder declares, its ``vision_model`` run on the image.

The output compared is that vision model's (a ``Kosmos2VisionModel``): ``last_hidden_state`` (not normed) and
``pooler_output`` (the [CLS] through ``post_layernorm``). At a target geometry it runs with
``interpolate_pos_encoding=True`` (bicubic, no antialias: the 'hf' rule), the only resize it has.
"""
from typing import Dict, Optional

import torch

from ..verification.hf_ref import hf_config, load, transformers_at
from ..verification.result import Check, Outputs

__all__ = ['kosmos2_outputs']


def kosmos2_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """The folder's class on ``x``: its vision model's tokens and pooled output."""
    transformers = transformers_at(check, 'hf')
    folder, cfg = hf_config(check)
    model, name = load(transformers, folder, cfg, 'Kosmos2Model')
    resize = check.target is not None
    with torch.no_grad():
        out = model.vision_model(pixel_values=x, interpolate_pos_encoding=resize)
    return Outputs(out.last_hidden_state, out.pooler_output,
                   name + '.vision_model' + (' with interpolate_pos_encoding' if resize else ''),
                   note='the image features: the vision model\'s tokens and its pooler_output (the [CLS] through '
                        'post_layernorm); the image-to-text projection is not compared')
