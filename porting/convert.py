"""The conversion pipeline: source checkpoint -> verified ``simple_vit_*`` Hub folder.

1. open the source with the readers (``timm_vit_variants.checkpoints``) and plan the target
   geometry (``porting.transforms``);
2. lay out the target's safetensors files from a meta-device model, then stream the source
   tensor by tensor through the plan straight to disk (one tensor in memory at a time);
3. write timm's ``config.json``, verify against the source's reference implementation at the
   source geometry, write the model card, and rename the folder into place.
"""
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

from timm_vit_variants.checkpoints.files import check_source
from timm_vit_variants.errors import ViTVariantsError
from timm_vit_variants.limits import DEFAULT_LIMITS, Limits

from .hub_config import architecture_for, source_pretrained_cfg, write_config
from .loading import build_empty, fill_model, load_folder
from .shards import ShardedSafetensorsWriter, parse_size
from .transforms import ConversionPlan, make_plan
from .verify import DEFAULT_TOL, Verification, compare
from .output import atomic_folder, check_output
from .writer import DEFAULT_MAX_SHARD_SIZE, file_sha256, tensor_specs, write_card

__all__ = [
    'ConvertResult', 'convert', 'open_source', 'source_model_args', 'source_label_names', 'write_weights', 'verify_source',
]


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


def open_source(path: Union[str, Path], fmt: Optional[str] = None, **hints: Any):
    """Open a checkpoint with the readers; missing files and unknown formats become ViTVariantsError."""
    from timm_vit_variants.checkpoints import FORMATS, open_checkpoint

    if fmt is not None and fmt not in FORMATS:
        raise ViTVariantsError(f'unknown format {fmt!r}; expected one of {list(FORMATS)}', path=str(path))
    return open_checkpoint(check_source(str(path)), fmt=fmt, **{k: v for k, v in hints.items() if v is not None})


# Constructor settings no tensor records; a simple_vit Hub folder's config.json keeps them.
_CONFIG_ONLY_ARGS = ('dynamic_img_pad', 'sincos_temperature')


def source_model_args(src: Any) -> Dict[str, Any]:
    """The reader's model_args, plus config-only settings of a simple_vit folder the reader left out."""
    args = dict(src.model_args)
    saved = (src.source_config or {}).get('model_args') or {}
    if str((src.source_config or {}).get('architecture', '')).startswith('simple_vit'):
        args.update({k: saved[k] for k in _CONFIG_ONLY_ARGS if k in saved and k not in args})
    return args


def source_label_names(src: Any) -> Optional[List[str]]:
    """Class names from the reader, or from a timm Hub folder's ``config.json`` (list form only)."""
    if src.label_names:
        return list(src.label_names)
    names = (src.source_config or {}).get('label_names')
    return [str(n) for n in names] if isinstance(names, (list, tuple)) else None


def write_weights(src: Any, plan: ConversionPlan, folder: Path, max_shard_size: int, progress: bool = False,
                  allow_nonfinite: bool = False) -> int:
    """Stream the source through the plan into safetensors files in ``folder``; returns the file count.

    Every tensor is checked for NaN/Inf on the way: the first offending key is refused, or with
    ``allow_nonfinite`` reported once as a warning.
    """
    from tqdm import tqdm

    nonfinite: List[str] = []

    specs = tensor_specs(plan.target_args)
    writer = ShardedSafetensorsWriter(folder, specs, max_shard_size)
    try:
        with tqdm(total=len(specs), desc='convert', unit='tensor', disable=not progress, leave=False) as bar:
            for key, tensor in src.iter_tensors():
                out = plan.transform(key, tensor)
                del tensor
                if out is None:
                    continue
                if key not in writer.where:
                    raise ViTVariantsError('source tensor has no place in the target model', path=plan.source_path,
                                           key=key)
                if not _all_finite(out):
                    if not allow_nonfinite:
                        raise ViTVariantsError('the weights hold NaN or Inf values; refusing to write them (pass '
                                               '--allow-nonfinite to convert anyway)', path=plan.source_path, key=key)
                    nonfinite.append(key)
                writer.write(key, out)
                bar.update(1)
            for key in sorted(writer.pending):
                filler = plan.head_fill(key, writer.expected[key][0])
                if filler is None:
                    raise ViTVariantsError('source has no tensor for this target key', path=plan.source_path, key=key)
                writer.write(key, filler)
                bar.update(1)
        writer.close()
    except BaseException:
        writer.abort()
        raise
    if nonfinite:
        warnings.warn(f'{plan.source_path}: {len(nonfinite)} tensor(s) hold NaN or Inf values, first {nonfinite[0]!r}; '
                      'written anyway (--allow-nonfinite)', stacklevel=2)
    return len(writer.files)


