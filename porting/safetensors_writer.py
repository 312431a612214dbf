"""Writing a Hub folder's weights: a fixed set of tensors into pre-allocated safetensors files, sharded or not.

The layout (names, shapes, offsets) of every file is fixed up front, from a meta-device model: each file is
pre-allocated (a full disk fails here, not halfway) and every tensor is written at its offset as it comes,
straight from a mapped source where the layout already matches, so resident memory stays about one tensor.
Shards and their index are named as the readers look for them (``checkpoints.files``). The rest of the
folder (``config.json``, the card, reading back) is ``hub_folder.py``.
"""
import json
import math
import os
import struct
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import torch

from timm_vit_variants.checkpoints.files import INDEX_FILES, SINGLE_WEIGHT_FILES
from timm_vit_variants.checkpoints.stores import SAFETENSORS_DTYPES
from timm_vit_variants.config import TensorSpec
from timm_vit_variants.errors import ViTVariantsError

from .output import WriteBehind, pwrite_all

__all__ = ['SINGLE_FILE', 'INDEX_FILE', 'SafetensorsWriter']

# What we write: the first weight and index names the readers look for (``checkpoints.files``).
SINGLE_FILE, INDEX_FILE = SINGLE_WEIGHT_FILES[0], INDEX_FILES[0]
_ST_NAMES = {dtype: name for name, dtype in SAFETENSORS_DTYPES.items()}


def _nbytes(shape: Sequence[int], dtype: torch.dtype) -> int:
    return math.prod(shape) * torch.empty((), dtype=dtype).element_size()

def _bytes_of(tensor: torch.Tensor) -> memoryview:
    """A contiguous CPU tensor's bytes, without a copy (uint8 view: numpy has no bfloat16)."""
    return memoryview(tensor.reshape(-1).view(torch.uint8).numpy())


