"""Verification of a conversion's output: at the source geometry, and at the target one after a resize.

``verify_source`` runs while ``convert`` writes a folder; ``verify_folder`` checks a folder that exists
(``vit-port verify``), resized or re-headed ones included, against its source at the folder's own
geometry, with the resize rule the folder records. A fact the check shares with the reference it is
compared against (a head count the source does not record) is stated as a caveat, never hidden.
"""
import dataclasses
from pathlib import Path
from typing import List, Optional, Sequence, Union

import torch

from timm_vit_variants import SimpleVisionTransformer, SimpleViTConfig
from timm_vit_variants.checkpoints import SourceCheckpoint
from timm_vit_variants.clip_models import clip_tag_facts
from timm_vit_variants.limits import DEFAULT_LIMITS, Limits
from timm_vit_variants.parts import Learned

from ..hashing import source_sha256
from ..hub_folder import build_as_timm, folder_dtype, load_folder, read_config
from ..plan import ConversionPlan, make_plan, open_source
from ..constants import DEFAULT_TOL
from ..request import SourceOptions, TargetOptions
from ..sources import resolve_source
from .compare import compare
from .references import require_reference
from .result import Check, Verification
from .streamed import as_float32, loading, materialize, streaming_now

__all__ = ['verify_source', 'check_at_target', 'verify_folder', 'shared_caveats', 'cast_bound', 'dtype_note',
           'with_tag_facts', 'loads_as_written']


# Facts of the network a reference built from our own inference shares: a wrong value passes a check.
_SHARED = {'architecture': 'architecture', 'num_heads': 'head count', 'act_layer': 'activation', 'norm_eps': 'LayerNorm epsilon',
           'global_pool': 'pooling', 'in_chans': 'channel count', 'pos_embed_resample': 'table resize rule'}


def with_tag_facts(options: SourceOptions, tag: Optional[str]) -> SourceOptions:
    """``options`` with what a CLIP tag says and its lone weight file does not record (QuickGELU, the head count),
    each where the caller gave none; ``options`` as they are for no tag or another one."""
    facts = {k: v for k, v in clip_tag_facts(tag).items() if getattr(options, k) is None} if tag else {}
    return dataclasses.replace(options, **facts) if facts else options


def shared_caveats(src: SourceCheckpoint) -> List[str]:
    """What a check against a reference built from the same inferred facts cannot catch, one phrase each."""
    caveats = []
    for kind, facts in (('assumed', {f: v for f, (v, _) in src.assumed.items()}), ('given', src.given)):
        shared = [f'{label} {facts[f]!r}' for f, label in _SHARED.items() if f in facts]
        if shared:
            were = 'was' if len(shared) == 1 else 'were'
            listed = shared[0] if len(shared) == 1 else ', '.join(shared[:-1]) + ' and ' + shared[-1]
            caveats.append(f'the {listed} {were} {kind}, not read from the source (a wrong value would pass too)')
    return caveats


def loads_as_written(folder: Union[str, Path], expected: SimpleViTConfig, labels: Optional[Sequence[str]],
                     limits: Limits = DEFAULT_LIMITS) -> str:
    """'' when the network timm builds from ``folder`` (``local-dir:``, no kwargs) is ``expected`` in every
    architectural field (head, pooling, pre-logits included) with ``labels`` as its label names (those of a
    matching count); otherwise what differs, as the reason a check fails: a folder that loads as another model
    never passes, whatever the model in memory gave."""
    model, _ = build_as_timm(folder, limits)
    built, wanted = model.config.to_flat(), expected.to_flat()
    where = "the folder loads as another model than was converted (timm.create_model('local-dir:...', pretrained=True))"
    for name, value in wanted.items():
        if built.get(name) != value:
            return f'{where}: {name} {built.get(name)!r}, converted {value!r}'
    names = list(labels) if labels and len(labels) == expected.num_classes else []
    found = list(model.pretrained_cfg.get('label_names') or [])
    if found != names:
        return f'{where}: label names {found[:3]}... ({len(found)}), converted {names[:3]}... ({len(names)})'
    return ''


