"""Pixio's reference: the folder's ``PixioModel`` run by transformers on the image: ``last_hidden_state`` (every token
after the final LayerNorm) and ``pooler_output`` (the mean of the normed class tokens). At another grid the class
resizes its table by itself, always (bicubic, no antialias: rule ``'hf'``; any other rule is refused by
``transformers_at``)."""
from typing import Dict, Optional

import torch

from ..verification.hf_ref import hf_config, load, transformers_at
from ..verification.result import Check, Outputs

__all__ = ['pixio_outputs']


def pixio_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """The class's normed tokens and pooled output for ``x``."""
    transformers = transformers_at(check, 'hf')
    folder, cfg = hf_config(check)
    model, name = load(transformers, folder, cfg, 'PixioModel')
    with torch.no_grad():
        out = model(pixel_values=x)
    return Outputs(out.last_hidden_state, out.pooler_output,
                   name + ' (pooler_output: the mean of the normed class tokens)')
