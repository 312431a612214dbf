"""DeiT's own pooling: transformers' ``DeiTForImageClassification`` and a ``DeiTModel``'s pooler read the [CLS] token
alone beside the distillation token, with one classifier (no ``head_dist``): the 'cls_alone' pool. Apart from
``families/deit.py`` because the DeiT reader (which that module routes to) builds configs with it."""
from dataclasses import dataclass
from typing import ClassVar, Optional

import torch

from ..heads import PoolModule
from ..parts import PoolPart

__all__ = ['ClsAlonePool', 'ClsAlonePoolModule']


@dataclass(frozen=True)
class ClsAlonePool(PoolPart, kind='cls_alone'):
    """The [CLS] token alone, beside a distillation token that has no classifier of its own."""
    needs_class_token: ClassVar[bool] = True
    ignores_distillation_token: ClassVar[bool] = True


class ClsAlonePoolModule(PoolModule, kind='cls_alone'):
    """The model's 'cls_alone' pool: ``x[:, 0]``, one classifier (``head``), no ``head_dist``."""
    dist_head = False

    def pool_tokens(self, x: torch.Tensor, patch_valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        return x[:, 0]
