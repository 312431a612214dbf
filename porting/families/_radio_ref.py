"""RADIO's reference: timm's ``VisionTransformer`` as its ``vit_*_radio_v3`` entries build it (LayerScale, the [CLS]
then registers, a table without prefix rows, no final norm, a patch conv), at the grid the source was read for,
loaded through timm's own ``checkpoint_filter_fn``, whose RADIO branch (``_convert_radio``) renames the
``radio_model.model.`` layout, splits the [CLS] from the registers and evaluates the CPE table for the model's grid as
RADIO's patch generator does (bilinear to the square of the larger side, no antialias, the top-left cropped), here with
``align_corners=False`` as RADIO's code (NVlabs/RADIO ``vit_patch_generator.py``) has it.

The check shares with the converter the head count, which no file records. A table resized afterwards to another
grid (``--img-size``) is resized by our rule, not RADIO's, so that target is not checked. That the whole matches
RADIO's own code at three grids, one non-square, is shown by tests/test_reference_radio.py.
"""
from pathlib import Path
from typing import Dict, Optional

import torch

from ..verification.result import Check, NoReference, Outputs
from ..verification.timm_ref import timm_weights

__all__ = ['radio_outputs']


def radio_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """timm's network for the file at the grid the source was read for: every token, and the first [CLS]."""
    from timm.models.vision_transformer import VisionTransformer, checkpoint_filter_fn

    if check.target is not None:
        raise NoReference("RADIO evaluates its table for each grid (bilinear to the square of the larger side, then "
                          'cropped); the converted table was resized by our rule instead (read the source for that '
                          'grid with --source-img-size)')
    config = check.source
    (gh, gw), (ph, pw) = config.grid_size, config.patch_size
    with torch.device('meta'):
        model = VisionTransformer(img_size=(gh * ph, gw * pw), patch_size=(ph, pw), embed_dim=config.embed_dim,
                                  depth=config.depth, num_heads=config.num_heads,
                                  mlp_ratio=config.block.mlp_dim / config.embed_dim, qkv_bias=config.block.qkv_bias,
                                  init_values=config.block.init_values, reg_tokens=config.tokens.registers,
                                  no_embed_class=True, final_norm=False, num_classes=0, global_pool='token')
    state = checkpoint_filter_fn(timm_weights(Path(check.path), check.weights_key), model, interpolation='bilinear',
                                 antialias=False, align_corners=False)
    model.load_state_dict(state, strict=True, assign=True)
    with torch.no_grad():
        tokens = model.eval().forward_features(x[..., :gh * ph, :gw * pw])
    return Outputs(tokens, tokens[:, 0], "timm VisionTransformer (vit_*_radio_v3's) + timm's checkpoint_filter_fn "
                   '(RADIO branch, align_corners=False)')
