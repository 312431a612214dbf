"""Which reference implementation runs a source, by format, at the source or the target geometry.

Every reference is a function ``(check, x, mixed) -> Outputs``: it runs the source's file
(``check.path``) in the source framework's own code on the images ``x`` (at ``check.runs_at``'s size)
and, where it takes NaFlex batches and the check is at the source geometry, on ``mixed`` too; at a
target geometry (``check.target``) it resizes with the framework's own rule or raises ``NoReference``
saying why it has none. It reads the network's facts from ``check.source`` / ``check.target``
(``SimpleViTConfig``), never from loose dicts.

Each family's porting module (``porting/families/<name>.py``) names its formats' references and the
libraries they need; ``REFERENCES`` is their union (``porting.families.registry``). A reference that
is a timm network registers ``networks.timm_network(build)``.
"""
from typing import Dict, Optional

import torch

from timm_vit_variants.errors import first_line, reraised_as

from ..extras import require
from ..families.registry import NEEDS, REFERENCES
from .networks import Reference
from .result import Check, NoReference, Outputs, ReferenceFailed

__all__ = ['Reference', 'REFERENCES', 'reference_outputs', 'require_reference']


def require_reference(fmt: str) -> None:
    """Refuse, before any work, a check whose reference library is missing (transformers, for a transformers source).

    timm, the other references' library, is a dependency; the rest are extras (``NEEDS``).
    """
    needs = NEEDS.get(fmt)
    if needs is not None:
        require(needs.extra, needs.what, 'pass --no-verify to convert without the check')


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
