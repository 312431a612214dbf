"""The tensor-store interface, and the private file mapping the stores view tensors in.

A store holds a checkpoint's named tensors, spread over one or more files, and hands them out one at
a time: a view of the mapped file wherever the container allows, so a streaming conversion keeps
about one tensor resident (``release`` hands a tensor's pages back).
"""
import abc
import math
import mmap
import os
import warnings
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import torch

from ..errors import ViTVariantsError
from ..memory import mapping_address, release_pages

__all__ = ['TensorStore', 'Mapping']


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

    def training_args(self) -> Dict[str, Any]:
        """What a training checkpoint records about how it was trained (timm ``train.py``'s args), if anything."""
        return {}

    def wrapped_in(self) -> Optional[str]:
        """The key a pickled checkpoint held its state dict under (``'model'`` for DeiT's releases), if any."""
        return None

    def release(self, name: str) -> None:
        """Hand the pages behind ``name`` back to the OS (they stay in the page cache)."""

    def read_ahead(self, names: Sequence[str]) -> None:
        """The tensors about to be read, in order, for a store that can check or fetch them ahead of use."""

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


class Mapping:
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

