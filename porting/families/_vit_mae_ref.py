"""MAE's reference: the transformers class a ViTMAE folder declares (``ViTMAEModel``, or ``ViTMAEForPreTraining``'s
encoder ``vit``), run on the image with ``mask_ratio=0`` and ``noise`` rising along the patches, so that its random
masking keeps every patch in its own order (``argsort`` of the noise is the identity). Assumed: that is the encoder
as it runs unmasked, the form its features are used in. Outputs: ``last_hidden_state`` (every token after the final
LayerNorm) and its first token, the normed [CLS], as the pooled output (the class has no pooler). At a target
geometry the class runs with ``interpolate_pos_encoding=True`` (rule ``hf``).
"""
from typing import Dict, Optional

import torch

from ..verification.hf_ref import hf_config, load, transformers_at
from ..verification.result import Check, Outputs

__all__ = ['vit_mae_outputs']


def vit_mae_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """The folder's encoder on ``x``, unmasked and in order: its normed tokens, and the first as the pooled output."""
    transformers = transformers_at(check, 'hf')
    folder, cfg = hf_config(check)
    model, name = load(transformers, folder, cfg, 'ViTMAEModel')
    encoder = model.vit if hasattr(model, 'vit') else model
    encoder.config.mask_ratio = 0.0  # the embeddings read the same config object
    resize = check.target is not None
    patches = (x.shape[-2] // encoder.config.patch_size) * (x.shape[-1] // encoder.config.patch_size)
    noise = torch.arange(patches, dtype=torch.float32).expand(x.shape[0], patches)
    with torch.no_grad():
        tokens = encoder(pixel_values=x, noise=noise, interpolate_pos_encoding=resize).last_hidden_state
    where = '' if encoder is model else '.vit'
    return Outputs(tokens, tokens[:, 0], name + where + ' (mask_ratio=0, patches in order)' +
                   (' with interpolate_pos_encoding' if resize else ''),
                   note='no pooler: the pooled output is its first token, the normed [CLS]')