def verify_source(src: SourceCheckpoint, plan: ConversionPlan, folder: Optional[Path], tol: float,
                  progress: bool = False, tag: Optional[str] = None) -> Verification:
    """Compare with the source's reference implementation at the SOURCE geometry and, after a resize, at
    the TARGET geometry too.

    At the source geometry: without a resize or head change the written folder itself is checked
    (memory-mapped, so the reference and ours never both hold the weights in RAM); otherwise the
    source is loaded untransformed into a model at the source geometry. At the target geometry the
    written folder is checked against the source framework's own resize rule, implemented
    independently (``porting.verification.rules``); where no such rule exists, the result says so.
    """
    def build_source() -> torch.nn.Module:
        config = plan.source.replace(weight_init='skip')
        if not streaming_now():
            model = SimpleVisionTransformer(config)
            src.fill_into(model.state_dict())
            return model
        # streamed: float32 weights on a scratch mapping whose pages go back as they are filled, never on the heap
        model = materialize(SimpleVisionTransformer(config, device='meta'))
        with loading(model):
            src.fill_into(model.state_dict())
        model.init_non_persistent_buffers()
        return model

    if folder is not None:
        other = loads_as_written(folder, plan.target, None if plan.changes_head else src.label_names, src.limits)
        if other:
            return Verification('failed', tolerance=tol, reason=other)
    check = Check(src.path, src.format, plan.source, tag=tag, limits=src.limits, weights_key=src.weights_key)
    written = plan.is_identity and folder is not None
    if written:
        # run in float32, as the reference is; the limits the source was opened under (--limit included)
        result = compare(check, lambda: as_float32(load_folder(folder, src.limits)), cast_bound(plan, tol), progress)
        if plan.rounds and result.status != 'skipped':
            # the rounding bound hides small mistakes: the mapping itself is checked on the uncast source too
            exact = compare(check, build_source, tol, progress)
            result.notes.append(f'the conversion itself on the uncast source: {_figures(exact)} (tol {tol:g}) '
                                f'{exact.status}')
            if exact.status == 'failed':
                result.status = 'failed'
    else:
        result = compare(check, build_source, tol, progress)
    if result.status != 'skipped':
        result.notes.append(dtype_note(plan, cast_bound(plan, tol), written))
    if plan.is_identity or result.status == 'skipped':
        return result
    result.notes.append(f'verified at the source geometry before conversion; then applied: {plan.describe()}')
    if not plan.changes_geometry or folder is None:
        return result
    target = check_at_target(src, plan, folder, cast_bound(plan, tol), progress, tag)
    if target.status == 'skipped':
        result.notes.append(target.reason)
        return result
    result.notes.append(_target_line(plan, target))
    result.notes.extend(target.notes)
    if target.status == 'failed':
        result.status = 'failed'
    return result


# Unit roundoff of each dtype a cast may round to (half the spacing of numbers near 1).
_ROUNDOFF = {'bfloat16': 2.0 ** -9, 'float16': 2.0 ** -11, 'float32': 2.0 ** -24}
# The bound of a rounding cast in unit roundoffs: rounding timm-initialised ViT-S/16 and ViT-L/16 to bfloat16
# moved their outputs by 0.017-0.023 (about 10u), to float16 by 0.002-0.003; 64u leaves 5-10x headroom.
_CAST_GROWTH = 64


def cast_bound(plan: ConversionPlan, tol: float) -> float:
    """The verification bound for the written weights: ``tol``, or when the cast rounds the weights, the
    dtype's unit roundoff times ``_CAST_GROWTH`` (bfloat16 0.125, float16 0.03), if that is larger."""
    return max(tol, _CAST_GROWTH * _ROUNDOFF[plan.dtype]) if plan.rounds else tol


def dtype_note(plan: ConversionPlan, bound: float, checked: bool) -> str:
    """What the check says about dtypes: the source's, the written one, and the bound a rounding cast gets."""
    note = f'source {plan.source_dtype}'
    note += f', written as {plan.dtype}' if plan.dtype != plan.source_dtype else ''
    note += ', both run in float32'
    if plan.rounds and checked:
        note += f' (the cast rounds: bound {bound:g}, {_CAST_GROWTH}x the {plan.dtype} unit roundoff)'
    elif plan.rounds:
        note += f'; the {plan.dtype} output is checked at the target geometry (bound {bound:g}) where that check runs'
    return note


def _where(plan: ConversionPlan) -> str:
    return f'{plan.target.img_size[0]}x{plan.target.img_size[1]}, patch {plan.target.patch_size[0]}'


def _figures(result: Verification) -> str:
    return ', '.join(f'{label}={value:.2e}' for label, value in (
        (f'max|d{result.output}|', result.max_abs_logits), ('max|dfeatures|', result.max_abs_features))
        if value is not None) or (result.reason or '')


