"""The reference of timm's relative-position ViTs: timm's ``VisionTransformerRelPos`` holding the weights.

A folder is built from its own ``config.json`` (``timm.create_model('local-dir:...')``); a bare state dict by
``VisionTransformerRelPos`` with the settings read (the weights loaded strictly under timm's names, so a misread
MLP width, coordinate mode or norm does not load). At a target grid timm's own ``set_input_size`` regenerates the
biases for it, as a user of timm does; timm has no rule of its own for a patch-size change there.
"""
from pathlib import Path
from typing import Dict, Optional

import torch

from timm_vit_variants.families.relpos_mlp import MlpRelPos

from ..verification.result import Check, Outputs
from ..verification.timm_ref import TimmReference, fit_input, rebuild_buffers, timm_model, timm_weights

__all__ = ['relpos_outputs']


def _from_state_dict(check: Check) -> TimmReference:
    """timm's ``VisionTransformerRelPos`` with the read settings, the state dict loaded strictly."""
    from timm.models.vision_transformer_relpos import VisionTransformerRelPos

    source = check.source
    part = source.position(MlpRelPos)
    with torch.device('meta'):
        model = VisionTransformerRelPos(
            img_size=source.img_size, patch_size=source.patch_size, in_chans=source.in_chans,
            num_classes=source.num_classes, global_pool=source.head.pool.kind, embed_dim=source.embed_dim,
            depth=source.depth, num_heads=source.num_heads, mlp_ratio=source.block.mlp_dim / source.embed_dim,
            qkv_bias=source.block.qkv_bias, class_token=source.tokens.cls, fc_norm=source.head.fc_norm,
            rel_pos_type='mlp_swin' if part.mode == 'swin' else 'mlp', rel_pos_dim=part.hidden,
            shared_rel_pos=part.shared)
    model.load_state_dict(timm_weights(Path(check.path), check.weights_key), strict=True, assign=True)
    rebuild_buffers(model)  # the bias MLPs' coordinates and index, by timm's own code
    return TimmReference(model.eval(), 'timm VisionTransformerRelPos + timm load_state_dict (strict)')


def relpos_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """timm's features and logits for ``x``, at the target grid after timm's ``set_input_size``."""
    check.require_own_resize('timm', None)
    if Path(check.path).is_dir():
        ref = timm_model(check.path, check.source, limits=check.limits, weights_key=check.weights_key)
    else:
        ref = _from_state_dict(check)
    if check.target is not None:
        target = check.target
        ref.model.set_input_size(img_size=(target.grid_size[0] * target.patch_size[0],
                                           target.grid_size[1] * target.patch_size[1]))
        ref.name += ' with its set_input_size to the target grid'
        x = fit_input(x, target)
    return ref.outputs(x)
