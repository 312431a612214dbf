"""Verification of a conversion's output: at the source geometry, and at the target one after a resize.

``verify_source`` runs while ``convert`` writes a folder; ``verify_folder`` checks a folder that exists
(``vit-port verify``), resized or re-headed ones included, against its source at the folder's own
geometry, with the resize rule the folder records. A fact the check shares with the reference it is
compared against (a head count the source does not record) is stated as a caveat, never hidden.
"""
from pathlib import Path
from typing import List, Optional, Union

import torch

from timm_vit_variants import SimpleVisionTransformer, SimpleViTConfig
from timm_vit_variants.checkpoints import SourceCheckpoint
from timm_vit_variants.limits import DEFAULT_LIMITS, Limits

from ..hashing import source_sha256
from ..hub_folder import load_folder, read_config
from ..plan import ConversionPlan, make_plan, open_source
from ..request import DEFAULT_TOL, SourceOptions, TargetOptions
from ..sources import resolve_source
from .compare import compare
from .references import require_reference
from .result import Verification

__all__ = ['verify_source', 'check_at_target', 'verify_folder', 'shared_caveats']


# Facts of the network a reference built from our own inference shares: a wrong value passes a check.
_SHARED = {'num_heads': 'head count', 'act_layer': 'activation', 'norm_eps': 'LayerNorm epsilon',
           'global_pool': 'pooling', 'in_chans': 'channel count', 'pos_embed_resample': 'table resize rule'}


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
            return load_folder(folder, src.limits)  # the limits the source was opened under (--limit included)
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
    target = check_at_target(src, plan, folder, tol, progress)
    if target.status == 'skipped':
        result.notes.append(target.reason)
        return result
    result.notes.append(_target_line(plan, target))
    result.notes.extend(target.notes)
    if target.status == 'failed':
        result.status = 'failed'
    return result


def _where(plan: ConversionPlan) -> str:
    return f'{plan.target.img_size[0]}x{plan.target.img_size[1]}, patch {plan.target.patch_size[0]}'


def _target_line(plan: ConversionPlan, target: Verification) -> str:
    figures = ', '.join(f'{label}={value:.2e}' for label, value in (
        (f'max|d{target.output}|', target.max_abs_logits), ('max|dfeatures|', target.max_abs_features))
        if value is not None)
    found = f'vs {target.reference}: {figures}' if target.reference else f': {target.reason}'
    return f'target geometry ({_where(plan)}) {target.status} {found}'


def check_at_target(src: SourceCheckpoint, plan: ConversionPlan, folder: Path, tol: float,
                    progress: bool = False) -> Verification:
    """The written folder at the target geometry against the reference rebuilt there by the framework's rule."""
    target = compare(src.path, src.format, plan.source.to_dict(), lambda: load_folder(folder, src.limits), tol,
                     progress, target=(plan.target.to_dict(), plan.rule), compare_logits=not plan.changes_head)
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
    with open_source(resolved.path, options, limits) as src:
        require_reference(src.format)
        rule = converted.pos_embed_resample if src.config.pos_table == 'learn' else None
        plan = make_plan(src, TargetOptions(img_size=converted.img_size, patch_size=converted.patch_size,
                                            num_classes=converted.num_classes, resample_like=rule), limits)
        different = _first_difference(plan.target, converted, src)
        if different:
            return Verification('failed', tolerance=tol, reason=(
                f'{folder} is not this source converted: {different}'))
        if plan.is_identity:
            result = compare(src.path, src.format, plan.source.to_dict(), lambda: load_folder(folder, limits), tol,
                             progress)
        else:
            result = check_at_target(src, plan, Path(folder), tol, progress)
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
    ours, theirs = expected.to_dict(), found.to_dict()
    for name in ours:
        if ours[name] != theirs.get(name):
            why = (f' (the source does not record it and {ours[name]!r} was assumed: give it if the folder is '
                   'right)') if name in src.assumed else ''
            return f'{name}: the source gives {ours[name]!r}, the folder has {theirs.get(name)!r}{why}'
    return ''
