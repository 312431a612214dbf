"""The SigLIP and SigLIP 2 transformers references: the class the folder declares, with its MAP head's pooled output
(SigLIP 2 on its own patchified inputs, and on the mixed-size NaFlex batch, its table resized per image)."""
from typing import Any, Dict, Optional, Tuple

import torch

from .hf_ref import classified, hf_config, hf_model_type, load, transformers_at, transformers_module
from .result import Check, Outputs

__all__ = ['is_hf_siglip', 'is_hf_siglip2', 'hf_siglip_outputs', 'hf_siglip2_outputs']


def is_hf_siglip2(check: Check) -> bool:
    """Whether the source is a SigLIP 2 folder (two-tower or vision tower)."""
    return str(hf_model_type(check)).startswith('siglip2')


def is_hf_siglip(check: Check) -> bool:
    """Whether the source is a SigLIP folder (two-tower or vision tower)."""
    return hf_model_type(check) in ('siglip', 'siglip_vision_model')


def _patchify(x: torch.Tensor, patch: Tuple[int, int]) -> Dict[str, torch.Tensor]:
    """An NCHW batch as SigLIP 2's inputs: P-P-C flattened patches, row-major, all valid, and the grid."""
    (ph, pw), (batch, chans, height, width) = patch, x.shape
    gh, gw = height // ph, width // pw
    x = x[..., :gh * ph, :gw * pw].reshape(batch, chans, gh, ph, gw, pw)
    patches = x.permute(0, 2, 4, 3, 5, 1).reshape(batch, gh * gw, ph * pw * chans)
    return {'pixel_values': patches, 'pixel_attention_mask': torch.ones(batch, gh * gw, dtype=torch.long),
            'spatial_shapes': torch.tensor([[gh, gw]] * batch)}


def hf_siglip2_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """A SigLIP 2 folder's class on ``x`` patchified (any grid: its table is resized per image) and on the
    mixed-size NaFlex batch: a tower's tokens and MAP-pooled embedding, or a classifier's logits and masked mean."""
    folder, cfg = hf_config(check)
    transformers = transformers_module()
    check.require_own_resize('transformers', 'flexi', "SigLIP 2's")
    model, name = load(transformers, folder, cfg, 'Siglip2Model' if cfg.get('model_type') == 'siglip2' else
                       'Siglip2VisionModel')
    classifier = hasattr(model, 'classifier')
    tower = model.vision_model if type(model).__name__ == 'Siglip2Model' else model

    def run(**inputs: Any) -> Outputs:
        if classifier:
            return classified(model, name + ' on spatial_shapes', **inputs)
        with torch.no_grad():
            out = tower(**inputs)
        return Outputs(out.last_hidden_state, out.pooler_output, name + ' (spatial_shapes; pooler_output: the MAP '
                       'head)')

    result = run(**_patchify(x, check.source.patch_size))
    if mixed is not None:
        valid = mixed['patch_valid']
        grids = torch.stack([mixed['patch_coord'][i][row].amax(0) + 1 for i, row in enumerate(valid)])
        laid = run(pixel_values=mixed['patches'], pixel_attention_mask=valid.long(), spatial_shapes=grids)
        result.mixed_features = laid.features[valid]
        result.mixed_pooled = laid.logits if not classifier else laid.pre_logits
    return result


def hf_siglip_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """A SigLIP folder's class: a tower's post-LayerNorm tokens and MAP-pooled embedding, or a classifier's logits
    (and the mean its classifier reads)."""
    transformers = transformers_at(check, 'hf')
    folder, cfg = hf_config(check)
    resize = check.target is not None
    model, name = load(transformers, folder, cfg, 'SiglipModel' if cfg.get('model_type') == 'siglip' else
                       'SiglipVisionModel')
    name += ' with interpolate_pos_encoding' if resize else ''
    if hasattr(model, 'classifier'):
        return classified(model, name, pixel_values=x, interpolate_pos_encoding=resize)
    tower = model.vision_model if type(model).__name__ == 'SiglipModel' else model
    with torch.no_grad():
        out = tower(pixel_values=x, interpolate_pos_encoding=resize)
    return Outputs(out.last_hidden_state, out.pooler_output, name + ' (pooler_output: the MAP head)')
