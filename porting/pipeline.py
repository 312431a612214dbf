"""The conversion pipeline: source checkpoint -> verified ``simple_vit_*`` Hub folder.

1. open the source once with the readers and plan the target (``porting.plan``): its
   ``SimpleViTConfig`` and ``Geometry``, and what happens to the head;
2. lay out the target's safetensors files from a meta-device model and fill every tensor straight
   into its place in the mapped output, one plan item at a time; only the tensors a geometry change
   touches (kernel, position table, class token) go through ``geometry.fit_stream`` first;
3. write ``config.json``, verify against the source's reference implementation, write the model
   card, and rename the folder into place. The source's sha256 is computed beside all this.
"""
import dataclasses
import math
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import torch

from timm_vit_variants import SimpleVisionTransformer, __version__, architecture_for
from timm_vit_variants.checkpoints import SourceCheckpoint
from timm_vit_variants.config import HEAD_KEYS, PREPROCESSING_KEYS
from timm_vit_variants.errors import ViTVariantsError
from timm_vit_variants.geometry import fit_stream

from .hub_folder import CONFIG_FILE, parse_size, write_card, write_config
from .output import atomic_folder, check_output
from .hashing import source_sha256
from .plan import ConversionPlan, make_plan, open_source
from .request import ConvertRequest, SourceOptions, request_of
from .safetensors_writer import SINGLE_FILE, SafetensorsWriter
from .sources import resolve_source
from .verification import Verification
from .verification.conversion import loads_as_written, shared_caveats, verify_source, with_tag_facts
from .verification.open_clip_ref import check_tag_file
from .verification.references import require_reference
from .verification.streamed import memory_budget, run_bytes, streaming

__all__ = ['ConvertResult', 'convert', 'write_weights', 'source_sha256', 'preprocessing', 'all_finite', 'resize', 'sharded_note']


@dataclass
class ConvertResult:
    """Where the folder went, what was done to get it there, and what was assumed on the way."""
    out: Path
    plan: ConversionPlan
    verification: Verification
    source_sha256: str
    num_files: int
    assumed: Dict[str, Tuple[Any, str]] = field(default_factory=dict)
    notes: List[str] = field(default_factory=list)

    def summary(self) -> str:
        """The output path, then what changed: the geometry or head, and a source or written dtype other than float32."""
        parts = [] if self.plan.is_identity else [self.plan.describe()]
        source, written = self.plan.source_dtype, self.plan.dtype
        if source != 'float32' or written != 'float32':
            parts.append(f'{source} source' + (f', written as {written}' if written != source else ''))
        return str(self.out) + (f' ({"; ".join(parts)})' if parts else '')


def preprocessing(src: SourceCheckpoint, options: SourceOptions) -> Tuple[Dict[str, Any], Dict[str, Tuple[Any, str]]]:
    """(the data config to write, what of it was assumed): recorded by the source, given, else the ecosystem's."""
    given = {k: getattr(options, k) for k in PREPROCESSING_KEYS if getattr(options, k) is not None}
    for key in ('mean', 'std'):
        if key in given and len(given[key]) not in (1, src.config.in_chans):
            raise ViTVariantsError(f'{key} needs 1 or {src.config.in_chans} values (one per input channel), got '
                                   f'{len(given[key])}', key=key)
    recorded = src.data_config()
    assumed = {k: v for k, v in src.preprocessing_assumed(recorded).items() if k not in given}
    data = {**{k: v[0] for k, v in assumed.items()}, **recorded, **given}
    return data, assumed


def all_finite(tensor: torch.Tensor, written: Optional[torch.dtype] = None) -> bool:
    """No NaN or Inf, in one pass without a tensor-sized temporary (min/max propagate NaN), nor any once cast to
    ``written`` (a float32 value past float16's range becomes Inf)."""
    if not tensor.is_floating_point() or tensor.numel() == 0:
        return True
    extremes = torch.stack(tensor.aminmax())
    return bool(extremes.isfinite().all() and (written is None or extremes.to(written).isfinite().all()))


