"""Every private timm API the plugin uses, in one place, so a timm upgrade touches one file.

These names live in underscore modules (or undocumented helpers) of timm 1.0.31; the version pin in
``pyproject.toml`` (``timm>=1.0.31,<1.1``) exists because of them. Public timm API is imported
directly where it is used.
"""
import os
from contextlib import contextmanager
from functools import partial
from typing import Any, Callable, Iterator

from torch import nn

from timm.layers.helpers import get_device_dtype
from timm.models import _factory, _helpers
from timm.models._features import feature_take_indices
from timm.models._input import update_model_args, update_model_input_size

__all__ = ['get_device_dtype', 'feature_take_indices', 'update_model_args', 'update_model_input_size',
           'declare_first_conv', 'mapped_torch_load', 'check_local_dir_configs']


def declare_first_conv(model: nn.Module, name: str) -> None:
    """Name the module whose kernel meets the pixels; timm's builder adapts its input channels (``_traits``)."""
    model._traits = dict(getattr(model, '_traits', {}), first_conv=name)


@contextmanager
def mapped_torch_load() -> Iterator[None]:
    """Within it, timm's ``load_state_dict`` reads a zip-format ``.pth`` with ``torch.load(mmap=True)``.

    timm's own ``_torch_load`` has the ``mmap`` option but ``load_state_dict`` never passes it; the
    tensors then view the file instead of being read onto the heap. Only for zip-format files
    (``torch.load`` refuses ``mmap`` on the legacy format).
    """
    original = _helpers._torch_load
    _helpers._torch_load = partial(original, mmap=True)
    try:
        yield
    finally:
        _helpers._torch_load = original


def check_local_dir_configs(check: Callable[[str], None]) -> None:
    """Have timm's ``local-dir:`` source call ``check(folder)`` before it parses the folder's ``config.json``.

    timm reads that file with an unbounded ``json.loads`` and indexes its sections unchecked
    (``_hub.load_model_config_from_path``), so a nesting bomb or a list for ``model_args`` would fail inside
    timm, with timm's and json's errors, before any entrypoint runs.
    """
    original = _factory.load_model_config_from_path

    def load_model_config_from_path(model_path: Any) -> Any:
        check(os.fspath(model_path))
        return original(model_path)

    _factory.load_model_config_from_path = load_model_config_from_path
