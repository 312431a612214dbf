"""DINOv2's parts of its own (its rows and readers are still ``dino_models.py`` and ``checkpoints/hf_dinov2.py``):
the linear-probe head's pooling of transformers' ``Dinov2ForImageClassification``, [CLS] concatenated with the mean
of the patch tokens (registers left out), as they leave the final norm: the 'cls_patch_mean' pool, twice the token
width."""
from dataclasses import dataclass
from typing import ClassVar, Optional

import torch

from ..heads import AvgPool as AvgPoolModule
from ..parts import PoolPart
from .registry import Family

__all__ = ['ClsPatchMeanPool', 'ClsPatchMeanPoolModule', 'FAMILY']


@dataclass(frozen=True)
class ClsPatchMeanPool(PoolPart, kind='cls_patch_mean'):
    """[CLS] concatenated with the mean of the patch tokens: a feature twice the token width."""
    needs_class_token: ClassVar[bool] = True

    def width(self, embed_dim: int) -> int:
        return 2 * embed_dim


class ClsPatchMeanPoolModule(AvgPoolModule, kind='cls_patch_mean'):
    """The model's 'cls_patch_mean' pool: ``cat([x[:, 0], mean of the (valid) patch tokens])``."""

    def pool_tokens(self, x: torch.Tensor, patch_valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        return torch.cat([x[:, 0], super().pool_tokens(x, patch_valid)], dim=-1)


FAMILY = Family('dinov2')
