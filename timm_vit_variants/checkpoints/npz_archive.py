"""Lazy, pickle-free access to the arrays of a NumPy ``.npz`` archive.

``np.load`` would do, but it cannot report shapes without reading data (needed for
``inventory``) and it leaks zip/zlib exceptions; this reads each member's ``.npy``
header on its own and turns every failure into ``ViTVariantsError``.
"""
import math
import zipfile
import zlib
from typing import Dict, Iterator, List, Tuple

import numpy as np
import torch

from ..errors import ViTVariantsError
from ..limits import DEFAULT_LIMITS, Limits

__all__ = ['NpzArchive', 'to_float32']

# Errors a damaged zip member or .npy header can raise while being read.
_READ_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, KeyError, TypeError, SyntaxError,
                MemoryError, OverflowError, IndexError, NotImplementedError)


# Upper bounds on a ViT's array count: 16 per block in flax layouts, plus embeddings, norms and heads.
_ARRAYS_PER_BLOCK = 24
_ARRAYS_OUTSIDE_BLOCKS = 64


def to_float32(array: np.ndarray, *, path: str, key: str) -> torch.Tensor:
    """Float array (float16/32/64 or bfloat16 stored as 2-byte void) as a float32 tensor."""
    if array.dtype.kind == 'V' and array.dtype.itemsize == 2:
        # bfloat16 is the upper half of a float32: widen the raw bits and shift them into place.
        bits = np.ascontiguousarray(array).view('<u2').astype(np.uint32) << 16
        return torch.from_numpy(bits.view(np.float32))
    if array.dtype.kind == 'f':
        return torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32))
    raise ViTVariantsError(f'expected a floating-point array, got dtype {array.dtype}', path=path, key=key)


class NpzArchive:
    """Member names, shapes and dtypes from the headers; data one array at a time."""

    def __init__(self, path: str, limits: Limits = DEFAULT_LIMITS) -> None:
        self.path = str(path)
        self.limits = limits
        try:
            self._zip = zipfile.ZipFile(self.path)
        except FileNotFoundError as e:
            raise ViTVariantsError('file not found', path=self.path) from e
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
            raise ViTVariantsError(f'not a readable .npz (zip) archive: {e}', path=self.path) from e
        try:
            self._members: Dict[str, zipfile.ZipInfo] = {}
            for info in self._zip.infolist():
                if info.filename.endswith('.npy'):
                    self._members[info.filename[:-len('.npy')]] = info
            self._check_claims()
            self._headers: Dict[str, Tuple[Tuple[int, ...], np.dtype]] = {}
            for key in self._members:
                self._headers[key] = self._read_header(key)
        except BaseException:
            self._zip.close()
            raise

    def _check_claims(self) -> None:
        """Refuse members whose directory entries claim more than any real checkpoint, before inflating any."""
        most = _ARRAYS_PER_BLOCK * self.limits.depth + _ARRAYS_OUTSIDE_BLOCKS
        if len(self._members) > most:
            raise ViTVariantsError(
                f'{len(self._members)} arrays is more than a ViT within the depth limit of {self.limits.depth} '
                f'holds (at most {most}); refusing before reading any (lift it with --limit depth=N)', path=self.path)
        for key, info in self._members.items():
            self.limits.check('tensor_bytes', info.file_size, path=self.path, key=key)
        packed = [info for info in self._members.values() if info.compress_type != zipfile.ZIP_STORED]
        claimed = sum(info.file_size for info in packed)
        compressed = sum(info.compress_size for info in packed)
        # Float weights deflate by ~1.1x; a tiny allowance covers zero-filled small tensors.
        if claimed > max(16 << 20, self.limits.inflate_ratio * compressed):
            worst = max(packed, key=lambda i: i.file_size / max(i.compress_size, 1))
            raise ViTVariantsError(
                f'compressed members claim {claimed} bytes from {compressed} stored bytes (more than '
                f'{self.limits.inflate_ratio}x, a decompression bomb); refusing before inflating any (if genuine, '
                f'lift it with --limit inflate_ratio=N)', path=self.path, key=worst.filename[:-len('.npy')])

    def _read_header(self, key: str) -> Tuple[Tuple[int, ...], np.dtype]:
        try:
            with self._zip.open(self._members[key]) as fp:
                version = np.lib.format.read_magic(fp)
                if version == (1, 0):
                    shape, _, dtype = np.lib.format.read_array_header_1_0(fp)
                else:
                    shape, _, dtype = np.lib.format.read_array_header_2_0(fp)
                header_len = fp.tell()
        except _READ_ERRORS as e:
            raise ViTVariantsError(f'unreadable .npy header: {e}', path=self.path, key=key) from e
        if dtype.hasobject:
            raise ViTVariantsError('object arrays need pickle, which is never loaded', path=self.path, key=key)
        shape = tuple(int(s) for s in shape)
        # Checked before any data is read, so a damaged header cannot trigger a huge allocation.
        if self._members[key].file_size != header_len + math.prod(shape) * dtype.itemsize:
            raise ViTVariantsError(f'array size does not match its header {shape} {dtype} (truncated or corrupt)',
                                   path=self.path, key=key)
        return shape, dtype

    def keys(self) -> List[str]:
        return list(self._headers)

    def __contains__(self, key: str) -> bool:
        return key in self._headers

    def shape(self, key: str) -> Tuple[int, ...]:
        return self._headers[key][0]

    def dtype(self, key: str) -> str:
        dtype = self._headers[key][1]
        return 'bfloat16' if dtype.kind == 'V' and dtype.itemsize == 2 else str(dtype)

    def items(self) -> Iterator[Tuple[str, Tuple[int, ...], str]]:
        for key in self._headers:
            yield key, self.shape(key), self.dtype(key)

    def read(self, key: str) -> np.ndarray:
        """The array stored under ``key`` (CRC-checked by zipfile, never unpickled)."""
        try:
            with self._zip.open(self._members[key]) as fp:
                array = np.lib.format.read_array(fp, allow_pickle=False)
        except _READ_ERRORS as e:
            raise ViTVariantsError(f'truncated or corrupt array data: {e}', path=self.path, key=key) from e
        if tuple(array.shape) != self.shape(key):
            raise ViTVariantsError('array data does not match its header', path=self.path, key=key,
                                   shapes=(array.shape, self.shape(key)))
        return array

    def get_float32(self, key: str) -> torch.Tensor:
        return to_float32(self.read(key), path=self.path, key=key)

    def close(self) -> None:
        self._zip.close()
