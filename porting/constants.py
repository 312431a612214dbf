"""The porting tool's defaults and choice lists, written once, in a leaf module that imports nothing heavy.

The command line builds every parser from these without torch or timm (``vit-port --help``), and the
request builder (``porting.request``) and the exporter (``porting.export``) take their defaults from
here. The choice lists mirror constants of ``timm_vit_variants`` (which imports torch); a test keeps
them equal (``tests/test_architecture.py``). The ``*_problem`` functions say what is wrong with a value
in words, so the parser's refusal (a usage error) and the library's (``ViTVariantsError``) are one text.
"""
from typing import Any, Optional

__all__ = [
    'DEFAULT_TOL', 'DEFAULT_OPSET', 'ONNX_OPSETS', 'EXPORT_FORMATS', 'ACT_LAYERS',
    'DTYPES', 'INTERPOLATIONS', 'CROP_MODES', 'LIMIT_NAMES', 'opset_problem', 'fraction_problem',
]

# Verification tolerance on max |delta| of logits and features, float32.
DEFAULT_TOL = 1e-4
# 18: the lowest opset the dynamo exporter writes, and the first with an antialiased Resize; 23: the highest
# torch 2.14's exporter writes (torch.onnx._constants.ONNX_MAX_OPSET).
DEFAULT_OPSET = 18
ONNX_OPSETS = range(DEFAULT_OPSET, 24)
EXPORT_FORMATS = ('onnx', 'pt2')

# Mirrors of timm_vit_variants: config.ACT_LAYERS, limits.Limits' fields; DTYPES is porting.plan.OUTPUT_DTYPES. The
# source formats and resample rules are the families' (``porting.families.registry``).
ACT_LAYERS = ('gelu', 'gelu_tanh', 'quick_gelu', 'silu', 'relu')
DTYPES = ('source', 'float32', 'bfloat16', 'float16')
# The eval-transform choices the CLI offers (a subset of checkpoints.preprocessing's INTERPOLATIONS).
INTERPOLATIONS = ('bilinear', 'bicubic', 'nearest', 'lanczos')
CROP_MODES = ('center', 'squash', 'border')
LIMIT_NAMES = ('depth', 'width', 'mlp', 'heads', 'classes', 'img_size', 'tokens', 'tensor_bytes', 'rel_pos_bytes',
               'json_bytes', 'inflate_ratio')


def opset_problem(opset: Any) -> Optional[str]:
    """Why ``opset`` cannot be exported to (None when it can)."""
    if opset in ONNX_OPSETS and not isinstance(opset, bool):
        return None
    return (f'opset {opset} is not supported: the dynamo exporter writes opsets {ONNX_OPSETS.start} to '
            f'{ONNX_OPSETS.stop - 1}')


def fraction_problem(value: Any) -> Optional[str]:
    """Why ``value`` is not a fraction in (0, 1], such as a crop fraction (None when it is)."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return None if number and 0 < value <= 1 else f'expected a number in (0, 1], got {value!r}'
