"""Optional dependencies: which extra provides what, and one clear refusal, before any work, when one is missing.

The names mirror ``[project.optional-dependencies]`` in ``pyproject.toml`` (a test keeps them equal). Presence is
checked with ``importlib.util.find_spec``, so nothing heavy is imported to find out.
"""
import importlib.util
from typing import Dict, List, Tuple

from timm_vit_variants.errors import ViTVariantsError

__all__ = ['EXTRAS', 'missing', 'require']

# extra -> the modules it provides
EXTRAS: Dict[str, Tuple[str, ...]] = {
    'onnx': ('onnx', 'onnxscript', 'onnxruntime'),
    'plot': ('matplotlib',),
    'hf': ('transformers',),
    'clip': ('open_clip',),
    'beit': ('scipy',),
}


def missing(extra: str) -> List[str]:
    """The modules of ``extra`` that cannot be imported here."""
    return [m for m in EXTRAS[extra] if importlib.util.find_spec(m) is None]


def require(extra: str, what: str, alternative: str = '') -> None:
    """Raise, naming the install command, when ``extra`` is not installed; ``what`` is the job that needs it."""
    absent = missing(extra)
    if absent:
        other = f', or {alternative}' if alternative else ''
        raise ViTVariantsError(f"{what} needs {', '.join(absent)}: pip install 'timm-vit-variants[{extra}]'{other}")
