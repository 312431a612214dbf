"""NumPy ``.npz`` archives as a tensor store: stored members viewed in place, deflated ones inflated one at a time.

A stored (uncompressed) member is memory-mapped and viewed at its offset, found from the zip local
header and the npy header (read with ``pread``, so no member's pages are touched before it is used).
Every member's CRC-32 is checked as it is read, as the zip format and NumPy's own reader demand; told the
order the members will be used in (``read_ahead``), a thread checks the next ones while the current one is
copied and written (zlib releases the GIL), a bounded window ahead. Nothing is ever unpickled.
"""
import io
import math
import struct
import threading
import zipfile
import zlib
from concurrent.futures import Future
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from ..errors import ViTVariantsError
from ..limits import DEFAULT_LIMITS, Limits
from .store_base import Mapping, TensorStore

__all__ = ['NpzStore']

_NPY_FLOATS = {'f2': torch.float16, 'f4': torch.float32, 'f8': torch.float64}
# Upper bounds on a ViT's array count: 16 per block in flax layouts, plus embeddings, norms and heads.
_ARRAYS_PER_BLOCK = 24
_ARRAYS_OUTSIDE_BLOCKS = 64
# How far the CRC-32 thread may run ahead of the member in use: its pages are faulted in (resident) until used.
_READ_AHEAD_BYTES = 64 << 20
# Errors a damaged zip member or npy header can raise while being read.
_READ_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, KeyError, TypeError, SyntaxError,
                MemoryError, OverflowError, IndexError, NotImplementedError, struct.error)


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
        # name -> the CRC-32 check of a stored member: claimed (a Future) by whichever thread computes it first
        self._crc: Dict[str, Future] = {}
        self._crc_lock = threading.Condition()
        self._ahead: Optional[_ReadAhead] = None
        try:
            self._zip = zipfile.ZipFile(self.path)
        except FileNotFoundError as e:
            raise ViTVariantsError('file not found', path=self.path) from e
        except (zipfile.BadZipFile, NotImplementedError, OSError, ValueError, EOFError) as e:  # a zip version or compression zipfile cannot read
            raise ViTVariantsError(f'not a readable .npz (zip) archive: {e}', path=self.path) from e
        self._mapping: Optional[Mapping] = None
        try:
            members = {info.filename[:-len('.npy')]: info for info in self._zip.infolist()
                       if info.filename.endswith('.npy')}
            self._check_claims(members)
            self._mapping = Mapping(self.path)
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
        self._check_crc(name)
        if fortran:  # column-major bytes: view them reversed, then transpose back
            return self._mapping.view(offset, torch_dtype, shape[::-1]).permute(*reversed(range(len(shape))))
        return self._mapping.view(offset, torch_dtype, shape)

    def _check_crc(self, name: str) -> None:
        """The CRC-32 of a stored member (its npy header and data), computed over the mapped bytes, once: here,
        or by the read-ahead thread, which this then waits for."""
        with self._crc_lock:
            if self._ahead is not None:
                self._ahead.used(name)
            check = self._crc.get(name)
            mine = check is None
            if mine:
                check = self._crc[name] = Future()
        if mine:
            self._compute_crc(name, check)
        check.result()  # raises the member's ViTVariantsError

    def _compute_crc(self, name: str, check: Future) -> None:
        """Answer ``check`` (claimed for ``name``): None, or the error its reader raises; never left unanswered."""
        info, _, _, _, offset = self._members[name]
        start = offset - (info.file_size - self._nbytes(name))
        try:
            with memoryview(self._mapping.map) as whole, whole[start:start + info.file_size] as member:
                crc = zlib.crc32(member)
        except BaseException as e:
            check.set_exception(e)
            return
        if crc != info.CRC:
            check.set_exception(ViTVariantsError(
                f'bad CRC-32 (stored {info.CRC:08x}, computed {crc:08x}): the archive is corrupt', path=self.path,
                key=name))
        else:
            check.set_result(None)

    def read_ahead(self, names: Sequence[str]) -> None:
        """The members about to be used, in order: a thread checks their CRC-32s ahead of use, beside the
        caller's copies and writes (whose pages it faults in, at most ``_READ_AHEAD_BYTES`` ahead)."""
        self._stop_read_ahead()
        order = [n for n in dict.fromkeys(names) if n in self._members and self._members[n][4] is not None
                 and _npz_member_dtype(self._members[n][2])[1] is not None and n not in self._crc]
        if self._mapping is None or self._mapping.map is None or len(order) < 2:
            return
        self._ahead = _ReadAhead(self, order)
        self._ahead.start()

    def _stop_read_ahead(self) -> None:
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead.stop()

    def _nbytes(self, name: str) -> int:
        _, shape, dtype, _, _ = self._members[name]
        return math.prod(shape) * dtype.itemsize

    def _inflate(self, name: str, info: zipfile.ZipInfo, dtype: np.dtype) -> torch.Tensor:
        """A deflated (or non-native byte order) member read into one owned tensor, CRC-checked by zipfile."""
        try:
            with self._zip.open(info) as fp:
                array = np.ascontiguousarray(np.lib.format.read_array(fp, allow_pickle=False))
                fp.read()  # zipfile checks the CRC-32 once the member is read to its end
        except _READ_ERRORS as e:
            raise ViTVariantsError(f'truncated or corrupt array data: {e}', path=self.path, key=name) from e
        if dtype.kind == 'V':
            return torch.from_numpy(array.view(np.uint16)).view(torch.bfloat16)
        if dtype.kind != 'f':
            raise ViTVariantsError(f'expected a floating-point array, got dtype {dtype}', path=self.path, key=name)
        return torch.from_numpy(array.astype(dtype.newbyteorder('='), copy=False))

    def release(self, name: str) -> None:
        offset = self._members[name][4]
        if offset is not None:
            self._mapping.release(offset, offset + self._nbytes(name))

    def close(self) -> None:
        self._stop_read_ahead()
        if self._mapping is not None:
            self._mapping.close()
        self._zip.close()


class _ReadAhead(threading.Thread):
    """Checks the CRC-32s of ``order``'s members one after another, staying within a window of the last one used."""

    def __init__(self, store: NpzStore, order: List[str]) -> None:
        super().__init__(name='vit-port-npz-crc', daemon=True)
        self.store, self.order = store, order
        self.position = {name: i for i, name in enumerate(order)}
        self.last_used = -1
        self.stopped = False

    def used(self, name: str) -> None:
        """Called (under the store's lock) when ``name`` is read: the window moves on."""
        self.last_used = max(self.last_used, self.position.get(name, -1))
        self.store._crc_lock.notify_all()

    def stop(self) -> None:
        with self.store._crc_lock:
            self.stopped = True
            self.store._crc_lock.notify_all()
        self.join()

    def run(self) -> None:
        store, lock = self.store, self.store._crc_lock
        for i, name in enumerate(self.order):
            with lock:
                # the members between the one in use and this one stay resident until used: bound them
                while not self.stopped and i > self.last_used + 1 and sum(
                        store._members[n][0].file_size for n in self.order[self.last_used + 1:i + 1]) > _READ_AHEAD_BYTES:
                    lock.wait()
                if self.stopped:
                    return
                if name in store._crc:
                    continue
                check = store._crc[name] = Future()
            store._compute_crc(name, check)

