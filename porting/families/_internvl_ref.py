"""InternVL's reference: the folder's ``InternVLVisionModel`` on the image: its ``last_hidden_state`` (the class has
no pooled output). The class resizes its table itself at any other grid (bicubic, no antialias: the 'hf' rule)."""
from typing import Dict, Optional

import torch

from ..verification.hf_ref import hf_config, load, transformers_at
from ..verification.result import Check, Outputs

__all__ = ['internvl_outputs']


def internvl_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """The class's tokens for ``x``."""
    transformers = transformers_at(check, 'hf')
    folder, cfg = hf_config(check)
    model, name = load(transformers, folder, cfg, 'InternVLVisionModel')
    with torch.no_grad():
        tokens = model(pixel_values=x).last_hidden_state
    return Outputs(tokens, None, name, note='no pooled output: its tokens are compared')
