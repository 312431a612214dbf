"""Every private timm API the plugin uses, in one place, so a timm upgrade touches one file.

These names live in underscore modules (or undocumented helpers) of timm 1.0.31; the version pin in
``pyproject.toml`` (``timm>=1.0.31,<1.1``) exists because of them. Public timm API is imported
directly where it is used.
"""
import os
from typing import Any, Callable

from torch import nn

from timm.layers.helpers import get_device_dtype
from timm.models import _factory
from timm.models._features import feature_take_indices
from timm.models._input import update_model_args, update_model_input_size

__all__ = ['get_device_dtype', 'feature_take_indices', 'update_model_args', 'update_model_input_size',
           'declare_first_conv', 'check_local_dir_configs']


def declare_first_conv(model: nn.Module, name: str) -> None:
    """Name the module whose kernel meets the pixels; timm's builder adapts its input channels (``_traits``)."""
    model._traits = dict(getattr(model, '_traits', {}), first_conv=name)


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
