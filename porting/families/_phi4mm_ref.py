"""Phi-4-multimodal's reference: the folder's ``Phi4MultimodalVisionModel`` on the image at its stored grid: its
``last_hidden_state`` (every token after ``post_layernorm``) and ``pooler_output`` (the MAP head). At another grid the
class looks its table up by bucketed coordinates, which the converted model does not do: that check fails, naming
why."""
from typing import Dict, Optional

import torch

from ..verification.hf_ref import hf_config, load, transformers_at
from ..verification.result import Check, Outputs, ReferenceFailed

__all__ = ['phi4mm_outputs']


def phi4mm_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """The class's tokens and pooled output for ``x`` (at the stored grid only)."""
    if check.target is not None:
        raise ReferenceFailed("Phi4MultimodalVisionModel looks its position table up by bucketed patch coordinates at "
                              "another grid (no interpolation), which the converted model's resize does not express")
    transformers = transformers_at(check, 'hf')
    folder, cfg = hf_config(check)
    model, name = load(transformers, folder, cfg, 'Phi4MultimodalVisionModel')
    with torch.no_grad():
        out = model(pixel_values=x)
    return Outputs(out.last_hidden_state, out.pooler_output, name + ' (pooler_output: its MAP head)')