def check_half_range(src: SourceCheckpoint, plan: ConversionPlan) -> None:
    """Refuse, before any work, a float16 output of weights past float16's range, naming the first tensor.

    A pre-pass over the stored values, one tensor at a time (``stored_extremes``: no temporary, pages handed back):
    it reads the source once more, which a conversion that would fail at its verification after writing everything
    is worth. bfloat16 has float32's range, so only float16 is checked; a value within half a unit of its largest
    finite value rounds to it, not to Inf, as the cast does. A NaN or Inf already stored is left to the write's check.
    """
    if plan.dtype != 'float16' or plan.source_dtype == 'float16':
        return
    largest = torch.finfo(torch.float16).max
    seen = set()
    for item in src.plan:
        if item.key in HEAD_KEYS and plan.changes_head:
            continue  # replaced or dropped, never read
        for name in item.sources:
            if name in seen:
                continue
            seen.add(name)
            low, high = src.stored_extremes(name)
            worst = max(-low, high)
            if math.isfinite(worst) and not torch.tensor(worst).to(torch.float16).isfinite():
                raise ViTVariantsError(
                    f'--dtype float16 cannot hold this tensor: its values reach {low if -low > high else high:g}, '
                    f'past the largest finite float16 value {largest:g}, so the cast would write Inf; refusing '
                    'before any work (keep float32, or --dtype bfloat16, which has float32\'s range)',
                    path=plan.source_path, key=name)


def write_weights(src: SourceCheckpoint, plan: ConversionPlan, folder: Path, max_shard_size: int,
                  progress: bool = False, allow_nonfinite: bool = False) -> int:
    """Fill the target's safetensors files in ``folder`` from the source; returns the file count.

    Every tensor is checked for NaN/Inf as it lands, and for values the cast to the written dtype turns into Inf:
    the first offending key is refused, or with ``allow_nonfinite`` reported once as a warning.
    """
    from tqdm import tqdm

    # Laid out in the written dtype: each tensor is cast as it is copied into its place, never as a second copy.
    specs = [(key, shape, plan.torch_dtype) for key, shape, _ in SimpleVisionTransformer.state_layout(plan.target)]
    fitted = set(plan.target_geometry.fitted_keys) if plan.changes_geometry else set()
    nonfinite: List[str] = []

    def check(key: str, tensor: torch.Tensor) -> None:
        if not all_finite(tensor, plan.torch_dtype):  # a value the cast makes Inf is as bad as one stored
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
                    writer.write(item.key, direct, then=lambda item=item, keep=keep: src.release(item, keep))
                    del direct
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


