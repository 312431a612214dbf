"""Which reference implementation runs a source, by format, at the source or the target geometry."""
from typing import Any, Callable, Dict, Optional, Tuple

import torch
import torch.nn as nn

from timm_vit_variants.errors import ViTVariantsError
from timm_vit_variants.memory import release_after_use

from ..extras import require

from .dinov2_ref import dinov2_outputs
from .dinov3_ref import dinov3_outputs, timm_eva_outputs
from .hf_ref import hf_outputs
from .npz_ref import npz_model
from .open_clip_ref import open_clip_outputs
from .ropevit_ref import ropevit_outputs
from .result import NoReference, Outputs, ReferenceFailed, first_line
from .streamed import trace_blocks
from .target import at_target
from .timm_ref import TimmReference, fit_input, timm_model

__all__ = ['reference_outputs', 'release_as_it_runs', 'require_reference']

# The references that are timm networks (the target check can rebuild those at another geometry).
_TIMM_BUILT: Dict[str, Callable[[str, Dict[str, Any]], TimmReference]] = {
    'timm': timm_model,
    'bigvision': npz_model,
    'vitjax': npz_model,
}


def require_reference(fmt: str) -> None:
    """Refuse, before any work, a check whose reference library is missing (transformers, for a transformers source).

    timm, the other references' library, is a dependency; transformers is the ``hf`` extra.
    """
    if fmt == 'hf':
        require('hf', 'verifying a transformers source', 'pass --no-verify to convert without the check')
    if fmt in ('openclip', 'openai'):
        require('clip', 'verifying an OpenCLIP or OpenAI CLIP source', 'pass --no-verify to convert without the check')


def release_as_it_runs(model: nn.Module) -> None:
    """Hand back the mapped weight pages of each of ``model``'s blocks once it has run (``memory.release_after_use``)."""
    blocks = getattr(model, 'blocks', None)
    if isinstance(blocks, nn.Sequential) and len(blocks):
        release_after_use(blocks)
    trace_blocks(model)  # streamed: each block's output compared as ours runs


def reference_outputs(
        path: str,
        fmt: str,
        model_args: Dict[str, Any],
        x: torch.Tensor,
        target: Optional[Tuple[Dict[str, Any], str]] = None,
        mixed: Optional[Dict[str, torch.Tensor]] = None,
) -> Outputs:
    """Run the source's reference implementation on ``x``.

    With ``target`` (target model args, resample rule) the reference runs at the target geometry, its
    weights resized by the source framework's own rule (``target.at_target``), or transformers' own
    resize. A reference that takes NaFlex batches also runs ``mixed`` (at the source geometry). Raises ``NoReference`` when none can run (with the reason), and ``ReferenceFailed`` when the
    reference library refuses or fails on the source.
    """
    try:
        if fmt == 'hf':
            return hf_outputs(path, model_args, x, target, mixed)
        if fmt in ('dinov2', 'dinov3', 'ropevit'):
            return {'dinov2': dinov2_outputs, 'dinov3': dinov3_outputs, 'ropevit': ropevit_outputs}[fmt](
                path, model_args, x, target)
        if fmt in ('openclip', 'openai'):
            return open_clip_outputs(path, fmt, model_args, x, target)
        if fmt == 'timm' and str(model_args.get('pos_embed')).endswith('rope'):  # timm's Eva ports of DINOv3, RoPE-ViT
            return timm_eva_outputs(path, model_args, x, target)
        if fmt not in _TIMM_BUILT:
            raise NoReference(f'no reference implementation for format {fmt!r}')
        ref = _TIMM_BUILT[fmt](path, model_args)
        if target is not None:
            ref = at_target(ref, model_args, target[0], target[1])
            x = fit_input(x, target[0])  # padded or cropped to whole patches, as our model does
        release_as_it_runs(ref.model)
        return ref.outputs(x, mixed if target is None else None)
    except (NoReference, ViTVariantsError):
        raise
    except Exception as e:  # noqa: BLE001  (reference libraries raise many types)
        raise ReferenceFailed(f'the reference implementation could not load or run the source: {first_line(e)}') \
            from None
