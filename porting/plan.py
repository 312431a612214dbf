"""What a conversion will do, decided before any tensor is read: the source opened once, and the target it becomes."""
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional, Union

import torch

from timm_vit_variants import SimpleVisionTransformer, SimpleViTConfig
from timm_vit_variants.checkpoints import SourceCheckpoint, open_checkpoint
from timm_vit_variants.config import pair, resample_rule
from timm_vit_variants.errors import ViTVariantsError
from timm_vit_variants.geometry import Geometry, check_fit
from timm_vit_variants.limits import DEFAULT_LIMITS, Limits
from timm_vit_variants.parts import Learned, RelPos, SinCos
from timm_vit_variants.relpos_resize import require_square

from .hub_folder import DTYPES_BY_NAME
from .request import SourceOptions, TargetOptions

__all__ = ['open_source', 'ConversionPlan', 'make_plan', 'OUTPUT_DTYPES', 'source_dtype', 'output_dtype']

# What ``--dtype`` may ask for: 'source' keeps the source's own dtype (the CLI's choices mirror this).
OUTPUT_DTYPES = ('source', 'float32', 'bfloat16', 'float16')
_HALF = ('bfloat16', 'float16')


def source_dtype(src: SourceCheckpoint) -> str:
    """The dtype of the weights the conversion reads: 'float32', 'bfloat16', 'float16' or 'float64'; a mixed
    source as 'bfloat16+float32' (float32 beside one half dtype, as mixed-precision saves keep norms and biases).

    Refused: both half dtypes in one file, and float64 beside a half dtype, which no framework writes.
    """
    stored = {name: dtype for name, _, dtype in src.inventory()}
    counts = Counter(stored[name] for item in src.plan for name in item.sources)
    kinds = sorted(counts)
    if len(kinds) == 1:
        return kinds[0]
    halves = [k for k in kinds if k in _HALF]
    if len(halves) == 1 and set(kinds) == {halves[0], 'float32'}:
        return f'{halves[0]}+float32'
    first = {k: next(name for item in src.plan for name in item.sources if stored[name] == k) for k in kinds}
    odd = min(kinds, key=lambda k: counts[k])
    raise ViTVariantsError(
        'the weights mix ' + ', '.join(f'{counts[k]} {k}' for k in kinds) + ' tensors, which no framework writes '
        '(a checkpoint holds one float dtype, or float32 beside one half dtype)', path=src.path, key=first[odd])


def output_dtype(requested: Optional[str], source: str) -> str:
    """The dtype written for ``--dtype requested`` from a ``source_dtype``.

    'source' keeps the source's values exactly: a mixed source and float64 (which timm's models do not hold)
    are written as float32.
    """
    requested = requested or 'source'
    if requested not in OUTPUT_DTYPES:
        raise ViTVariantsError(f'dtype must be one of {", ".join(OUTPUT_DTYPES)}, got {requested!r}', key='dtype')
    if requested != 'source':
        return requested
    return source if source in ('float32', *_HALF) else 'float32'



def open_source(path: Union[str, Path], options: SourceOptions = SourceOptions(),
                limits: Limits = DEFAULT_LIMITS) -> SourceCheckpoint:
    """Open a checkpoint with the readers, planned against the ``simple_vit`` layout."""
    return open_checkpoint(str(path), options.from_, layout=SimpleVisionTransformer.state_layout, limits=limits,
                           **options.hints())


@dataclass(frozen=True)
class ConversionPlan:
    """The source and target of a conversion, decided before any tensor is read."""
    source_path: str
    source: SimpleViTConfig
    target: SimpleViTConfig
    source_geometry: Geometry
    target_geometry: Geometry
    source_dtype: str = 'float32'
    dtype: str = 'float32'  # what is written

    @property
    def changes_geometry(self) -> bool:
        return self.source_geometry.changes(self.target_geometry)

    @property
    def changes_head(self) -> bool:
        return self.source.num_classes != self.target.num_classes

    @property
    def is_identity(self) -> bool:
        return not self.changes_geometry and not self.changes_head

    @property
    def rounds(self) -> bool:
        """Whether the written dtype rounds some source values (float32 -> bfloat16, bfloat16 -> float16, ...)."""
        widths = {'float64': 3, 'float32': 2, 'bfloat16': 1, 'float16': 1}
        return any(widths[part] > widths[self.dtype] or (part in _HALF and part != self.dtype != 'float32')
                   for part in self.source_dtype.split('+'))

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES_BY_NAME[self.dtype]

    @property
    def rule(self) -> str:
        return self.target_geometry.rule

    def describe(self) -> str:
        """One line saying which transformations the plan applies."""
        src, dst = self.source_geometry, self.target_geometry
        parts = []
        if src.patch != dst.patch:
            parts.append(f'patch {src.patch} -> {dst.patch} (PI-resize)')
        if src.grid != dst.grid:
            how = ('regenerated sin-cos' if self.target.position(SinCos) else f'{self.rule} resample'
                   if self.target.position(Learned) else 'no position table')
            if self.target.position(RelPos) is not None:
                how += f", relative-position tables by {self.target.position(RelPos).resample!r}"
            parts.append(f'grid {src.grid} -> {dst.grid} ({how})')
        if self.changes_head:
            n = self.target.num_classes
            parts.append('head removed' if n == 0 else f'head {self.source.num_classes} -> {n} classes (zero-init)')
        return '; '.join(parts) if parts else 'no change'


def make_plan(src: SourceCheckpoint, target: TargetOptions = TargetOptions(),
              limits: Limits = DEFAULT_LIMITS) -> ConversionPlan:
    """The target for a request; unset options keep the source's values. Impossible requests raise."""
    source = src.config
    rule = resample_rule(target.resample_like or getattr(source.position(Learned), 'resample', Learned.resample))
    target_img = pair(target.img_size, 'img_size') if target.img_size is not None else source.img_size
    target_patch = pair(target.patch_size, 'patch_size') if target.patch_size is not None else source.patch_size
    limits.check('img_size', max(*target_img, *target_patch), key='img_size')
    if target_img[0] < target_patch[0] or target_img[1] < target_patch[1]:
        raise ViTVariantsError(f'image size {target_img} is smaller than the patch size {target_patch}')
    if source.grid_mode == 'strict' and (target_img[0] % target_patch[0] or target_img[1] % target_patch[1]):
        raise ViTVariantsError(f'image size {target_img} is not divisible by patch size {target_patch} and this model '
                               "neither pads nor crops (grid_mode='strict', the older dynamic_img_pad=False)")
    classes = source.num_classes if target.num_classes is None else int(target.num_classes)
    if classes < 0:
        raise ViTVariantsError(f'the class count must be >= 0, got {classes}', key='num_classes')
    changes: Dict[str, Any] = dict(img_size=target_img, patch_size=target_patch, num_classes=classes)
    if source.position(Learned) is not None:
        changes['pos_embed_resample'] = rule
    if source.position(RelPos) and target.resample_like == 'timm':  # relative-position tables by timm's linear rule too
        changes['rel_pos_resample'] = 'timm'
    config = source.replace(**changes).check_limits(limits)
    if getattr(config.position(RelPos), 'resample', None) == 'beit':  # refused before any tensor is read
        require_square(source.grid_size, config.grid_size, path=src.path)
    target_geometry = Geometry.of(config)
    check_fit(src.geometry, target_geometry, limits)
    stored = source_dtype(src)
    return ConversionPlan(src.path, source, config, src.geometry, target_geometry, stored,
                          output_dtype(target.dtype, stored))
