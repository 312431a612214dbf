"""TorchScript archives (OpenAI CLIP's released ``.pt`` files) as a tensor store, read without running them.

``torch.load(weights_only=True)`` refuses TorchScript archives, and ``torch.jit.load`` executes their code. The
tensors, though, are plain: ``data.pkl`` pickles the module tree (each module a ``__torch__.*`` object built
from a dict of its attributes), and each tensor is ``torch._utils._rebuild_tensor_v2`` over a storage whose
bytes are the member ``data/<key>``. This store unpickles ``data.pkl`` with an unpickler that knows only those
globals (modules become dicts, tensors become references into the members) and refuses every other one, then
views each tensor in a private mapping of the file. Names are attribute paths joined by ``.``, as the
module's ``state_dict()`` names them; the code, constants and traced inputs are never read.
"""
import collections
import io
import math
import pickle
import struct
import zipfile
from dataclasses import dataclass
from typing import Any, Dict, List, Tuple

import torch

from ..errors import ViTVariantsError
from ..limits import DEFAULT_LIMITS, Limits
from .store_base import Mapping, TensorStore

__all__ = ['TorchScriptStore', 'is_torchscript_archive']

_STORAGE_DTYPES = {
    'HalfStorage': torch.float16, 'FloatStorage': torch.float32, 'DoubleStorage': torch.float64,
    'BFloat16Storage': torch.bfloat16, 'LongStorage': torch.int64, 'IntStorage': torch.int32,
    'ShortStorage': torch.int16, 'CharStorage': torch.int8, 'ByteStorage': torch.uint8, 'BoolStorage': torch.bool,
}
_MAX_DEPTH = 64  # module nesting; a CLIP model is about 8 deep


def is_torchscript_archive(names: List[str]) -> bool:
    """Whether a zip's member names are a TorchScript archive's (code and constants beside ``data.pkl``)."""
    return any(n.endswith('/data.pkl') or n == 'data.pkl' for n in names) and \
        any('/code/' in n or n.startswith('code/') or n.endswith('constants.pkl') for n in names)


@dataclass(frozen=True)
class _Storage:
    dtype: torch.dtype
    key: str
    numel: int


@dataclass(frozen=True)
class _TensorRef:
    storage: _Storage
    offset: int
    size: Tuple[int, ...]
    stride: Tuple[int, ...]


class _Module(dict):
    """A ``__torch__.*`` module object: the dict of its attributes (``BUILD``'s state)."""

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, dict):
            self.update(state)


def _rebuild_tensor(storage: Any, offset: Any, size: Any, stride: Any, *rest: Any) -> _TensorRef:
    if not isinstance(storage, _Storage) or not isinstance(offset, int) or \
            not all(isinstance(v, int) and v >= 0 for v in (*size, *stride, offset)) or len(size) != len(stride):
        raise pickle.UnpicklingError('malformed tensor record')
    return _TensorRef(storage, offset, tuple(size), tuple(stride))


class _Restricted(pickle.Unpickler):
    """Builds only modules-as-dicts, tensor references and plain containers; every other global is refused."""

    def find_class(self, module: str, name: str) -> Any:
        if module.startswith('__torch__.') or module == '__torch__':
            return _Module
        if (module, name) == ('torch._utils', '_rebuild_tensor_v2'):
            return _rebuild_tensor
        if (module, name) == ('collections', 'OrderedDict'):
            return collections.OrderedDict
        if module == 'torch' and name in _STORAGE_DTYPES:
            return _STORAGE_DTYPES[name]  # a dtype: a marker, not callable
        raise pickle.UnpicklingError(f'refused global {module}.{name} (only tensors and modules as data are read)')

    def persistent_load(self, pid: Any) -> _Storage:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == 'storage' and isinstance(pid[1], torch.dtype)
                and isinstance(pid[2], str) and isinstance(pid[4], int) and pid[4] >= 0):
            raise pickle.UnpicklingError(f'unexpected persistent id {str(pid)[:80]}')
        return _Storage(pid[1], pid[2], pid[4])