def _target_line(plan: ConversionPlan, target: Verification) -> str:
    figures = _figures(target)
    found = f'vs {target.reference}: {figures}' if target.reference else f': {target.reason}'
    return f'target geometry ({_where(plan)}) {target.status} {found}'


def check_at_target(src: SourceCheckpoint, plan: ConversionPlan, folder: Path, tol: float,
                    progress: bool = False, tag: Optional[str] = None) -> Verification:
    """The written folder at the target geometry against the reference rebuilt there by the framework's rule."""
    check = Check(src.path, src.format, plan.source, plan.target, plan.rule, compare_logits=not plan.changes_head,
                  tag=tag, limits=src.limits, weights_key=src.weights_key)
    target = compare(check, lambda: as_float32(load_folder(folder, src.limits)), tol, progress)
    if target.status == 'skipped':
        target.reason = f'the output at the target geometry ({_where(plan)}) was NOT checked: {target.reason}'
    return target


def verify_folder(source: Union[str, Path], folder: Union[str, Path], options: SourceOptions = SourceOptions(),
                  tol: float = DEFAULT_TOL, limits: Limits = DEFAULT_LIMITS, progress: bool = False) -> Verification:
    """Check a converted folder against its source, at the folder's own geometry and head.

    The folder's ``config.json`` says what it is; the source, read with ``options``, is planned to that
    target (image size, patch size, class count, the resize rule the folder records). A folder that is
    not that target network fails, naming the first difference. An unchanged geometry is checked at the
    source geometry; a resized one at its own, against the reference rebuilt there; a new head is left
    out of the comparison (features only). A folder whose ``config.json`` records another source's
    sha256 says so.
    """
    converted, raw = read_config(folder, limits)
    resolved = resolve_source(source, options.endpoint, options.token, progress, options.download_timeout,
                              options.stall_timeout)
    tag = str(source) if resolved.kind == 'tag' else None
    options = with_tag_facts(options, tag)
    with open_source(resolved.path, options, limits) as src:
        require_reference(src.format)
        rule = getattr(converted.position(Learned), 'resample', None) if src.config.position(Learned) else None
        plan = make_plan(src, TargetOptions(img_size=converted.img_size, patch_size=converted.patch_size,
                                            num_classes=converted.num_classes, resample_like=rule,
                                            dtype=folder_dtype(raw, folder)), limits)
        different = _first_difference(plan.target, converted, src)
        if different:
            return Verification('failed', tolerance=tol, reason=(
                f'{folder} is not this source converted: {different}'))
        other = loads_as_written(folder, plan.target, None if plan.changes_head else src.label_names, limits)
        if other:
            return Verification('failed', tolerance=tol, reason=other)
        bound = cast_bound(plan, tol)
        if plan.is_identity:
            result = compare(Check(src.path, src.format, plan.source, tag=tag, limits=limits,
                                   weights_key=src.weights_key),
                             lambda: as_float32(load_folder(folder, limits)), bound, progress)
        else:
            result = check_at_target(src, plan, Path(folder), bound, progress, tag)
        if result.status != 'skipped':
            result.notes.append(dtype_note(plan, bound, checked=True))
            if result.status != 'skipped':
                result.notes.insert(0, f'checked at the folder\'s geometry ({_where(plan)}; {plan.describe()})')
        result.caveats.extend(shared_caveats(src))
        recorded = (raw.get('conversion') or {}).get('source_sha256') if isinstance(raw.get('conversion'), dict) \
            else None
        if isinstance(recorded, str) and recorded != source_sha256(src.path):
            result.notes.append(f'the folder records another source (sha256 {recorded[:12]}...) than '
                                f'{resolved.label}')
    return result


def _first_difference(expected: SimpleViTConfig, found: SimpleViTConfig, src: SourceCheckpoint) -> str:
    """'field: source X, folder Y' for the first architectural field that differs ('' when none does)."""
    ours, theirs = expected.to_flat(), found.to_flat()
    for name in ours:
        if ours[name] != theirs.get(name):
            why = (f' (the source does not record it and {ours[name]!r} was assumed: give it if the folder is '
                   'right)') if name in src.assumed else ''
            return f'{name}: the source gives {ours[name]!r}, the folder has {theirs.get(name)!r}{why}'
    return ''
