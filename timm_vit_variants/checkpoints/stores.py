"""Tensor stores: a checkpoint's bytes as named tensors, viewed in place wherever the container allows.

One interface, three containers:
  * ``NpzStore``: ``.npz`` archives. Stored (uncompressed) members are memory-mapped and viewed at
    their offset, found from the zip local header and the npy header, with no copy; deflated members
    are inflated one at a time.
  * ``SafetensorsStore``: memory-mapped at the offsets of a header that is checked entry by entry.
  * ``TorchPickleStore``: ``torch.save`` files, loaded with ``weights_only=True`` (zip files mmap'ed).
Nothing is ever unpickled by anything but torch's weights-only unpickler, and every failure is a
``ViTVariantsError`` naming the file and key. ``release`` hands a tensor's mapped pages back, so a
streaming conversion keeps about one tensor resident.
"""
import abc
import argparse
import io
import json
import math
import mmap
import os
import struct
import warnings
import zipfile
import zlib
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch
from timm.models import clean_state_dict

from ..errors import ViTVariantsError
from ..limits import DEFAULT_LIMITS, Limits
from ..memory import mapping_address, release_pages, release_tensor
from .files import check_regular_file

__all__ = ['TensorStore', 'NpzStore', 'SafetensorsStore', 'TorchPickleStore', 'open_store', 'SAFETENSORS_DTYPES',
           'read_safetensors_header']

# safetensors dtype names and their torch dtypes.
SAFETENSORS_DTYPES = {
    'F64': torch.float64, 'F32': torch.float32, 'F16': torch.float16, 'BF16': torch.bfloat16,
    'I64': torch.int64, 'I32': torch.int32, 'I16': torch.int16, 'I8': torch.int8, 'U8': torch.uint8,
    'BOOL': torch.bool,
}
_NPY_FLOATS = {'f2': torch.float16, 'f4': torch.float32, 'f8': torch.float64}
# Keys timm training scripts wrap a state dict in, in timm's order of preference (EMA first).
_WRAPPER_KEYS = ('state_dict_ema', 'model_ema', 'state_dict', 'model')
# Upper bounds on a ViT's array count: 16 per block in flax layouts, plus embeddings, norms and heads.
_ARRAYS_PER_BLOCK = 24
_ARRAYS_OUTSIDE_BLOCKS = 64
# Errors a damaged zip member or npy header can raise while being read.
_READ_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, KeyError, TypeError, SyntaxError,
                MemoryError, OverflowError, IndexError, NotImplementedError, struct.error)


class TensorStore(abc.ABC):
    """Named tensors spread over one or more files; data is produced one tensor at a time."""

    def __init__(self, files: Sequence[str]) -> None:
        self.files = [str(f) for f in files]
        self._where: Dict[str, int] = {}  # name -> index into self.files

    def names(self) -> List[str]:
        return list(self._where)

    def __contains__(self, name: str) -> bool:
        return name in self._where

    def file_of(self, name: str) -> str:
        return self.files[self._where[name]]

    def items(self) -> Iterator[Tuple[str, Tuple[int, ...], str]]:
        """(name, shape, dtype name) of every tensor, from metadata only."""
        for name in self._where:
            yield name, self.shape(name), self.dtype(name)

    def is_float(self, name: str) -> bool:
        return self.dtype(name) in ('float16', 'float32', 'float64', 'bfloat16')

    @abc.abstractmethod
    def shape(self, name: str) -> Tuple[int, ...]:
        """Shape from metadata, without reading data."""

    @abc.abstractmethod
    def dtype(self, name: str) -> str:
        """dtype name ('float32', 'bfloat16', ...) from metadata, without reading data."""

    @abc.abstractmethod
    def tensor(self, name: str) -> torch.Tensor:
        """The stored tensor in its stored dtype; a view of a file mapping where possible (do not modify)."""

    def release(self, name: str) -> None:
        """Hand the pages behind ``name`` back to the OS (they stay in the page cache)."""

    def close(self) -> None:
        """Release open files and mappings."""

    def _add(self, name: str, index: int) -> None:
        if name in self._where:
            raise ViTVariantsError(f'tensor also stored in {self.files[self._where[name]]!r}',
                                   path=self.files[index], key=name)
        self._where[name] = index

    def _error(self, reason: str, name: Optional[str] = None, index: int = 0) -> ViTVariantsError:
        path = self.file_of(name) if name in self._where else self.files[index]
        return ViTVariantsError(reason, path=path, key=name)


