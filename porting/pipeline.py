"""The conversion pipeline: source checkpoint -> verified ``simple_vit_*`` Hub folder.

1. open the source once with the readers (``timm_vit_variants.checkpoints``) and plan the target:
   its ``SimpleViTConfig`` and ``Geometry``, and what happens to the head;
2. lay out the target's safetensors files from a meta-device model and fill every tensor straight
   into its place in the mapped output, one plan item at a time; only the tensors a geometry change
   touches (kernel, position table, class token) go through ``geometry.fit_stream`` first;
3. write ``config.json``, verify against the source's reference implementation, write the model
   card, and rename the folder into place. The source's sha256 is computed beside all this.
"""
import hashlib
import mmap
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import torch

from timm_vit_variants import SimpleVisionTransformer, SimpleViTConfig, __version__, architecture_for
from timm_vit_variants.checkpoints import SourceCheckpoint, open_checkpoint
from timm_vit_variants.config import HEAD_KEYS, pair, resample_rule
from timm_vit_variants.errors import ViTVariantsError
from timm_vit_variants.geometry import Geometry, check_fit, fit_stream
from timm_vit_variants.limits import DEFAULT_LIMITS, Limits
from timm_vit_variants.memory import mapping_address, release_pages

from .hub_folder import CONFIG_FILE, SafetensorsWriter, load_folder, parse_size, write_card, write_config
from .output import atomic_folder, check_output
from .request import ConvertRequest, SourceOptions, TargetOptions
from .verification import Verification, compare

__all__ = ['ConversionPlan', 'ConvertResult', 'make_plan', 'open_source', 'convert', 'write_weights',
           'verify_source', 'source_sha256']


def open_source(path: Union[str, Path], options: SourceOptions = SourceOptions(),
                limits: Limits = DEFAULT_LIMITS) -> SourceCheckpoint:
    """Open a checkpoint with the readers, planned against the ``simple_vit`` layout."""
    return open_checkpoint(str(path), options.fmt, layout=SimpleVisionTransformer.state_layout, limits=limits,
                           **options.hints())


@dataclass(frozen=True)
class ConversionPlan:
    """The source and target of a conversion, decided before any tensor is read."""
    source_path: str
    source: SimpleViTConfig
    target: SimpleViTConfig
    source_geometry: Geometry
    target_geometry: Geometry

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
    def rule(self) -> str:
        return self.target_geometry.rule

    def describe(self) -> str:
        """One line saying which transformations the plan applies."""
        src, dst = self.source_geometry, self.target_geometry
        parts = []
        if src.patch != dst.patch:
            parts.append(f'patch {src.patch} -> {dst.patch} (PI-resize)')
        if src.grid != dst.grid:
            how = {'sincos': 'regenerated sin-cos', 'none': 'no position table'}.get(self.target.pos_table,
                                                                                    f'{self.rule} resample')
            parts.append(f'grid {src.grid} -> {dst.grid} ({how})')
        if self.changes_head:
            n = self.target.num_classes
            parts.append('head removed' if n == 0 else f'head {self.source.num_classes} -> {n} classes (zero-init)')
        return '; '.join(parts) if parts else 'no change'


def make_plan(src: SourceCheckpoint, target: TargetOptions = TargetOptions(),
              limits: Limits = DEFAULT_LIMITS) -> ConversionPlan:
    """The target for a request; unset options keep the source's values. Impossible requests raise."""
    source = src.config
    rule = resample_rule(target.resample_like or source.pos_embed_resample)
    target_img = pair(target.img_size, 'img_size') if target.img_size is not None else source.img_size
    target_patch = pair(target.patch_size, 'patch_size') if target.patch_size is not None else source.patch_size
    limits.check('img_size', max(*target_img, *target_patch), key='img_size')
    if target_img[0] < target_patch[0] or target_img[1] < target_patch[1]:
        raise ViTVariantsError(f'image size {target_img} is smaller than the patch size {target_patch}')
    if not source.dynamic_img_pad and (target_img[0] % target_patch[0] or target_img[1] % target_patch[1]):
        raise ViTVariantsError(f'image size {target_img} is not divisible by patch size {target_patch} and this model '
                               'does not pad (dynamic_img_pad=False)')
    classes = source.num_classes if target.num_classes is None else int(target.num_classes)
    if classes < 0:
        raise ViTVariantsError(f'the class count must be >= 0, got {classes}', key='num_classes')
    changes: Dict[str, Any] = dict(img_size=target_img, patch_size=target_patch, num_classes=classes)
    if source.pos_table == 'learn':
        changes['pos_embed_resample'] = rule
    config = source.replace(**changes).check_limits(limits)
    target_geometry = Geometry.of(config)
    check_fit(src.geometry, target_geometry)
    return ConversionPlan(src.path, source, config, src.geometry, target_geometry)


