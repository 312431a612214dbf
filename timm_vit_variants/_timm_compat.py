"""Every private timm API the plugin uses, in one place, so a timm upgrade touches one file.

These names live in underscore modules (or undocumented helpers) of timm 1.0.31; the version pin in
``pyproject.toml`` (``timm>=1.0.31,<1.1``) exists because of them. Public timm API is imported
directly where it is used.
"""
from torch import nn

from timm.layers.helpers import get_device_dtype
from timm.models._features import feature_take_indices
from timm.models._input import update_model_args, update_model_input_size

__all__ = ['get_device_dtype', 'feature_take_indices', 'update_model_args', 'update_model_input_size',
           'declare_first_conv']


def declare_first_conv(model: nn.Module, name: str) -> None:
    """Name the module whose kernel meets the pixels; timm's builder adapts its input channels (``_traits``)."""
    model._traits = dict(getattr(model, '_traits', {}), first_conv=name)
