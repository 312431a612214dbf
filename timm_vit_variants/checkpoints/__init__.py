"""Checkpoint readers: big_vision and vit_jax ``.npz``, timm files/Hub folders, transformers ViT folders.

``open_checkpoint`` gives a ``SourceCheckpoint`` (inferred ``model_args`` plus tensors streamed
in timm layout); ``load_into_model`` fits one into an existing SimpleVisionTransformer.
"""
import os
from typing import Any, Dict, Optional, Type

from ..errors import ViTVariantsError
from .bigvision import BigVisionCheckpoint
from .files import check_source
from .hf import HFCheckpoint
from .loader import load_into_model
from .sniff import detect_format
from .source import SourceCheckpoint
from .timm_format import TimmCheckpoint
from .vitjax import VitJaxCheckpoint

__all__ = ['FORMATS', 'HINTS', 'SourceCheckpoint', 'detect_format', 'open_checkpoint', 'load_into_model']

FORMATS = ('bigvision', 'vitjax', 'timm', 'hf')

# Facts a checkpoint may not record, supplied by the caller (CLI flags of the same name):
#   prefix     key prefix inside the file (npz: e.g. 'params/'; torch: stripped before mapping)
#   img_size   source image size, to split a non-square learned table into its grid
#   num_heads  attention heads (required for bare timm state dicts; checked against others)
#   act_layer  override the MLP activation (e.g. 'gelu' to match timm's exact-GELU AugReg port)
#   norm_eps   override the LayerNorm epsilon
#   pos_embed  'sincos' or 'none' when a checkpoint has no position table (default 'sincos')
#   use_ema    prefer EMA weights in timm training checkpoints (default True, as timm)
#   limits     ``timm_vit_variants.limits.Limits`` bounding what the file may claim (default DEFAULT_LIMITS)
HINTS = ('prefix', 'img_size', 'num_heads', 'act_layer', 'norm_eps', 'pos_embed', 'use_ema', 'limits')

_READERS: Dict[str, Type[SourceCheckpoint]] = {
    'bigvision': BigVisionCheckpoint,
    'vitjax': VitJaxCheckpoint,
    'timm': TimmCheckpoint,
    'hf': HFCheckpoint,
}


def open_checkpoint(path: 'str | os.PathLike', fmt: Optional[str] = None, **hints: Any) -> SourceCheckpoint:
    """Open a checkpoint file or folder; ``fmt`` skips detection, ``hints`` are listed in ``HINTS``."""
    unknown = sorted(set(hints) - set(HINTS))
    if unknown:
        raise TypeError(f'unknown checkpoint hint(s) {unknown}; expected some of {HINTS}')
    if hints.get('pos_embed') not in (None, 'sincos', 'none', 'learn'):
        raise ViTVariantsError(f"pos_embed hint must be 'sincos', 'none' or 'learn', got {hints['pos_embed']!r}")
    path = check_source(os.fspath(path))
    fmt = fmt or detect_format(path)
    if fmt not in _READERS:
        raise ViTVariantsError(f'unknown checkpoint format {fmt!r}; expected one of {FORMATS}', path=path)
    return _READERS[fmt](path, **{k: v for k, v in hints.items() if v is not None})
