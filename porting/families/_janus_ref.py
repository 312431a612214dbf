"""Janus's reference: the folder's ``JanusVisionModel``: its ``last_hidden_state`` (every token after
``post_layernorm``) and its ``pooler_output`` (the first token normed once more); at another grid through its own
``interpolate_pos_encoding`` (rule ``'hf'``)."""
from typing import Dict, Optional

import torch

from ..verification.hf_ref import hf_config, load, transformers_at
from ..verification.result import Check, Outputs

__all__ = ['janus_outputs']


def janus_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """The class's tokens and pooled output for ``x``."""
    transformers = transformers_at(check, 'hf')
    folder, cfg = hf_config(check)
    model, name = load(transformers, folder, cfg, 'JanusVisionModel')
    resize = check.target is not None
    with torch.no_grad():
        out = model(pixel_values=x, interpolate_pos_encoding=resize)
    return Outputs(out.last_hidden_state, out.pooler_output,
                   name + (' with interpolate_pos_encoding' if resize else '') + ' (pooler_output: the first token '
                   'normed twice)')