def _all_finite(tensor) -> bool:
    """No NaN or Inf, in one pass without a tensor-sized temporary (min/max propagate NaN)."""
    if not tensor.is_floating_point() or tensor.numel() == 0:
        return True
    low, high = tensor.aminmax()
    return bool(low.isfinite() and high.isfinite())


def verify_source(src: Any, plan: ConversionPlan, folder: Optional[Path], tol: float,
                  progress: bool = False) -> Verification:
    """Compare the source's reference implementation with our model at the SOURCE geometry.

    Without a resize or head change the written folder itself is checked; otherwise the same
    reader stream is loaded untransformed into a model at the source geometry, and the result
    notes that the change was applied after verification.
    """
    if plan.is_identity and folder is not None:
        def build():
            return load_folder(folder)
    else:
        def build():
            model = build_empty(plan.source_args)
            fill_model(model, src.iter_tensors(), src.path)
            return model
    result = compare(src.path, src.format, plan.source_args, build, tol, progress)
    if not plan.is_identity and result.status != 'skipped':
        result.notes.append(f'verified at the source geometry before conversion; then applied: {plan.describe()}')
    return result


def convert(
        source: Union[str, Path],
        out: Union[str, Path],
        *,
        fmt: Optional[str] = None,
        img_size: Optional[Sequence[int]] = None,
        patch_size: Optional[Sequence[int]] = None,
        num_classes: Optional[int] = None,
        resample_like: Optional[str] = None,
        hints: Optional[Dict[str, Any]] = None,
        overwrite: bool = False,
        tol: float = DEFAULT_TOL,
        verify: bool = True,
        max_shard_size: Union[str, int] = DEFAULT_MAX_SHARD_SIZE,
        license: Optional[str] = None,
        base_model: Optional[str] = None,
        datasets: Optional[Sequence[str]] = None,
        command: Optional[str] = None,
        progress: bool = False,
        allow_nonfinite: bool = False,
        limits: Limits = DEFAULT_LIMITS,
) -> ConvertResult:
    """Convert ``source`` into the Hub folder ``out``; nothing is left behind on failure.

    ``hints`` go to the reader (e.g. ``num_heads``, ``img_size``; see ``checkpoints.HINTS``);
    ``limits`` bound what the source and the request may claim (``timm_vit_variants.limits``).

    Raises ViTVariantsError for bad input, an unusable OUT and a failed verification.
    """
    out_path = check_output(out, overwrite, sources=[source])
    shard_bytes = parse_size(max_shard_size)
    with open_source(source, fmt, **dict(hints or {}, limits=limits)) as src, \
            ThreadPoolExecutor(max_workers=1) as hasher:
        plan = make_plan(src.path, source_model_args(src), src.grid, img_size=img_size, patch_size=patch_size,
                         num_classes=num_classes, resample_like=resample_like, limits=limits)
        # Hashing is a full read of the source: run it beside the conversion (hashlib releases the GIL).
        sha_future = hasher.submit(file_sha256, src.path)
        labels = None if plan.changes_head else source_label_names(src)
        data_cfg = source_pretrained_cfg(src.format, src.path, src.source_config)
        license = license or data_cfg.pop('license', None)
        architecture = architecture_for(plan.target_args)
        with atomic_folder(out_path, overwrite, sources=[source]) as tmp:
            num_files = write_weights(src, plan, tmp, shard_bytes, progress, allow_nonfinite)
            write_config(tmp / 'config.json', plan.target_args, architecture=architecture, label_names=labels,
                         pretrained_cfg=dict(data_cfg, license=license))
            if verify:
                verification = verify_source(src, plan, tmp, tol, progress)
            else:
                verification = Verification('skipped', reason='--no-verify was given', tolerance=tol)
            if verification.status == 'failed':
                raise ViTVariantsError(verification.summary(), path=src.path)
            sha256 = sha_future.result()
            write_card(
                tmp, architecture=architecture, model_args=plan.target_args,
                num_classes=plan.target_args['num_classes'],
                source={'path': str(source), 'format': src.format, 'sha256': sha256},
                conversion_command=command, verification=verification.as_card_dict(), license=license,
                base_model=base_model, datasets=list(datasets) if datasets else None,
                label_names=list(labels) if labels and len(labels) == plan.target_args['num_classes'] else None)
    return ConvertResult(out_path, plan, verification, sha256, num_files)