class _Shard:
    """One safetensors file: the header first, then a pre-allocated data section written at known offsets."""

    def __init__(self, path: Path, specs: List[TensorSpec], writes: WriteBehind) -> None:
        self.path = path
        self._writes = writes
        self.slots: Dict[str, Tuple[int, Tuple[int, ...], torch.dtype]] = {}
        header: Dict[str, Any] = {'__metadata__': {'format': 'pt'}}
        cursor = 0
        for name, shape, dtype in specs:
            size = _nbytes(shape, dtype)
            header[name] = {'dtype': _ST_NAMES[dtype], 'shape': list(shape), 'data_offsets': [cursor, cursor + size]}
            self.slots[name] = (cursor, tuple(shape), dtype)
            cursor += size
        blob = json.dumps(header, separators=(',', ':')).encode('utf-8')
        blob += b' ' * (-len(blob) % 8)  # safetensors aligns the data section to 8 bytes
        self.data_start = 8 + len(blob)
        self.total = cursor
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        pwrite_all(self._fd, memoryview(struct.pack('<Q', len(blob)) + blob), 0)
        if cursor:
            os.posix_fallocate(self._fd, 0, self.data_start + cursor)  # a full disk fails here, before any data

    def write(self, name: str, data: memoryview, keep: Any = None, then: Optional[Callable[[], None]] = None) -> int:
        """Queue ``data`` (viewing ``keep``) for its slot, ``then`` called once written; returns the write's ticket."""
        return self._writes.write(self._fd, data, self.data_start + self.slots[name][0], keep, then)

    def close(self) -> None:
        os.fsync(self._fd)
        os.close(self._fd)
        self._fd = -1

    def abort(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class SafetensorsWriter:
    """A fixed set of tensors written into one or more safetensors files, in any order, one at a time.

    ``specs`` lists (name, shape, dtype) in file order. Files are split greedily so that each
    holds at most ``max_shard_size`` bytes of tensor data (a larger single tensor gets its own).
    Hand a finished tensor to ``write`` (its bytes go to the file with one kernel copy, straight from
    a mapped source when it is one), or fill ``slot(name)`` and call ``done(name)``. The slots are two
    reused staging buffers, so no fresh pages are faulted in and zeroed per tensor (writing through a
    mapping of the new file would zero every page first). The writes run behind, in a thread of their
    own (``output.WriteBehind``): one slot is written while the other is filled.
    """

    def __init__(self, folder: Union[str, Path], specs: Iterable[TensorSpec], max_shard_size: int) -> None:
        self.folder = Path(folder)
        groups: List[List[TensorSpec]] = [[]]
        used = 0
        for name, shape, dtype in specs:
            size = _nbytes(shape, dtype)
            if groups[-1] and used + size > max_shard_size:
                groups.append([])
                used = 0
            groups[-1].append((name, tuple(int(s) for s in shape), dtype))
            used += size
        names = [SINGLE_FILE] if len(groups) == 1 else [
            f'model-{i + 1:05d}-of-{len(groups):05d}.safetensors' for i in range(len(groups))]
        self.files: List[_Shard] = []
        self._writes = WriteBehind(depth=2)
        try:
            for name, group in zip(names, groups):
                self.files.append(_Shard(self.folder / name, group, self._writes))
        except BaseException:
            self.abort()
            raise
        self._where = {spec[0]: shard for shard, group in zip(self.files, groups) for spec in group}
        self.pending = set(self._where)
        self._largest = max((_nbytes(shape, dtype) for group in groups for _, shape, dtype in group), default=0)
        self._staging: List[torch.Tensor] = []
        self._staged = [0, 0]  # the ticket of each staging buffer's last write
        self._turn = 0  # the staging buffer the next slot() fills

    def shape(self, name: str) -> Tuple[int, ...]:
        return self._shard(name).slots[name][1]

    def dtype(self, name: str) -> torch.dtype:
        return self._shard(name).slots[name][2]

    def _shard(self, name: str) -> _Shard:
        shard = self._where.get(name)
        if shard is None:
            raise ViTVariantsError('tensor is not part of the target model', key=name)
        if name not in self.pending:
            raise ViTVariantsError('tensor delivered twice', key=name)
        return shard

    def slot(self, name: str) -> torch.Tensor:
        """A staging tensor of the right shape and dtype to fill; ``done(name)`` writes it."""
        _, shape, dtype = self._shard(name).slots[name]
        if not self._staging:
            self._staging = [torch.empty(self._largest, dtype=torch.uint8) for _ in range(2)]
        self._writes.wait(self._staged[self._turn])  # its last write is done: it may be refilled
        return self._staging[self._turn][:_nbytes(shape, dtype)].view(dtype).view(shape)

    def done(self, name: str) -> None:
        """Write the filled staging tensor of ``name``."""
        shard = self._shard(name)
        _, shape, dtype = shard.slots[name]
        self._staged[self._turn] = shard.write(name, _bytes_of(self._staging[self._turn][:_nbytes(shape, dtype)]))
        self._turn ^= 1
        self.pending.discard(name)

    def write(self, name: str, tensor: torch.Tensor, then: Optional[Callable[[], None]] = None) -> None:
        """Write a finished tensor; its name and shape must match the layout (its dtype is converted). ``then``
        is called once ``tensor`` has been read (in the writing thread): e.g. to hand back its pages."""
        shard = self._shard(name)
        _, shape, dtype = shard.slots[name]
        if tuple(tensor.shape) != tuple(shape):
            raise ViTVariantsError('tensor shape does not fit the target model', key=name,
                                   shapes=(tensor.shape, shape))
        tensor = tensor.detach()
        if tensor.dtype != dtype or not tensor.is_contiguous() or tensor.device.type != 'cpu':
            with torch.no_grad():
                self.slot(name).copy_(tensor)
            self.done(name)
            if then is not None:
                then()
            return
        shard.write(name, _bytes_of(tensor), keep=tensor, then=then)
        self.pending.discard(name)

    def close(self) -> Optional[Path]:
        """Sync every file and write the index when sharded; returns the index path or None."""
        if self.pending:
            raise ViTVariantsError(f'{len(self.pending)} tensor(s) were never written', key=sorted(self.pending)[0])
        self._writes.flush()
        for shard in self.files:
            shard.close()
        if len(self.files) == 1:
            return None
        index = {
            'metadata': {'total_size': sum(f.total for f in self.files)},
            'weight_map': {name: shard.path.name for name, shard in sorted(self._where.items())},
        }
        path = self.folder / INDEX_FILE
        path.write_text(json.dumps(index, indent=2) + '\n')
        return path

    def abort(self) -> None:
        self._writes.abort()  # before the files close: no write is then in progress
        for shard in self.files:
            shard.abort()
