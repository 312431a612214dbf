"""The one comparison: the reference's outputs against ours on the same fixed inputs."""
from typing import Any, Callable, Dict, Optional, Tuple

import torch
import torch.nn as nn

from timm_vit_variants.memory import trim_heap

from .naflex_ref import MIXED_GRIDS, mixed_batch
from .references import reference_outputs, release_as_it_runs
from .result import DEFAULT_TOL, NoReference, ReferenceFailed, Verification
from .timm_ref import pair

__all__ = ['verification_inputs', 'compare']


def verification_inputs(model_args: Dict[str, Any], batch: int = 1, seed: int = 0) -> torch.Tensor:
    """Fixed random images at a geometry's nominal image size."""
    h, w = pair(model_args.get('img_size', 224))
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(batch, model_args.get('in_chans', 3), h, w, generator=generator)


def takes_naflex_dict(model_args: Dict[str, Any]) -> bool:
    """Whether the model of ``model_args`` takes timm's NaFlex dict (its patch embedding sees one patch at a time)."""
    return model_args.get('patch_embed', 'conv') in ('conv', 'linear', 'mlp') and model_args.get('grid_mode') != 'pool'


def _mixed_outputs(model: nn.Module, batch: Dict[str, torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
    """Our valid patch tokens (T, D) and pooled output on a NaFlex batch."""
    laid = model.forward_features(batch)
    return laid['patches'][:, model.num_prefix_tokens:][laid['patch_valid']], model.forward_head(laid, pre_logits=True)


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.float() - b.float()).abs().max().item()


def compare(
        path: str,
        fmt: str,
        model_args: Dict[str, Any],
        build_ours: Callable[[], nn.Module],
        tol: float = DEFAULT_TOL,
        progress: bool = False,
        target: Optional[Tuple[Dict[str, Any], str]] = None,
        compare_logits: bool = True,
) -> Verification:
    """Reference first (then freed), then ours, so both networks are never in memory together.

    ``target`` (target model args, resample rule) compares at the target geometry instead (see
    ``reference_outputs``); ``compare_logits=False`` leaves logits out (a new, zero head). A reference
    that cannot load or run the source makes the check fail; one that does not exist skips it.
    """
    from tqdm import tqdm

    x = verification_inputs(target[0] if target is not None else model_args)
    mixed = mixed_batch(model_args) if target is None and takes_naflex_dict(model_args) else None
    with tqdm(total=2, desc='verify', unit='model', disable=not progress, leave=False) as bar:
        try:
            ref = reference_outputs(path, fmt, model_args, x, target, mixed)
        except NoReference as e:
            return Verification('skipped', reason=str(e), tolerance=tol)
        except ReferenceFailed as e:
            return Verification('failed', tolerance=tol, reason=str(e))
        trim_heap()
        bar.update(1)
        ours = build_ours().eval()
        release_as_it_runs(ours)
        has_pre_logits = not isinstance(ours.pre_logits, nn.Identity)
        output = 'logits' if ours.num_classes else 'embedding'
        with torch.no_grad():
            feats = ours.forward_features(x)
            # the classifier's logits, or without one the pooled embedding (a MAP head's, a pre-logits layer's)
            head_out = ours.forward_head(feats) if compare_logits and ref.logits is not None else None
            pre_logits = ours.forward_head(feats, pre_logits=True) if ref.pre_logits is not None else None
            mixed_out = _mixed_outputs(ours, mixed) if ref.mixed_features is not None else None
        del ours
        trim_heap()
        bar.update(1)
    if ref.features is None or tuple(ref.features.shape) != tuple(feats.shape):
        return Verification('failed', reference=ref.name, tolerance=tol, output=output, reason=(
            f'feature shapes differ: reference {tuple(ref.features.shape) if ref.features is not None else None} '
            f'vs ours {tuple(feats.shape)}'))
    d_feat = _max_diff(ref.features, feats)
    d_logit = None
    notes = [ref.note] if ref.note else []
    if head_out is not None:
        if ref.logits.shape != head_out.shape:
            return Verification('failed', reference=ref.name, tolerance=tol, max_abs_features=d_feat, output=output,
                                reason=f'{output} shapes differ: {tuple(ref.logits.shape)} vs {tuple(head_out.shape)}')
        d_logit = _max_diff(ref.logits, head_out)
    elif ref.logits is not None:
        notes.append('logits not compared: the output has a new, zero-initialised head')
    elif output == 'logits' and ref.pre_logits is None:
        notes.append('logits not compared: the reference has no classifier')
    d_pre = None
    if pre_logits is not None:
        d_pre = _max_diff(ref.pre_logits, pre_logits)
        notes.append(f'pre-logits (pooler output) max|d|={d_pre:.2e}')
    elif has_pre_logits and d_logit is None:
        notes.append('the pre-logits layer was not covered: neither logits nor pooled output were compared')
    d_mixed = None
    if mixed_out is not None:
        d_mixed = max(_max_diff(ref.mixed_features, mixed_out[0]), _max_diff(ref.mixed_pooled, mixed_out[1]))
        grids = ', '.join(f'{h}x{w}' for h, w in MIXED_GRIDS)
        notes.append(f'a NaFlex batch of grids {grids} (padded): max|d| of tokens and pooled={d_mixed:.2e}')
    worst = max(d for d in (d_feat, d_logit, d_pre, d_mixed) if d is not None)
    status = 'passed' if worst <= tol else 'failed'  # NaN compares False: a NaN output fails
    return Verification(status, reference=ref.name, max_abs_logits=d_logit, max_abs_features=d_feat,
                        tolerance=tol, notes=notes, output=output)
