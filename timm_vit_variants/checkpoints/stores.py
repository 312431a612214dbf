"""Tensor stores: a checkpoint's bytes as named tensors, viewed in place wherever the container allows.

One interface (``store_base.TensorStore``), three containers: ``NpzStore`` (``npz_store``),
``SafetensorsStore`` (``safetensors_store``) and ``TorchPickleStore`` (``pickle_store``).
``open_store`` tells them apart by content, not by name. Every failure is a ``ViTVariantsError``
naming the file and key.
"""
import zipfile
from typing import Sequence

from ..errors import ViTVariantsError
from ..limits import DEFAULT_LIMITS, Limits
from .files import check_regular_file
from .npz_store import NpzStore
from .pickle_store import TorchPickleStore
from .safetensors_store import SAFETENSORS_DTYPES, SafetensorsStore, read_safetensors_header
from .store_base import TensorStore
from .torchscript_store import TorchScriptStore, is_torchscript_archive

__all__ = ['TensorStore', 'NpzStore', 'SafetensorsStore', 'TorchPickleStore', 'open_store', 'SAFETENSORS_DTYPES',
           'read_safetensors_header']


def _kind(file: str) -> str:
    """'npz', 'safetensors' or 'pickle', from the first bytes (and the zip directory for zips)."""
    try:
        with open(file, 'rb') as fp:
            head = fp.read(9)
    except FileNotFoundError as e:
        raise ViTVariantsError('file not found', path=file) from e
    except OSError as e:
        raise ViTVariantsError(f'unreadable file: {e}', path=file) from e
    if head.startswith(b'PK'):
        try:
            with zipfile.ZipFile(file) as archive:
                names = archive.namelist()
        except (zipfile.BadZipFile, NotImplementedError, OSError, ValueError, EOFError) as e:  # a zip version or compression zipfile cannot read
            raise ViTVariantsError(f'truncated or corrupt zip archive: {e}', path=file) from e
        if any(n.endswith('.npy') for n in names):
            return 'npz'
        if is_torchscript_archive(names):
            return 'torchscript'
        if not any(n.endswith('data.pkl') for n in names):
            raise ViTVariantsError('a zip archive that is neither .npz nor a torch.save file', path=file)
        return 'pickle'
    if len(head) == 9 and head[8:9] == b'{':
        return 'safetensors'
    return 'pickle'


def open_store(files: Sequence[str], limits: Limits = DEFAULT_LIMITS, use_ema: bool = True) -> TensorStore:
    """The store for ``files`` (all of one kind), told apart by content, not by name."""
    for file in files:
        check_regular_file(file)
    kinds = {_kind(f) for f in files}
    if len(kinds) != 1:
        raise ViTVariantsError(f'weight files of mixed kinds ({", ".join(sorted(kinds))})', path=files[0])
    kind = kinds.pop()
    if kind == 'npz':
        if len(files) != 1:
            raise ViTVariantsError('an .npz checkpoint is a single file', path=files[0])
        return NpzStore(files[0], limits)
    if kind == 'torchscript':
        if len(files) != 1:
            raise ViTVariantsError('a TorchScript archive is a single file', path=files[0])
        return TorchScriptStore(files[0], limits)
    if kind == 'safetensors':
        return SafetensorsStore(files, limits)
    return TorchPickleStore(files, use_ema=use_ema, limits=limits)
