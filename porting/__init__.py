"""Weight porting for the ``simple_vit_*`` family: convert, resize, verify, inspect, export, push and save Hub folders.

The public Python API is ``porting.api`` (also installed as the top-level module ``vit_port``); its names are
``porting``'s own too, imported on first use, so ``import porting.cli`` (``vit-port --help``) stays free of
torch and timm. This package imports ``timm_vit_variants``, never the reverse.
"""
from typing import Any

__all__ = [
    'convert', 'resize', 'verify', 'export_onnx', 'export_pt2', 'push', 'load_folder', 'save_pretrained_folder',
    'resolve_source', 'ConvertRequest', 'ExportRequest', 'SourceOptions', 'TargetOptions', 'OutputOptions',
    'ConvertResult', 'ExportResult', 'PushResult', 'Verification', 'ResolvedSource', 'ViTVariantsError',
]


def __getattr__(name: str) -> Any:
    """The API names, from ``porting.api`` on first use (PEP 562); submodules import as usual."""
    if name in __all__:
        from . import api

        return getattr(api, name)
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
