"""Per-tensor transformations that fit a source checkpoint to a requested target geometry.

The target is described by SimpleVisionTransformer constructor kwargs. Each source tensor is
transformed on its own, so a conversion never holds more than one tensor in flight:
  * ``patch_embed.proj.weight``: FlexiViT PI-resize when the patch size changes;
  * ``pos_embed`` (learned tables only): resampled with the chosen ecosystem's rule, cls slot kept;
  * ``head.*``: dropped for ``num_classes=0``, replaced by zeros when the class count changes.
A sin-cos table is not stored at all: the target model regenerates it for its own grid.
"""
from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence, Tuple

import torch

from timm_vit_variants.errors import ViTVariantsError
from timm_vit_variants.limits import DEFAULT_LIMITS, Limits
from timm_vit_variants.patch_embed import grid_size_for, pi_resize_patch_kernel
from timm_vit_variants.posemb import RESAMPLE_RULES, resample_pos_embed

from .hub_config import complete_args

__all__ = ['ConversionPlan', 'make_plan', 'pair']


def pair(value: Any) -> Tuple[int, int]:
    """An int or a 1/2-sequence as an (H, W) tuple of ints."""
    if isinstance(value, int):
        return value, value
    value = tuple(int(v) for v in value)
    if len(value) == 1:
        return value[0], value[0]
    if len(value) != 2:
        raise ViTVariantsError(f'expected one or two sizes (H W), got {value}')
    return value


@dataclass(frozen=True)
class ConversionPlan:
    """What to do with each source tensor; built once from the source description and the request."""
    source_path: str
    source_args: Dict[str, Any]
    target_args: Dict[str, Any]
    source_grid: Tuple[int, int]
    target_grid: Tuple[int, int]
    source_patch: Tuple[int, int]
    target_patch: Tuple[int, int]
    source_num_classes: int
    rule: str

    @property
    def changes_geometry(self) -> bool:
        return self.source_grid != self.target_grid or self.source_patch != self.target_patch

    @property
    def changes_head(self) -> bool:
        return self.source_num_classes != self.target_args['num_classes']

    @property
    def is_identity(self) -> bool:
        return not self.changes_geometry and not self.changes_head

    def describe(self) -> str:
        """One line saying which transformations the plan applies."""
        parts = []
        if self.source_patch != self.target_patch:
            parts.append(f'patch {self.source_patch} -> {self.target_patch} (PI-resize)')
        if self.source_grid != self.target_grid:
            how = 'regenerated sin-cos' if self.target_args.get('pos_embed') == 'sincos' else f'{self.rule} resample'
            if self.target_args.get('pos_embed') == 'none':
                how = 'no position table'
            parts.append(f'grid {self.source_grid} -> {self.target_grid} ({how})')
        if self.changes_head:
            n = self.target_args['num_classes']
            parts.append('head removed' if n == 0 else f'head {self.source_num_classes} -> {n} classes (zero-init)')
        return '; '.join(parts) if parts else 'no change'

    def transform(self, key: str, tensor: torch.Tensor) -> Optional[torch.Tensor]:
        """The target tensor for ``key``, or None when the target model has no such tensor."""
        if key == 'patch_embed.proj.weight' and tuple(tensor.shape[-2:]) != self.target_patch:
            return pi_resize_patch_kernel(tensor, self.target_patch)
        if key == 'pos_embed' and self.source_grid != self.target_grid:
            slots = 1 if self.target_args.get('pos_embed_cls_slot') and self.target_args.get('class_token') else 0
            expected = slots + self.source_grid[0] * self.source_grid[1]
            if tensor.ndim != 3 or tensor.shape[1] != expected:
                raise ViTVariantsError(
                    f'position table does not match the source grid {self.source_grid} (+{slots} prefix slot)',
                    path=self.source_path, key=key, shapes=(tensor.shape, (1, expected, tensor.shape[-1])))
            return resample_pos_embed(tensor, self.target_grid, self.source_grid, slots, self.rule)
        if key in ('head.weight', 'head.bias') and self.changes_head:
            num_classes = self.target_args['num_classes']
            if num_classes == 0:
                return None
            shape = (num_classes,) + tuple(tensor.shape[1:])
            return torch.zeros(shape, dtype=tensor.dtype)
        return tensor

    def head_fill(self, key: str, shape: Sequence[int]) -> Optional[torch.Tensor]:
        """A zero head tensor for a target head that the source lacks (e.g. a headless source)."""
        if key in ('head.weight', 'head.bias') and self.changes_head:
            return torch.zeros(tuple(shape), dtype=torch.float32)
        return None