class TorchScriptStore(TensorStore):
    """The tensors of one TorchScript archive, viewed in place (stored uncompressed, as ``torch.jit.save`` does)."""

    def __init__(self, file: str, limits: Limits = DEFAULT_LIMITS) -> None:
        super().__init__([file])
        self._refs: Dict[str, _TensorRef] = {}
        self._members: Dict[str, Tuple[int, int]] = {}  # storage key -> (data offset, size)
        try:
            with zipfile.ZipFile(file) as archive:
                infos = archive.infolist()
                pkl = [i for i in infos if i.filename == 'data.pkl' or i.filename.endswith('/data.pkl')]
                top = pkl[0].filename[:-len('data.pkl')] if len(pkl) == 1 else None
                if top is None or top.count('/') > 1:
                    raise self._error('a TorchScript archive has one data.pkl at its top folder')
                if pkl[0].file_size > limits.json_bytes:
                    raise ViTVariantsError(f'data.pkl is {pkl[0].file_size} bytes, too large for a module tree (the '
                                           f'json_bytes limit is {limits.json_bytes})', path=file, key='data.pkl',
                                           needs=f'limit:json_bytes={pkl[0].file_size}')
                root = _Restricted(io.BytesIO(archive.read(pkl[0]))).load()
                with open(file, 'rb') as fp:
                    for info in infos:
                        if info.filename.startswith(top + 'data/'):
                            self._members[info.filename[len(top + 'data/'):]] = self._data_span(fp, info)
        except ViTVariantsError:
            raise
        except (pickle.UnpicklingError, zipfile.BadZipFile, EOFError, ValueError, TypeError, KeyError,
                AttributeError, IndexError, struct.error, RecursionError, MemoryError) as e:
            raise ViTVariantsError(f'refused or unreadable TorchScript archive: {e}', path=file,
                                   key='data.pkl') from None
        self._collect(root, '', 0, set())
        self._mapping = Mapping(file)

    def _data_span(self, fp: Any, info: zipfile.ZipInfo) -> Tuple[int, int]:
        if info.compress_type != zipfile.ZIP_STORED:
            raise self._error(f'member {info.filename} is compressed; torch.jit.save stores tensors uncompressed')
        fp.seek(info.header_offset)
        header = fp.read(30)
        if len(header) != 30 or header[:4] != b'PK\x03\x04':
            raise self._error(f'member {info.filename} has no local header')
        name_len, extra_len = struct.unpack('<HH', header[26:30])
        return info.header_offset + 30 + name_len + extra_len, info.file_size

    def _collect(self, obj: Any, prefix: str, depth: int, seen: set) -> None:
        """Every tensor reachable through attribute dicts, named by its attribute path."""
        if depth > _MAX_DEPTH or id(obj) in seen:
            return
        seen.add(id(obj))
        for name, value in obj.items():
            if not isinstance(name, str):
                continue
            if isinstance(value, _TensorRef):
                self._check_ref(prefix + name, value)
                self._refs[prefix + name] = value
                self._add(prefix + name, 0)
            elif isinstance(value, dict):
                self._collect(value, f'{prefix}{name}.', depth + 1, seen)

    def _check_ref(self, name: str, ref: _TensorRef) -> None:
        span = self._members.get(ref.storage.key)
        if span is None:
            raise self._error(f'its storage data/{ref.storage.key} is not in the archive', name)
        itemsize = torch.empty((), dtype=ref.storage.dtype).element_size()
        if ref.storage.numel * itemsize > span[1]:
            raise self._error(f'its storage claims {ref.storage.numel} elements, more than data/{ref.storage.key} '
                              f'holds ({span[1]} bytes)', name)
        extent = ref.offset + sum((s - 1) * st for s, st in zip(ref.size, ref.stride)) + 1 \
            if math.prod(ref.size) else 0
        if extent > ref.storage.numel:
            raise self._error(f'its view reaches element {extent}, past its storage of {ref.storage.numel}', name)

    def shape(self, name: str) -> Tuple[int, ...]:
        return self._refs[name].size

    def dtype(self, name: str) -> str:
        return str(self._refs[name].storage.dtype).replace('torch.', '')

    def tensor(self, name: str) -> torch.Tensor:
        ref = self._refs[name]
        start, _ = self._members[ref.storage.key]
        flat = self._mapping.view(start, ref.storage.dtype, (ref.storage.numel,))
        if not ref.storage.numel:
            return torch.empty(ref.size, dtype=ref.storage.dtype)
        return flat.as_strided(ref.size, ref.stride, ref.offset)

    def release(self, name: str) -> None:
        ref = self._refs[name]
        start, size = self._members[ref.storage.key]
        self._mapping.release(start, start + size)

    def close(self) -> None:
        self._mapping.close()
