"""The reference of a timm ``qwen3_vit_*`` folder: timm's own model (``timm.create_model('local-dir:...')`` and the
folder's weights, ``timm_ref.timm_model``), run at the checked grid, which it takes as it is (its table stretched and
its RoPE made for each input). Features: the tower's tokens (``forward_features`` of the encoder, (B, H * W, D));
logits: a classifier's, or an encoder's mean of the tokens (``global_pool='avg'``); the projector's tokens of an
encoder are not compared (the converted model leaves the projector out)."""
from typing import Dict, Optional

import torch

from ..verification.result import Check, Outputs
from ..verification.timm_ref import fit_input, timm_model

__all__ = ['qwen3_vit_outputs']


def qwen3_vit_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """timm's model of the folder at the geometry checked (a patch-size change has no reference)."""
    check.require_own_resize('timm', None)
    ref = timm_model(check.path, check.source, limits=check.limits, weights_key=check.weights_key)
    model = ref.model
    tower = getattr(model, 'encoder', model)
    x = fit_input(x, check.runs_at)
    with torch.no_grad():
        tokens = tower.forward_features(x)
        logits = None
        if tower is not model:
            logits = model.forward_head(tokens)
        elif tower.merger is None and tower.global_pool == 'avg':
            logits = tokens.mean(dim=(1, 2))
    return Outputs(tokens.flatten(1, 2), logits, ref.name + ' (the tower\'s tokens' +
                   (', its VLM projector left out)' if tower is model and tower.merger is not None else ')'))