def make_plan(
        source_path: str,
        source_args: Dict[str, Any],
        source_grid: Optional[Sequence[int]] = None,
        *,
        img_size: Optional[Sequence[int]] = None,
        patch_size: Optional[Sequence[int]] = None,
        num_classes: Optional[int] = None,
        resample_like: Optional[str] = None,
        limits: Limits = DEFAULT_LIMITS,
) -> ConversionPlan:
    """Target kwargs and per-tensor rules for a request; unset options keep the source's values.

    Raises ViTVariantsError for requests the target cannot satisfy (bad sizes, unknown rule).
    """
    src = dict(source_args)
    src_patch = pair(src.get('patch_size', 16))
    src_img = pair(src.get('img_size', 224))
    pad = bool(src.get('dynamic_img_pad', True))
    src_grid = pair(source_grid) if source_grid is not None else grid_size_for(src_img, src_patch, pad)

    rule = resample_like or src.get('pos_embed_resample', 'bigvision')
    if rule not in RESAMPLE_RULES:
        raise ViTVariantsError(f'unknown resample rule {rule!r}, expected one of {sorted(RESAMPLE_RULES)}')
    tgt_patch = pair(patch_size) if patch_size is not None else src_patch
    tgt_img = pair(img_size) if img_size is not None else src_img
    if min(tgt_patch) < 1 or min(tgt_img) < 1:
        raise ViTVariantsError(f'image size {tgt_img} and patch size {tgt_patch} must be positive')
    limits.check('img_size', max(tgt_img), key='img_size')
    limits.check('img_size', max(tgt_patch), key='patch_size')
    tgt_grid = grid_size_for(tgt_img, tgt_patch, pad)
    limits.check('tokens', tgt_grid[0] * tgt_grid[1], key='img_size')
    if tgt_img[0] < tgt_patch[0] or tgt_img[1] < tgt_patch[1]:
        raise ViTVariantsError(f'image size {tgt_img} is smaller than the patch size {tgt_patch}')
    if not pad and (tgt_img[0] % tgt_patch[0] or tgt_img[1] % tgt_patch[1]):
        raise ViTVariantsError(
            f'image size {tgt_img} is not divisible by patch size {tgt_patch} and this model does not pad '
            f'(dynamic_img_pad=False)')
    src_classes = int(src.get('num_classes', 0))
    tgt_classes = src_classes if num_classes is None else int(num_classes)
    if tgt_classes < 0:
        raise ViTVariantsError(f'--num-classes must be >= 0, got {tgt_classes}')
    limits.check('classes', tgt_classes, key='num_classes')

    tgt = dict(src, img_size=list(tgt_img), patch_size=list(tgt_patch), num_classes=tgt_classes)
    if tgt.get('pos_embed') == 'learn':
        tgt['pos_embed_resample'] = rule
    tgt['img_size'] = tgt_img[0] if tgt_img[0] == tgt_img[1] else list(tgt_img)
    tgt['patch_size'] = tgt_patch[0] if tgt_patch[0] == tgt_patch[1] else list(tgt_patch)
    return ConversionPlan(
        source_path=str(source_path),
        source_args=complete_args(src),
        target_args=complete_args(tgt),
        source_grid=src_grid,
        target_grid=tgt_grid,
        source_patch=src_patch,
        target_patch=tgt_patch,
        source_num_classes=src_classes,
        rule=rule,
    )
