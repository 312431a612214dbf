"""The comparison: each side's named outputs on the same fixed inputs, and ``deltas`` between them.

``compare`` runs the reference first (then frees it), then ours, so both networks are never in memory
together. ``deltas`` is the one measure of two sides' outputs, used here and by ``porting.export`` (the
written file against the eager model).
"""
from typing import Callable, Dict, Optional, Tuple

import torch
import torch.nn as nn

from timm_vit_variants.config import SimpleViTConfig
from timm_vit_variants.memory import trim_heap

from .naflex_ref import MIXED_GRIDS, mixed_batch
from .networks import release_as_it_runs
from .references import reference_outputs
from .result import DEFAULT_TOL, Check, NoReference, Outputs, ReferenceFailed, Verification

__all__ = ['verification_inputs', 'takes_naflex_dict', 'our_outputs', 'OutputsDiffer', 'deltas', 'compare']


def verification_inputs(config: SimpleViTConfig, batch: int = 1, seed: int = 0) -> torch.Tensor:
    """Fixed random images at a geometry's nominal image size."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(batch, config.in_chans, *config.img_size, generator=generator)


def takes_naflex_dict(config: SimpleViTConfig) -> bool:
    """Whether the model of ``config`` takes timm's NaFlex dict: its patch embedding sees one patch at a time, and
    its token grid follows the image (not pooled to the nominal one)."""
    return config.embeds_patches_alone and config.grid_mode != 'pool'


class OutputsDiffer(Exception):
    """The two sides gave an output of different shapes: no delta can be measured."""

    def __init__(self, name: str, reference: Tuple[int, ...], ours: Tuple[int, ...], found: Dict[str, float]) -> None:
        super().__init__(f'{name} shapes differ: reference {reference} vs ours {ours}')
        self.name, self.reference, self.ours, self.found = name, reference, ours, found  # found: the deltas before


def deltas(reference: Outputs, ours: Outputs) -> Dict[str, float]:
    """max |reference - ours| in float32 of every output both sides produced, by name (NaN stays NaN, and fails
    any bound); raises ``OutputsDiffer`` for the first output whose shapes differ (``Outputs``' field order)."""
    theirs, mine = reference.named(), ours.named()
    found = {}
    for name in (n for n in theirs if n in mine):
        if tuple(theirs[name].shape) != tuple(mine[name].shape):
            raise OutputsDiffer(name, tuple(theirs[name].shape), tuple(mine[name].shape), found)
        found[name] = (theirs[name].float() - mine[name].float()).abs().max().item()
    return found


def our_outputs(model: nn.Module, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]], wanted: Outputs,
                logits: bool = True) -> Outputs:
    """Our model's outputs that ``wanted`` (the reference's) has: final-norm tokens, the classifier's logits or
    pooled embedding (unless ``logits`` is False), the pre-logits output, and the valid tokens and pooled output
    on the NaFlex batch."""
    with torch.no_grad():
        feats = model.forward_features(x)
        ours = Outputs(feats, model.forward_head(feats) if logits and wanted.logits is not None else None, 'ours')
        if wanted.pre_logits is not None:
            ours.pre_logits = model.forward_head(feats, pre_logits=True)
        if wanted.mixed_features is not None and mixed is not None:
            laid = model.forward_features(mixed)
            ours.mixed_features = laid['patches'][:, model.num_prefix_tokens:][laid['patch_valid']]
            ours.mixed_pooled = model.forward_head(laid, pre_logits=True)
    return ours


def compare(check: Check, build_ours: Callable[[], nn.Module], tol: float = DEFAULT_TOL,
            progress: bool = False) -> Verification:
    """Run ``check``: the reference, then ours (``build_ours()``), on the same inputs; every delta recorded.

    A reference that cannot load or run the source makes the check fail; one that does not exist skips it.
    """
    from tqdm import tqdm

    x = verification_inputs(check.runs_at)
    mixed = mixed_batch(check.source) if check.target is None and takes_naflex_dict(check.source) else None
    with tqdm(total=2, desc='verify', unit='model', disable=not progress, leave=False) as bar:
        try:
            ref = reference_outputs(check, x, mixed)
        except NoReference as e:
            return Verification('skipped', reason=str(e), tolerance=tol)
        except ReferenceFailed as e:
            return Verification('failed', tolerance=tol, reason=str(e))
        trim_heap()
        bar.update(1)
        model = build_ours().eval()
        release_as_it_runs(model)
        has_pre_logits = not isinstance(model.pre_logits, nn.Identity)
        output = 'logits' if model.num_classes else 'embedding'
        ours = our_outputs(model, x, mixed, ref, logits=check.compare_logits)
        del model
        trim_heap()
        bar.update(1)
    return _verdict(ref, ours, tol, output, has_pre_logits)


def _verdict(ref: Outputs, ours: Outputs, tol: float, output: str, has_pre_logits: bool) -> Verification:
    """The ``Verification`` of two sides' outputs: every delta, the notes saying what was and was not compared."""
    if ref.features is None:
        return Verification('failed', reference=ref.name, tolerance=tol, output=output, reason=(
            f'feature shapes differ: reference None vs ours {tuple(ours.features.shape)}'))
    try:
        found = deltas(ref, ours)
    except OutputsDiffer as e:
        reason = f'feature shapes differ: reference {e.reference} vs ours {e.ours}' if e.name == 'features' else \
            f'{output if e.name == "logits" else e.name} shapes differ: {e.reference} vs {e.ours}'
        return Verification('failed', reference=ref.name, tolerance=tol, max_abs_features=e.found.get('features'),
                            output=output, reason=reason, deltas=e.found)
    notes = [ref.note] if ref.note else []
    if 'logits' not in found and ref.logits is not None:
        notes.append('logits not compared: the output has a new, zero-initialised head')
    elif 'logits' not in found and output == 'logits' and ref.pre_logits is None:
        notes.append('logits not compared: the reference has no classifier')
    if 'pre_logits' in found:
        notes.append(f'pre-logits (pooler output) max|d|={found["pre_logits"]:.2e}')
    elif has_pre_logits and 'logits' not in found:
        notes.append('the pre-logits layer was not covered: neither logits nor pooled output were compared')
    if 'mixed_features' in found:
        grids = ', '.join(f'{h}x{w}' for h, w in MIXED_GRIDS)
        notes.append(f'a NaFlex batch of grids {grids} (padded): max|d| of tokens and pooled='
                     f'{max(found["mixed_features"], found["mixed_pooled"]):.2e}')
    status = 'passed' if all(d <= tol for d in found.values()) else 'failed'  # NaN compares False: it fails
    return Verification(status, reference=ref.name, max_abs_logits=found.get('logits'),
                        max_abs_features=found['features'], tolerance=tol, notes=notes, output=output, deltas=found)
