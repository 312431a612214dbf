"""InternViT's reference: timm's ``VisionTransformer`` as timm builds ``vit_intern300m_patch14_448`` (its port of
OpenGVLab's InternViT: LayerScale, no final norm), loaded with the folder's tensors under timm's names.

OpenGVLab's remote code is not a library this check can import, and timm has no filter for its layout, so the names
are timm's own ones for each of InternViT's modules (``_TIMM_NAMES``, written from timm's ``VisionTransformer``). At
another grid the table is resized as InternViT's embedding does as it runs (``_get_pos_embed``: the patch rows,
bicubic, ``align_corners=False``, no antialias, the [CLS] row kept) before timm's network takes it. Tested against the
outputs InternVL's own code wrote (tests/data/reference_internvit).
"""
import re
from typing import Dict, Optional

import torch
import torch.nn.functional as F

from ..verification.hf_ref import hf_config
from ..verification.result import Check, NoReference, Outputs
from ..verification.timm_ref import fit_input, timm_equivalent

__all__ = ['internvit_outputs']

# InternViT's module names -> timm VisionTransformer's (the rest are the same in both)
_TIMM_NAMES = (('embeddings.class_embedding', 'cls_token'), ('embeddings.position_embedding', 'pos_embed'),
               ('embeddings.patch_embedding.', 'patch_embed.proj.'), ('encoder.layers.', 'blocks.'))


def _timm_key(name: str) -> str:
    for theirs, timm_name in _TIMM_NAMES:
        if name.startswith(theirs):
            name = timm_name + name[len(theirs):]
    return re.sub(r'\.ls([12])$', r'.ls\1.gamma', name)


def _internvit_table(table: torch.Tensor, grid: tuple, target: tuple) -> torch.Tensor:
    """InternViT's ``_get_pos_embed`` on the patch rows of ``table`` (1, 1 + gh*gw, D), the [CLS] row kept."""
    patches = table[:, 1:].float().reshape(1, grid[0], grid[1], -1).permute(0, 3, 1, 2)
    patches = F.interpolate(patches, size=target, mode='bicubic', align_corners=False)
    return torch.cat([table[:, :1], patches.flatten(2).transpose(1, 2).to(table.dtype)], dim=1)


def internvit_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """timm's network at the check's geometry: the last block's tokens and their [CLS] token."""
    from safetensors.torch import load_file

    check.require_own_resize('InternViT', 'hf', "InternViT's")
    folder, _ = hf_config(check)
    files = sorted(folder.glob('*.safetensors'))
    if len(files) != 1:
        raise NoReference(f'expected one .safetensors file in {folder}, found {len(files)}')
    weights = {_timm_key(k): v for k, v in load_file(str(files[0])).items()}
    config = check.target or check.source
    if check.target is not None:
        weights['pos_embed'] = _internvit_table(weights['pos_embed'], check.source.grid_size, config.grid_size)
    model = timm_equivalent(config, num_classes=0)
    model.load_state_dict(weights, strict=True, assign=True)
    with torch.no_grad():
        tokens = model.eval().forward_features(fit_input(x, config))
    where = '' if check.target is None else " (the table resized as InternViT's embedding resizes it)"
    return Outputs(tokens, tokens[:, 0], f"timm VisionTransformer (vit_intern300m's) with the folder's tensors{where}")
