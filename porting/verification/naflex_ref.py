"""NaFlex references and inputs: timm's ``NaFlexVit`` loaded by its own npz loader stands for big_vision's NaFlex
tower, and a fixed batch of images at different aspect ratios is what both networks are compared on."""
from typing import Dict, Tuple

import torch

from timm_vit_variants.config import SimpleViTConfig

from .timm_ref import TimmReference, naflex_vit

__all__ = ['MIXED_GRIDS', 'mixed_batch', 'naflex_model']

# Token grids of the mixed-size check: wide, tall, square (and one grid side below and above the table's).
MIXED_GRIDS: Tuple[Tuple[int, int], ...] = ((3, 7), (6, 4), (5, 5))


def mixed_batch(config: SimpleViTConfig, seed: int = 1) -> Dict[str, torch.Tensor]:
    """timm's NaFlex dict for fixed random images at ``MIXED_GRIDS``, padded to the longest (P-P-C patches)."""
    (ph, pw), chans = config.patch_size, config.in_chans
    longest = max(h * w for h, w in MIXED_GRIDS)
    generator = torch.Generator().manual_seed(seed)
    patches = torch.zeros(len(MIXED_GRIDS), longest, ph * pw * chans)
    coords = torch.zeros(len(MIXED_GRIDS), longest, 2, dtype=torch.long)
    valid = torch.zeros(len(MIXED_GRIDS), longest, dtype=torch.bool)
    for i, (h, w) in enumerate(MIXED_GRIDS):
        y, x = torch.meshgrid(torch.arange(h), torch.arange(w), indexing='ij')
        coords[i, :h * w] = torch.stack([y.reshape(-1), x.reshape(-1)], 1)
        patches[i, :h * w] = torch.randn(h * w, ph * pw * chans, generator=generator)
        valid[i, :h * w] = True
    return {'patches': patches, 'patch_coord': coords, 'patch_valid': valid}


def naflex_model(path: str, config: SimpleViTConfig, prefix: str) -> TimmReference:
    """timm's ``NaFlexVit`` with big_vision's table rule (bilinear, antialiased), loaded by ``load_pretrained``.

    timm's default ``pos_embed_interp_mode`` is bicubic, which is not big_vision's rule (1e-2 off); the
    reference is set to bilinear, the rule big_vision's ``naflex_vit`` implements.
    """
    model = naflex_vit(config.replace(pos_embed_resample='flexi')).to_empty(device='cpu').eval()
    model.load_pretrained(path, prefix=prefix)
    return TimmReference(model, "timm NaFlexVit.load_pretrained(npz) (bilinear table resize, big_vision's rule)",
                         naflex=True)