@dataclass
class ConvertResult:
    """Where the folder went and what was done to get it there."""
    out: Path
    plan: ConversionPlan
    verification: Verification
    source_sha256: str
    num_files: int

    def summary(self) -> str:
        line = str(self.out)
        if not self.plan.is_identity:
            line += f' ({self.plan.describe()})'
        return line


def _all_finite(tensor: torch.Tensor) -> bool:
    """No NaN or Inf, in one pass without a tensor-sized temporary (min/max propagate NaN)."""
    if not tensor.is_floating_point() or tensor.numel() == 0:
        return True
    low, high = tensor.aminmax()
    return bool(low.isfinite() and high.isfinite())


def write_weights(src: SourceCheckpoint, plan: ConversionPlan, folder: Path, max_shard_size: int,
                  progress: bool = False, allow_nonfinite: bool = False) -> int:
    """Fill the target's safetensors files in ``folder`` from the source; returns the file count.

    Every tensor is checked for NaN/Inf as it lands: the first offending key is refused, or with
    ``allow_nonfinite`` reported once as a warning.
    """
    from tqdm import tqdm

    specs = SimpleVisionTransformer.state_layout(plan.target)
    fitted = set(plan.target_geometry.fitted_keys) if plan.changes_geometry else set()
    nonfinite: List[str] = []

    def check(key: str, tensor: torch.Tensor) -> None:
        if not _all_finite(tensor):
            if not allow_nonfinite:
                raise ViTVariantsError('the weights hold NaN or Inf values; refusing to write them (pass '
                                       '--allow-nonfinite to convert anyway)', path=plan.source_path, key=key)
            nonfinite.append(key)

    writer = SafetensorsWriter(folder, specs, max_shard_size)
    try:
        pending: List[Tuple[str, torch.Tensor]] = []
        with tqdm(total=len(specs), desc='convert', unit='tensor', disable=not progress, leave=False) as bar:
            for item, keep in src.walk():
                if item.key in HEAD_KEYS and plan.changes_head:
                    continue  # replaced (zeros) or dropped below; never read
                if item.key in fitted:
                    pending.append((item.key, src.fill(item, torch.empty(item.shape), keep)))
                    continue
                if item.key not in writer.pending or writer.shape(item.key) != item.shape:
                    raise ViTVariantsError('source tensor has no place in the target model', path=plan.source_path,
                                           key=item.key)
                direct = src.direct(item)
                if direct is not None:  # the layout already matches: written from the source mapping itself
                    check(item.key, direct)
                    writer.write(item.key, direct)
                    del direct
                    src.release(item, keep)
                else:
                    check(item.key, src.fill(item, writer.slot(item.key), keep))
                    writer.done(item.key)
                bar.update(1)
            for key, tensor in fit_stream(pending, plan.source_geometry, plan.target_geometry):
                check(key, tensor)
                writer.write(key, tensor)
                bar.update(1)
            for key in sorted(writer.pending):
                if key not in HEAD_KEYS or not plan.changes_head:
                    raise ViTVariantsError('source has no tensor for this target key', path=plan.source_path, key=key)
                writer.slot(key).zero_()  # a new head starts at zero, as the family's init does
                writer.done(key)
                bar.update(1)
        writer.close()
    except BaseException:
        writer.abort()
        raise
    if nonfinite:
        warnings.warn(f'{plan.source_path}: {len(nonfinite)} tensor(s) hold NaN or Inf values, first {nonfinite[0]!r}; '
                      'written anyway (--allow-nonfinite)', stacklevel=2)
    return len(writer.files)


def verify_source(src: SourceCheckpoint, plan: ConversionPlan, folder: Optional[Path], tol: float,
                  progress: bool = False) -> Verification:
    """Compare with the source's reference implementation at the SOURCE geometry and, after a resize, at
    the TARGET geometry too.

    At the source geometry: without a resize or head change the written folder itself is checked
    (memory-mapped, so the reference and ours never both hold the weights in RAM); otherwise the
    source is loaded untransformed into a model at the source geometry. At the target geometry the
    written folder is checked against the source framework's own resize rule, implemented
    independently (``porting.verification.rules``); where no such rule exists, the result says so.
    """
    if plan.is_identity and folder is not None:
        def build() -> torch.nn.Module:
            return load_folder(folder)
    else:
        def build() -> torch.nn.Module:
            model = SimpleVisionTransformer(plan.source.replace(weight_init='skip'))
            src.fill_into(model.state_dict())
            return model
    result = compare(src.path, src.format, plan.source.to_dict(), build, tol, progress)
    if plan.is_identity or result.status == 'skipped':
        return result
    result.notes.append(f'verified at the source geometry before conversion; then applied: {plan.describe()}')
    if not plan.changes_geometry or folder is None:
        return result
    target = compare(src.path, src.format, plan.source.to_dict(), lambda: load_folder(folder), tol, progress,
                     target=(plan.target.to_dict(), plan.rule), compare_logits=not plan.changes_head)
    where = f'{plan.target.img_size[0]}x{plan.target.img_size[1]}, patch {plan.target.patch_size[0]}'
    if target.status == 'skipped':
        result.notes.append(f'the output at the target geometry ({where}) was NOT checked: {target.reason}')
        return result
    figures = ', '.join(f'{label}={value:.2e}' for label, value in (
        ('max|dlogits|', target.max_abs_logits), ('max|dfeatures|', target.max_abs_features)) if value is not None)
    found = f'vs {target.reference}: {figures}' if target.reference else f': {target.reason}'
    result.notes.append(f'target geometry ({where}) {target.status} {found}')
    result.notes.extend(target.notes)
    if target.status == 'failed':
        result.status = 'failed'
    return result


