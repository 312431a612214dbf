"""timm-vit-variants' conversion API: ``import vit_port``, then call the ``vit-port`` commands as functions.

    import vit_port
    result = vit_port.convert('vit_s16_i1k_300ep.npz', 'out/vit_s16', img_size=384)
    model = vit_port.load_folder('out/vit_s16')

Keywords are spelled as the command-line flags (``from_=`` for ``--from``, ``num_heads=`` for ``--num-heads``,
``no_verify=True`` for ``--no-verify``). The implementation is ``porting.api``; ``porting`` exposes the same names.
"""
from porting.api import (
    ConvertRequest, ConvertResult, ExportRequest, ExportResult, OutputOptions, PushResult, ResolvedSource,
    SourceOptions, TargetOptions, Verification, ViTVariantsError, convert, export_onnx, export_pt2, load_folder, push,
    resize, resolve_source, save_pretrained_folder, verify)

__all__ = [
    'convert', 'resize', 'verify', 'export_onnx', 'export_pt2', 'push', 'load_folder', 'save_pretrained_folder',
    'resolve_source', 'ConvertRequest', 'ExportRequest', 'SourceOptions', 'TargetOptions', 'OutputOptions',
    'ConvertResult', 'ExportResult', 'PushResult', 'Verification', 'ResolvedSource', 'ViTVariantsError',
]