class _Mapping:
    """A private read mapping of one file (copy-on-write, so torch may view it; never written)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.size = os.path.getsize(path)
        self._file = open(path, 'rb')
        self.map: Optional[mmap.mmap] = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_COPY) \
            if self.size else None
        self._address = mapping_address(self.map) if self.map is not None else 0

    def view(self, offset: int, dtype: torch.dtype, shape: Tuple[int, ...]) -> torch.Tensor:
        count = math.prod(shape)
        if count == 0 or self.map is None:
            return torch.empty(shape, dtype=dtype)
        with warnings.catch_warnings():  # the mapping is private copy-on-write; torch's writability warning is moot
            warnings.simplefilter('ignore')
            return torch.frombuffer(self.map, dtype=dtype, count=count, offset=offset).reshape(shape)

    def read(self, offset: int, size: int) -> bytes:
        """Bytes read with ``pread``: no page of the mapping is faulted in (nor a large folio around it)."""
        return os.pread(self._file.fileno(), max(0, min(size, self.size - offset)), offset)

    def release(self, begin: int, end: int) -> None:
        """Hand back the pages of bytes [begin, end) of the file (never written, so they re-read from it)."""
        if self.map is not None:
            release_pages(self._address + begin, self._address + min(end, self.size))

    def close(self) -> None:
        # Never mmap.close(): torch.frombuffer views keep a reference to the mapping but no buffer export,
        # so closing it would leave live views pointing at unmapped memory. Dropping ours lets the
        # mapping go when its last view does.
        self.map = None
        self._file.close()


# -- .npz --------------------------------------------------------------------------------------------

def _npz_member_dtype(dtype: np.dtype) -> Tuple[str, Optional[torch.dtype]]:
    """(our dtype name, torch dtype for an in-place view or None when a view is impossible)."""
    if dtype.kind == 'V' and dtype.itemsize == 2:
        return 'bfloat16', torch.bfloat16  # flax writes bfloat16 as 2-byte void without ml_dtypes
    if dtype.kind == 'f' and f'f{dtype.itemsize}' in _NPY_FLOATS:
        native = dtype.byteorder in ('=', '|') or dtype.byteorder == ('<' if np.little_endian else '>')
        return str(dtype.newbyteorder('=')), _NPY_FLOATS[f'f{dtype.itemsize}'] if native else None
    return str(dtype), None


def _npy_header_size(prefix: bytes) -> int:
    """Bytes of the .npy header that ``prefix`` (its first 12 bytes) opens, at most 1 MiB (a longer one is refused)."""
    if len(prefix) < 10 or prefix[:6] != b'\x93NUMPY':
        return len(prefix)  # numpy's reader raises the error
    if prefix[6] == 1:
        return min(10 + struct.unpack('<H', prefix[8:10])[0], 1 << 20)
    return min(12 + struct.unpack('<I', prefix[8:12])[0], 1 << 20) if len(prefix) >= 12 else len(prefix)


class NpzStore(TensorStore):
    """A NumPy ``.npz`` archive: headers read up front, stored members mapped in place, never unpickled."""

    def __init__(self, path: str, limits: Limits = DEFAULT_LIMITS) -> None:
        super().__init__([path])
        self.path = str(path)
        self.limits = limits
        try:
            self._zip = zipfile.ZipFile(self.path)
        except FileNotFoundError as e:
            raise ViTVariantsError('file not found', path=self.path) from e
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
            raise ViTVariantsError(f'not a readable .npz (zip) archive: {e}', path=self.path) from e
        self._mapping: Optional[_Mapping] = None
        try:
            members = {info.filename[:-len('.npy')]: info for info in self._zip.infolist()
                       if info.filename.endswith('.npy')}
            self._check_claims(members)
            self._mapping = _Mapping(self.path)
            # name -> (info, shape, dtype, fortran order, byte offset of the data when stored, else None)
            self._members: Dict[str, Tuple[zipfile.ZipInfo, Tuple[int, ...], np.dtype, bool, Optional[int]]] = {}
            for key, info in members.items():
                self._members[key] = self._read_header(key, info)
                self._add(key, 0)
        except BaseException:
            self.close()
            raise

    def _check_claims(self, members: Dict[str, zipfile.ZipInfo]) -> None:
        """Refuse archives whose directory claims more than any real checkpoint, before inflating anything."""
        most = _ARRAYS_PER_BLOCK * self.limits.depth + _ARRAYS_OUTSIDE_BLOCKS
        if len(members) > most:
            raise ViTVariantsError(
                f'{len(members)} arrays is more than a ViT within the depth limit of {self.limits.depth} holds '
                f'(at most {most}); refusing before reading any', path=self.path,
                needs=f'limit:depth={-(-(len(members) - _ARRAYS_OUTSIDE_BLOCKS) // _ARRAYS_PER_BLOCK)}')
        for key, info in members.items():
            self.limits.check('tensor_bytes', info.file_size, path=self.path, key=key)
        packed = [info for info in members.values() if info.compress_type != zipfile.ZIP_STORED]
        claimed = sum(info.file_size for info in packed)
        compressed = sum(info.compress_size for info in packed)
        # Float weights deflate by ~1.1x; a small allowance covers zero-filled small tensors.
        if claimed > max(16 << 20, self.limits.inflate_ratio * compressed):
            worst = max(packed, key=lambda i: i.file_size / max(i.compress_size, 1))
            raise ViTVariantsError(
                f'compressed members claim {claimed} bytes from {compressed} stored bytes (more than '
                f'{self.limits.inflate_ratio}x, a decompression bomb); refusing before inflating any', path=self.path,
                key=worst.filename[:-len('.npy')], needs=f'limit:inflate_ratio={-(-claimed // max(compressed, 1))}')

    def _read_header(self, key: str, info: zipfile.ZipInfo):
        try:
            if info.compress_type == zipfile.ZIP_STORED and not info.flag_bits & 0x1:
                local = self._mapping.read(info.header_offset, 30)
                if len(local) != 30 or local[:4] != b'PK\x03\x04':
                    raise ValueError('bad local file header')
                name_len, extra_len = struct.unpack('<HH', local[26:30])
                start = info.header_offset + 30 + name_len + extra_len
                if start + info.file_size > self._mapping.size:
                    raise ValueError('member runs past the end of the file')
                fp: Any = io.BytesIO(self._mapping.read(start, min(info.file_size, _npy_header_size(
                    self._mapping.read(start, 12)))))
            else:
                start = None
                fp = self._zip.open(info)
            with fp:
                version = np.lib.format.read_magic(fp)
                reader = {(1, 0): np.lib.format.read_array_header_1_0}.get(version, np.lib.format.read_array_header_2_0)
                shape, fortran, dtype = reader(fp)
                header_len = fp.tell()
        except _READ_ERRORS as e:
            raise ViTVariantsError(f'unreadable .npy header: {e}', path=self.path, key=key) from e
        if dtype.hasobject:
            raise ViTVariantsError('object arrays need pickle, which is never loaded', path=self.path, key=key)
        shape = tuple(int(s) for s in shape)
        # Checked before any data is read, so a damaged header cannot trigger a huge allocation.
        if info.file_size != header_len + math.prod(shape) * dtype.itemsize:
            raise ViTVariantsError(f'array size does not match its header {shape} {dtype} (truncated or corrupt)',
                                   path=self.path, key=key)
        return info, shape, dtype, bool(fortran), None if start is None else start + header_len

    def shape(self, name: str) -> Tuple[int, ...]:
        return self._members[name][1]

    def dtype(self, name: str) -> str:
        return _npz_member_dtype(self._members[name][2])[0]

    def tensor(self, name: str) -> torch.Tensor:
        info, shape, dtype, fortran, offset = self._members[name]
        torch_dtype = _npz_member_dtype(dtype)[1]
        if offset is None or torch_dtype is None:
            return self._inflate(name, info, dtype)
        if fortran:  # column-major bytes: view them reversed, then transpose back
            return self._mapping.view(offset, torch_dtype, shape[::-1]).permute(*reversed(range(len(shape))))
        return self._mapping.view(offset, torch_dtype, shape)

    def _inflate(self, name: str, info: zipfile.ZipInfo, dtype: np.dtype) -> torch.Tensor:
        """A deflated (or non-native byte order) member read into one owned tensor, CRC-checked by zipfile."""
        try:
            with self._zip.open(info) as fp:
                array = np.ascontiguousarray(np.lib.format.read_array(fp, allow_pickle=False))
        except _READ_ERRORS as e:
            raise ViTVariantsError(f'truncated or corrupt array data: {e}', path=self.path, key=name) from e
        if dtype.kind == 'V':
            return torch.from_numpy(array.view(np.uint16)).view(torch.bfloat16)
        if dtype.kind != 'f':
            raise ViTVariantsError(f'expected a floating-point array, got dtype {dtype}', path=self.path, key=name)
        return torch.from_numpy(array.astype(dtype.newbyteorder('='), copy=False))

    def release(self, name: str) -> None:
        info, shape, dtype, _, offset = self._members[name]
        if offset is not None:
            self._mapping.release(offset, offset + math.prod(shape) * dtype.itemsize)

    def close(self) -> None:
        if self._mapping is not None:
            self._mapping.close()
        self._zip.close()


# -- safetensors -------------------------------------------------------------------------------------

def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def read_safetensors_header(path: str, fp, limits: Limits = DEFAULT_LIMITS) -> Tuple[int, Dict[str, dict]]:
    """(data start, entries) of an open safetensors file, every entry checked against the file size."""
    raw = fp.read(8)
    if len(raw) != 8:
        raise ViTVariantsError('truncated safetensors header', path=path)
    (length,) = struct.unpack('<Q', raw)
    size = os.fstat(fp.fileno()).st_size
    if length > size - 8:
        raise ViTVariantsError('safetensors header runs past the end of the file', path=path)
    limits.check('json_bytes', length, path=path, key='__header__')
    try:
        header = json.loads(fp.read(length))
    except RecursionError:
        raise ViTVariantsError('safetensors header nests too deeply', path=path) from None
    except ValueError as e:
        raise ViTVariantsError(f'truncated or corrupt safetensors header: {e}', path=path) from None
    if not isinstance(header, dict):
        raise ViTVariantsError('safetensors header is not a JSON object', path=path)
    header.pop('__metadata__', None)
    data_size = size - 8 - length
    for name, entry in header.items():
        offsets = entry.get('data_offsets') if isinstance(entry, dict) else None
        shape = entry.get('shape') if isinstance(entry, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_count(v) for v in offsets)
                and isinstance(shape, list) and all(_is_count(v) for v in shape)):
            raise ViTVariantsError('tensor entry needs "dtype", "shape" and two "data_offsets"', path=path, key=name)
        begin, end = offsets
        dtype = SAFETENSORS_DTYPES.get(entry.get('dtype'))
        if dtype is None or end > data_size or begin > end:
            raise ViTVariantsError('bad tensor entry (dtype or offsets out of range)', path=path, key=name)
        if end - begin != math.prod(shape) * torch.empty((), dtype=dtype).element_size():
            raise ViTVariantsError('tensor byte size does not match its shape', path=path, key=name)
    return 8 + length, header


class SafetensorsStore(TensorStore):
    """One or more safetensors files (Hub shards), memory-mapped."""

    def __init__(self, files: Sequence[str], limits: Limits = DEFAULT_LIMITS) -> None:
        super().__init__(files)
        self._mappings: List[_Mapping] = []
        self._entries: Dict[str, Tuple[int, torch.dtype, Tuple[int, ...], int]] = {}  # start, dtype, shape, end
        try:
            for index, file in enumerate(self.files):
                with open(file, 'rb') as fp:
                    start, header = read_safetensors_header(file, fp, limits)
                self._mappings.append(_Mapping(file))
                for name, entry in header.items():
                    begin, end = entry['data_offsets']
                    self._entries[name] = (start + begin, SAFETENSORS_DTYPES[entry['dtype']],
                                           tuple(entry['shape']), start + end)
                    self._add(name, index)
        except OSError as e:
            self.close()
            raise ViTVariantsError(f'unreadable file: {e.strerror or e}', path=e.filename) from None
        except BaseException:
            self.close()
            raise

    def shape(self, name: str) -> Tuple[int, ...]:
        return self._entries[name][2]

    def dtype(self, name: str) -> str:
        return str(self._entries[name][1]).replace('torch.', '')

    def tensor(self, name: str) -> torch.Tensor:
        start, dtype, shape, _ = self._entries[name]
        return self._mappings[self._where[name]].view(start, dtype, shape)

    def release(self, name: str) -> None:
        start, _, _, end = self._entries[name]
        self._mappings[self._where[name]].release(start, end)

    def close(self) -> None:
        for mapping in self._mappings:
            mapping.close()
        self._mappings.clear()


# -- torch.save pickles ------------------------------------------------------------------------------

def _torch_load(file: str) -> Any:
    """``torch.load`` that never runs pickled code; zip-format files are memory-mapped."""
    try:
        mapped = zipfile.is_zipfile(file)
    except OSError as e:
        raise ViTVariantsError(f'unreadable file: {e}', path=file) from e
    try:
        # timm training checkpoints carry argparse.Namespace in 'args'; allow that one plain-data class.
        with torch.serialization.safe_globals([argparse.Namespace]):
            return torch.load(file, map_location='cpu', weights_only=True, mmap=mapped)
    except FileNotFoundError as e:
        raise ViTVariantsError('file not found', path=file) from e
    except Exception as e:  # torch.load surfaces zip, pickle, EOF and storage errors under many types
        text = str(e).split('\n')[0]
        if 'Weights only load failed' in str(e) or 'Unsupported global' in str(e):
            reason = f'refused to unpickle: the file needs code or classes that are not plain tensors ({text})'
        else:
            reason = f'truncated, corrupt or not a PyTorch weight file ({type(e).__name__}: {text})'
        raise ViTVariantsError(reason, path=file) from e


class TorchPickleStore(TensorStore):
    """``torch.save`` state dicts, unwrapped from timm's training-checkpoint keys (EMA first)."""

    def __init__(self, files: Sequence[str], use_ema: bool = True) -> None:
        super().__init__(files)
        self._states: List[Dict[str, torch.Tensor]] = []
        self._mapped: List[bool] = []  # zip-format files are memory-mapped; legacy pickles live on the heap
        for index, file in enumerate(self.files):
            self._mapped.append(zipfile.is_zipfile(file))
            state = _torch_load(file)
            if isinstance(state, dict):
                for key in _WRAPPER_KEYS:
                    if not use_ema and key in ('state_dict_ema', 'model_ema'):
                        continue
                    if isinstance(state.get(key), dict):
                        state = state[key]
                        break
            if not isinstance(state, dict):
                raise ViTVariantsError(f'expected a state dict, found {type(state).__name__}', path=file)
            state = clean_state_dict(state)
            for name, value in state.items():
                if not isinstance(name, str) or not isinstance(value, torch.Tensor):
                    raise ViTVariantsError(f'state-dict entry is a {type(value).__name__}, not a tensor',
                                           path=file, key=str(name))
                self._add(name, index)
            self._states.append(state)

    def shape(self, name: str) -> Tuple[int, ...]:
        return tuple(self._states[self._where[name]][name].shape)

    def dtype(self, name: str) -> str:
        return str(self._states[self._where[name]][name].dtype).replace('torch.', '')

    def tensor(self, name: str) -> torch.Tensor:
        return self._states[self._where[name]][name]

    def release(self, name: str) -> None:
        if self._mapped[self._where[name]]:  # never on heap memory: DONTNEED would zero it
            release_tensor(self.tensor(name))

    def close(self) -> None:
        self._states.clear()


# -- choosing a store --------------------------------------------------------------------------------

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
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
            raise ViTVariantsError(f'truncated or corrupt zip archive: {e}', path=file) from e
        if any(n.endswith('.npy') for n in names):
            return 'npz'
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
    if kind == 'safetensors':
        return SafetensorsStore(files, limits)
    return TorchPickleStore(files, use_ema=use_ema)