def source_sha256(path: Union[str, Path]) -> str:
    """sha256 of a file; for a folder, of every file in it (relative name, then bytes, sorted by name).

    Read through a mapping in large chunks whose pages are handed back as it goes, so hashing beside
    a conversion shares the page cache with it and adds nothing to resident memory.
    """
    path = Path(path)
    digest = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob('*') if p.is_file())
    chunk = 64 << 20
    for file in files:
        if path.is_dir():
            digest.update(str(file.relative_to(path)).encode('utf-8', 'surrogateescape') + b'\0')
        size = file.stat().st_size
        if size == 0:
            continue
        with open(file, 'rb') as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY) as mapped:
            address = mapping_address(mapped)
            for start in range(0, size, chunk):
                end = min(start + chunk, size)
                digest.update(memoryview(mapped)[start:end])
                release_pages(address + start, address + end)
    return digest.hexdigest()


def convert(source: Union[str, Path], out: Union[str, Path], request: Optional[ConvertRequest] = None,
            **options) -> ConvertResult:
    """Convert ``source`` into the Hub folder ``out``; nothing is left behind on failure.

    ``request`` says how (``porting.request.ConvertRequest``); or give its options as keywords named as
    the CLI options (``num_heads=12``, ``img_size=384``, ``overwrite=True``, ...). Raises
    ViTVariantsError for bad input, an unusable OUT and a failed verification.
    """
    if request is None:
        request = ConvertRequest.from_options(**options)
    elif options:
        raise TypeError('give either a ConvertRequest or keyword options, not both')
    output, limits = request.output, request.limits
    out_path = check_output(out, output.overwrite, sources=[source])
    shard_bytes = parse_size(output.max_shard_size)
    with open_source(source, request.source, limits) as src, ThreadPoolExecutor(max_workers=1) as hasher:
        plan = make_plan(src, request.target, limits)
        sha_future = hasher.submit(source_sha256, src.path)  # hashlib releases the GIL on large buffers
        labels = None if plan.changes_head else src.label_names
        data_cfg = src.data_config()
        license = output.license or data_cfg.pop('license', None)
        architecture = architecture_for(plan.target)
        with atomic_folder(out_path, output.overwrite, sources=[source]) as tmp:
            num_files = write_weights(src, plan, tmp, shard_bytes, request.progress, output.allow_nonfinite)
            write_config(tmp / CONFIG_FILE, plan.target, data_config=dict(data_cfg, license=license),
                         label_names=labels, architecture=architecture)
            if request.verify:
                verification = verify_source(src, plan, tmp, request.tol, request.progress)
            else:
                verification = Verification('skipped', reason='--no-verify was given',
                                            tolerance=request.tol)
            if verification.status == 'failed':
                raise ViTVariantsError(verification.summary(), path=src.path)
            sha256 = sha_future.result()
            conversion = {'source': Path(str(source)).name, 'source_format': src.format, 'source_sha256': sha256,
                          'converter': f'timm-vit-variants {__version__}',
                          'verification': verification.as_card_dict()}
            write_config(tmp / CONFIG_FILE, plan.target, data_config=dict(data_cfg, license=license),
                         label_names=labels, architecture=architecture, conversion=conversion)
            write_card(
                tmp, architecture=architecture, model_args=plan.target.to_dict(),
                num_classes=plan.target.num_classes,
                source={'path': str(source), 'format': src.format, 'sha256': sha256},
                conversion_command=output.command, verification=verification.as_card_dict(), license=license,
                base_model=output.base_model, datasets=list(output.datasets) or None,
                label_names=labels if labels and len(labels) == plan.target.num_classes else None)
    return ConvertResult(out_path, plan, verification, sha256, num_files)