def convert(source: Union[str, Path], out: Union[str, Path], request: Optional[ConvertRequest] = None,
            **options) -> ConvertResult:
    """Convert ``source`` into the Hub folder ``out``; nothing is left behind on failure.

    ``source`` is a local file or folder, a Hub id (``hf-hub:ORG/NAME[@REV]`` or ``ORG/NAME``), an ``https://``
    URL or a registered tag (``porting.sources``). ``request`` says how (``porting.request.ConvertRequest``); or
    give its options as keywords named as the CLI options (``num_heads=12``, ``img_size=384``, ``from_='timm'``,
    ``overwrite=True``, ...). Raises ViTVariantsError for bad input, an unusable OUT, a missing reference
    library (before any work) and a failed verification.
    """
    request = request_of(ConvertRequest, request, options)
    output, limits = request.output, request.limits
    check_output(out, output.overwrite, sources=[source])  # before any download
    resolved = resolve_source(source, request.source.endpoint, request.source.token, request.progress,
                              request.source.download_timeout, request.source.stall_timeout)
    tag = str(source) if resolved.kind == 'tag' else None
    request = dataclasses.replace(request, source=with_tag_facts(request.source, tag))
    out_path = check_output(out, output.overwrite, sources=[resolved.path])
    shard_bytes = parse_size(output.max_shard_size)
    with open_source(resolved.path, request.source, limits) as src, ThreadPoolExecutor(max_workers=1) as hasher:
        if request.verify:
            require_reference(src.format)
            check_tag_file(src.path, tag, src.format, {name: shape for name, shape, _ in src.inventory()})
        plan = make_plan(src, request.target, limits)
        check_half_range(src, plan)
        budget = memory_budget(request.memory_budget, SimpleVisionTransformer.state_layout(plan.source),
                               max(run_bytes(plan.source), run_bytes(plan.target)) if request.verify else 0)
        sha_future = hasher.submit(source_sha256, src.path)  # hashlib releases the GIL on large buffers
        labels = None if plan.changes_head else src.label_names
        data_cfg, assumed_data = preprocessing(src, request.source)
        assumed = {**src.assumed, **assumed_data}
        license = output.license or data_cfg.pop('license', None)
        architecture = architecture_for(plan.target)
        with atomic_folder(out_path, output.overwrite, sources=[resolved.path]) as tmp:
            num_files = write_weights(src, plan, tmp, shard_bytes, request.progress, output.allow_nonfinite)
            write_config(tmp / CONFIG_FILE, plan.target, data_config=dict(data_cfg, license=license),
                         label_names=labels, architecture=architecture, dtype=plan.dtype)
            if request.verify:
                with streaming(budget.streams) as stream:
                    verification = verify_source(src, plan, tmp, request.tol, request.progress, tag)
                verification.notes.append(budget.in_memory_note() if stream is None else
                                          stream.note(budget.budget, budget.need, budget.run))
                verification.caveats.extend(shared_caveats(src))
            else:
                verification = Verification('skipped', reason='--no-verify was given',
                                            tolerance=request.tol)
            if verification.status == 'failed':
                raise ViTVariantsError(verification.summary(), path=src.path)
            sha256 = sha_future.result()
            source_record = {'source': resolved.label, **{f'source_{k}': v for k, v in resolved.provenance.items()}}
            conversion = {**source_record, 'source_format': src.format, 'source_dtype': plan.source_dtype,
                          'dtype': plan.dtype, 'source_sha256': sha256,
                          'converter': f'timm-vit-variants {__version__}',
                          'assumed': {k: {'value': v, 'why': why} for k, (v, why) in assumed.items()},
                          'given': dict(src.given),
                          'verification': verification.as_card_dict()}
            write_config(tmp / CONFIG_FILE, plan.target, data_config=dict(data_cfg, license=license),
                         label_names=labels, architecture=architecture, conversion=conversion, dtype=plan.dtype)
            other = loads_as_written(tmp, plan.target, labels, limits) if request.verify else ''
            if other:  # the final config.json, the one the user loads, still builds the verified network
                raise ViTVariantsError(other, path=src.path)
            write_card(
                tmp, architecture=architecture, model_args=dict(plan.target.to_flat(), dtype=plan.dtype),
                num_classes=plan.target.num_classes,
                source={'name': resolved.label, **resolved.provenance, 'format': src.format,
                        'dtype': plan.source_dtype, 'sha256': sha256},
                conversion_command=output.command, verification=verification.as_card_dict(), license=license,
                base_model=output.base_model, datasets=list(output.datasets) or None,
                label_names=labels if labels and len(labels) == plan.target.num_classes else None,
                assumed=assumed)
    notes = list(src.notes)
    if num_files > 1:
        notes.append(sharded_note(out_path, num_files))
    return ConvertResult(out_path, plan, verification, sha256, num_files, assumed, notes)


def resize(source: Union[str, Path], out: Union[str, Path], request: Optional[ConvertRequest] = None,
           **options) -> ConvertResult:
    """Write the converted folder ``source`` again into ``out`` at a new image and/or patch size.

    The same pipeline as ``convert``, with the folder read as a timm-format source (so it is first checked
    against timm's own ``local-dir:`` loader): learned tables are resampled, sin-cos tables regenerated, the
    patchifier PI-resized. Options as for ``convert``; ``img_size`` and/or ``patch_size`` is required.
    """
    request = request_of(ConvertRequest, request, options)
    if request.target.img_size is None and request.target.patch_size is None:
        raise ViTVariantsError('resize needs a new image size and/or patch size (img_size=, patch_size=)')
    if not (Path(source) / CONFIG_FILE).is_file():
        raise ViTVariantsError('resize takes a converted folder with config.json; use "vit-port convert" '
                               'for checkpoint files', path=str(source))
    return convert(source, out, request.with_source(from_='timm'))


def sharded_note(folder: Path, num_files: int) -> str:
    """How to load a sharded folder, which timm's own loaders cannot read."""
    return (f'the weights are in {num_files} shards; timm\'s local-dir: and hf-hub: read only a single '
            f'{SINGLE_FILE}, so load this folder with vit_port.load_folder({str(folder)!r}), or convert again with a '
            '--max-shard-size above the model\'s size for one file')
