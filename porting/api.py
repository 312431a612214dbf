"""The Python API of ``vit-port``: a function for each command but ``inspect``, keywords spelled as that
command's flags (``porting.request.build_request`` makes them a request, as it does the CLI's arguments).

``--from`` is ``from_=`` (``from`` is a Python keyword), ``--num-heads 12`` is ``num_heads=12``,
``--no-verify`` is ``no_verify=True``, a repeatable ``--dataset``/``--limit`` takes a list. Each function
also takes the request value the CLI builds (``ConvertRequest``, ``ExportRequest``) instead of keywords.
Every bad input raises ``ViTVariantsError`` naming the file, key and reason. Re-exported as the
top-level ``vit_port`` module, and lazily as ``porting``'s own names.
"""
from pathlib import Path
from typing import Any, Union

from timm_vit_variants.errors import ViTVariantsError

from .export import ExportResult, export_onnx, export_pt2
from .hub_folder import load_folder, save_pretrained_folder
from .pipeline import ConvertResult, convert, resize
from .publish import PushResult, push_folder
from .constants import DEFAULT_TOL
from .request import (
    ConvertRequest, ExportRequest, OutputOptions, SourceOptions, TargetOptions, build_request, limits_from)
from .sources import ResolvedSource, resolve_source
from .verification import Verification
from .verification.conversion import verify_folder

__all__ = [
    'convert', 'resize', 'verify', 'export_onnx', 'export_pt2', 'push', 'load_folder', 'save_pretrained_folder',
    'resolve_source', 'ConvertRequest', 'ExportRequest', 'SourceOptions', 'TargetOptions', 'OutputOptions',
    'ConvertResult', 'ExportResult', 'PushResult', 'Verification', 'ResolvedSource', 'ViTVariantsError',
]


def verify(src: Union[str, Path], converted: Union[str, Path], *, tol: float = DEFAULT_TOL, limit: Any = None,
           progress: bool = False, **source_flags: Any) -> Verification:
    """``vit-port verify SRC CONVERTED``: the converted folder against SRC's reference implementation.

    ``source_flags`` are the source flags of the command (``from_``, ``num_heads``, ``source_img_size``, ...,
    ``endpoint``, ``token``). Returns the ``Verification``; ``status == 'passed'`` when within ``tol``.
    """
    return verify_folder(src, converted, build_request(SourceOptions, **source_flags), tol, limits_from(limit),
                         progress)


def push(repo_id: str, folder: Union[str, Path], **flags: Any) -> PushResult:
    """``vit-port push REPO_ID FOLDER``: upload a converted folder in one commit (``PushResult.report()`` says what
    happened). ``flags``: ``private``, ``revision``, ``create_pr``, ``commit_message``, ``token``, ``endpoint``,
    ``dry_run``, ``overwrite_card``, ``force``; a bare ``repo_id`` goes to the token's own namespace."""
    return push_folder(folder, repo_id, **flags)
