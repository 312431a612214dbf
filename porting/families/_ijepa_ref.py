"""I-JEPA's reference: timm's own reading of a facebookresearch/ijepa checkpoint (``.pth.tar``).

timm registers these files as ``vit_huge_patch14_gap_224.in1k_ijepa`` and kin: a ``VisionTransformer`` with no
[CLS], the mean of the normed tokens (``global_pool='avg'``, ``fc_norm=False``), loaded through its
``checkpoint_filter_fn``, whose I-JEPA branch takes the checkpoint's encoder entry, strips ``module.`` and resizes the
table to the model's grid with ``resample_abs_pos_embed`` (bicubic, antialias). That load-time resize is the rule at
a target geometry (facebookresearch/ijepa's own ``interpolate_pos_encoding`` assumes a [CLS] row and cannot resize).
The entry is the one the converter read (``Check.weights_key``: the target encoder unless EMA weights were declined),
handed to timm's filter where its I-JEPA branch looks for it. transformers' I-JEPA folders are checked by the
transformers reference (format ``hf``).
"""
from typing import Dict, Optional

import torch

from ..verification.result import Check, NoReference, Outputs
from ..verification.timm_ref import fit_input, timm_equivalent

__all__ = ['ijepa_outputs']


def ijepa_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """timm's network for the checkpoint, built at the geometry the check runs at and loaded by timm's filter."""
    from timm.models.vision_transformer import checkpoint_filter_fn

    check.require_own_resize('timm', 'timm', "timm's I-JEPA loading")
    if check.weights_key is None:
        raise NoReference('not an I-JEPA training checkpoint: no encoder entry was read')
    config = check.target or check.source
    (gh, gw), (ph, pw) = config.grid_size, config.patch_size
    x = fit_input(x, config)  # whole patches, as our model takes them
    config = config.replace(img_size=(gh * ph, gw * pw))
    checkpoint = torch.load(check.path, map_location='cpu', weights_only=True)
    model = timm_equivalent(config, num_classes=0)
    model.load_state_dict(checkpoint_filter_fn({'encoder': checkpoint[check.weights_key]}, model), strict=True,
                          assign=True)
    with torch.no_grad():
        tokens = model.eval().forward_features(x)
        pooled = model.forward_head(tokens)
    where = '' if check.target is None else ' (its table resized by resample_abs_pos_embed as it loads)'
    return Outputs(tokens, pooled, f"timm VisionTransformer + timm checkpoint_filter_fn on the {check.weights_key!r} "
                   f'entry{where}')
