"""Perception Encoder's reference: the timm folder run by timm itself (``create_model('local-dir:...')`` with
``dynamic_img_size=True``, which builds its RoPE for the grid of each input and resizes its table from the nominal
grid by its own rule, as ``set_input_size`` does), at the source geometry or at the target one."""
from pathlib import Path
from typing import Dict, Optional

import torch

from timm_vit_variants.checkpoints.files import SINGLE_WEIGHT_FILES, read_json
from timm_vit_variants.families.pe_positions import PeRope
from timm_vit_variants.parts import Learned

from ..verification.dinov3_ref import load_eva
from ..verification.result import Check, NoReference, Outputs
from ..verification.timm_ref import timm_weights

__all__ = ['is_pe', 'pe_outputs']


def is_pe(check: Check) -> bool:
    """Whether the timm source was read as a PE tower (its RoPE is PE's)."""
    return check.source.position(PeRope) is not None


def pe_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """The folder's tokens (after the final norm, where it has one) and pooled output (its MAP head and projection,
    or its mean) on ``x`` cut to the grid checked."""
    import timm

    source, runs_at = check.source, check.runs_at
    check.require_own_resize('timm', 'timm' if source.position(Learned) is not None else None)
    folder = Path(check.path)
    files = [folder / name for name in SINGLE_WEIGHT_FILES if (folder / name).is_file()] if folder.is_dir() else []
    if not files:
        raise NoReference('timm can only load an unsharded Hub folder of a PE tower (config.json + model.safetensors)')
    architecture = read_json(str(folder / 'config.json')).get('architecture')
    with torch.device('meta'):
        model = timm.create_model(f'local-dir:{folder}', pretrained=False, dynamic_img_size=True)
    model = load_eva(model, timm_weights(files[0], check.weights_key))
    rows, cols = runs_at.grid_size
    x = x[..., :rows * runs_at.patch_size[0], :cols * runs_at.patch_size[1]]
    with torch.no_grad():
        feats = model.forward_features(x)
        pooled = model.forward_head(feats)
    return Outputs(feats, pooled, f"timm.create_model('local-dir:...', dynamic_img_size=True) ({architecture})")
