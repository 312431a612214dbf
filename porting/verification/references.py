"""Which reference implementation runs a source, by format, at the source or the target geometry.

Every reference is a function ``(check, x, mixed) -> Outputs``: it runs the source's file
(``check.path``) in the source framework's own code on the images ``x`` (at ``check.runs_at``'s size)
and, where it takes NaFlex batches and the check is at the source geometry, on ``mixed`` too; at a
target geometry (``check.target``) it resizes with the framework's own rule or raises ``NoReference``
saying why it has none. It reads the network's facts from ``check.source`` / ``check.target``
(``SimpleViTConfig``), never from loose dicts.

A new reference is one module beside the others (as ``dinov3_ref.py`` defines ``dinov3_outputs``)
plus one line in ``REFERENCES`` below naming the format it serves (``'dinov3': dinov3_outputs``). A
reference that is a timm network (it can then be rebuilt at a target geometry by ``target.at_target``)
registers the function that builds it instead: ``'fmt': timm_network(build)``, with
``build(path, config) -> TimmReference``.
"""
import functools
from typing import Callable, Dict, Optional

import torch
import torch.nn as nn

from timm_vit_variants.config import SimpleViTConfig
from timm_vit_variants.errors import first_line, reraised_as
from timm_vit_variants.memory import release_after_use
from timm_vit_variants.parts import Rope

from ..extras import require

from .beit_ref import beit_outputs, is_timm_beit_folder
from .deit3_ref import deit3_outputs
from .dinov2_ref import dinov2_outputs
from .dinov3_ref import dinov3_outputs, timm_eva_outputs
from .eva02_ref import eva02_outputs
from .hf_ref import hf_outputs, is_timm_wrapper_folder, timm_wrapper_outputs
from .npz_ref import npz_model
from .open_clip_ref import open_clip_outputs
from .ropevit_ref import ropevit_outputs
from .result import Check, NoReference, Outputs, ReferenceFailed
from .streamed import trace_blocks
from .target import at_target
from .timm_ref import TimmReference, fit_input, timm_model

__all__ = ['Reference', 'REFERENCES', 'timm_network', 'reference_outputs', 'release_as_it_runs', 'require_reference']

Reference = Callable[[Check, torch.Tensor, Optional[Dict[str, torch.Tensor]]], Outputs]


def release_as_it_runs(model: nn.Module) -> None:
    """Hand back the mapped weight pages of each of ``model``'s blocks once it has run (``memory.release_after_use``)."""
    blocks = getattr(model, 'blocks', None)
    if isinstance(blocks, nn.Sequential) and len(blocks):
        release_after_use(blocks)
    trace_blocks(model)  # streamed: each block's output compared as ours runs


def timm_network(build: Callable[[str, SimpleViTConfig], TimmReference]) -> Reference:
    """The reference of a source that ``build`` loads into a timm network: run as built at the source geometry, or
    rebuilt at the target one by the source framework's own resize rule (``target.at_target``)."""
    def outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]]) -> Outputs:
        ref = build(check.path, check.source)
        if check.target is not None:
            ref, mixed = at_target(ref, check), None
            x = fit_input(x, check.target)  # padded or cropped to whole patches, as our model does
        release_as_it_runs(ref.model)
        return ref.outputs(x, mixed)
    return outputs


def _timm_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]]) -> Outputs:
    """timm's VisionTransformer, its Beit for its beit* folders, or its Eva for the rotary ports (DINOv3, RoPE-ViT),
    which that cannot express; a folder transformers' TimmWrapperModel saved runs as that class."""
    if is_timm_wrapper_folder(check.path):
        require('hf', 'verifying a transformers TimmWrapperModel folder',
                'pass --no-verify to convert without the check')
        return timm_wrapper_outputs(check, x, mixed)
    if is_timm_beit_folder(check.path):
        return beit_outputs(check, x, mixed)
    if check.source.position(Rope) is not None:
        return timm_eva_outputs(check, x, mixed)
    build = functools.partial(timm_model, limits=check.limits, weights_key=check.weights_key)
    return timm_network(build)(check, x, mixed)


# format -> its reference: the one registration line each reference module needs.
REFERENCES: Dict[str, Reference] = {
    'timm': _timm_outputs,
    'bigvision': timm_network(npz_model),
    'vitjax': timm_network(npz_model),
    'hf': hf_outputs,
    'dinov2': dinov2_outputs,
    'dinov3': dinov3_outputs,
    'ropevit': ropevit_outputs,
    'deit3': deit3_outputs,
    'openclip': open_clip_outputs,
    'openai': open_clip_outputs,
    'eva02': eva02_outputs,
    'beit': beit_outputs,
}


def require_reference(fmt: str) -> None:
    """Refuse, before any work, a check whose reference library is missing (transformers, for a transformers source).

    timm, the other references' library, is a dependency; transformers is the ``hf`` extra.
    """
    if fmt == 'hf':
        require('hf', 'verifying a transformers source', 'pass --no-verify to convert without the check')
    if fmt in ('openclip', 'openai'):
        require('clip', 'verifying an OpenCLIP or OpenAI CLIP source', 'pass --no-verify to convert without the check')


def reference_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """Run the source's reference implementation for ``check`` on ``x`` (and ``mixed``, where it takes one).

    Raises ``NoReference`` when none can run (with the reason), and ``ReferenceFailed`` when the reference
    library refuses or fails on the source.
    """
    if check.format not in REFERENCES:
        raise NoReference(f'no reference implementation for format {check.format!r}')
    def failed(error: Exception) -> ReferenceFailed:  # reference libraries raise many types
        return ReferenceFailed(f'the reference implementation could not load or run the source: {first_line(error)}')

    with reraised_as(failed, keep=(NoReference,)):
        return REFERENCES[check.format](check, x, mixed)
