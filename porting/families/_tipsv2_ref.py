"""TIPSv2's reference: the folder's ``Tipsv2VisionModel`` run by transformers on the image: ``last_hidden_state``
(every token after the final LayerNorm) and ``pooler_output`` (the normed [CLS]). At another grid the class resizes
its table by itself (bilinear with antialias: rule ``'flexi'``; any other rule is refused by ``transformers_at``)."""
from typing import Dict, Optional

import torch

from ..verification.hf_ref import hf_config, load, transformers_at
from ..verification.result import Check, Outputs

__all__ = ['tipsv2_outputs']


def tipsv2_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """The class's normed tokens and its pooled output (the normed [CLS]) for ``x``."""
    transformers = transformers_at(check, 'flexi')
    folder, cfg = hf_config(check)
    model, name = load(transformers, folder, cfg, 'Tipsv2VisionModel')
    with torch.no_grad():
        out = model(pixel_values=x)
    return Outputs(out.last_hidden_state, out.pooler_output, name + ' (pooler_output: the normed [CLS])')
