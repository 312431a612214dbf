"""Streaming safetensors writer: tensors arrive one at a time, in any order, and go straight to disk.

The safetensors library only writes whole dicts, which would hold every tensor of a shard in
memory. Here the layout (names, shapes, dtypes, offsets) is fixed up front from the target
model's meta-device state dict, each file's header is written first, and every tensor is written
at its offset as soon as it arrives, so peak memory is one tensor. Shards follow the Hub
convention: ``model-00001-of-0000N.safetensors`` plus ``model.safetensors.index.json``.
"""
import json
import os
import struct
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

import torch
from timm_vit_variants.checkpoints.files import read_json
from timm_vit_variants.errors import ViTVariantsError
from timm_vit_variants.limits import DEFAULT_LIMITS, Limits

from . import sizes

__all__ = [
    'SINGLE_FILE', 'INDEX_FILE', 'ShardedSafetensorsWriter', 'parse_size', 'weight_files', 'read_folder_into',
]

SINGLE_FILE = 'model.safetensors'
INDEX_FILE = 'model.safetensors.index.json'

_DTYPES = {
    torch.float32: 'F32', torch.float16: 'F16', torch.bfloat16: 'BF16', torch.float64: 'F64',
    torch.int64: 'I64', torch.int32: 'I32', torch.uint8: 'U8', torch.bool: 'BOOL',
}

Spec = Tuple[str, Tuple[int, ...], torch.dtype]


def parse_size(text: Union[str, int]) -> int:
    """'5GB', '500MB', '1.5GiB' or a byte count as an int number of bytes (Hub convention: GB = 10**9)."""
    try:
        return sizes.parse_size(text)
    except ValueError as e:
        raise ViTVariantsError(str(e)) from None


def _nbytes(shape: Sequence[int], dtype: torch.dtype) -> int:
    count = 1
    for s in shape:
        count *= int(s)
    return count * torch.empty((), dtype=dtype).element_size()


class _ShardFile:
    """One safetensors file whose header is known before any tensor data arrives."""

    def __init__(self, path: Path, specs: List[Spec]) -> None:
        self.path = path
        self.offsets: Dict[str, Tuple[int, int, Tuple[int, ...], torch.dtype]] = {}
        header: Dict[str, object] = {'__metadata__': {'format': 'pt'}}
        cursor = 0
        for name, shape, dtype in specs:
            size = _nbytes(shape, dtype)
            header[name] = {'dtype': _DTYPES[dtype], 'shape': list(shape), 'data_offsets': [cursor, cursor + size]}
            self.offsets[name] = (cursor, cursor + size, tuple(shape), dtype)
            cursor += size
        blob = json.dumps(header, separators=(',', ':')).encode('utf-8')
        blob += b' ' * (-len(blob) % 8)  # safetensors aligns the data section to 8 bytes
        self.data_start = 8 + len(blob)
        self.total = cursor
        self._file = open(path, 'wb')
        self._file.write(struct.pack('<Q', len(blob)))
        self._file.write(blob)
        self._file.truncate(self.data_start + cursor)

    def write(self, name: str, tensor: torch.Tensor) -> None:
        begin, _, _, _ = self.offsets[name]
        data = tensor.detach().cpu().contiguous()
        self._file.seek(self.data_start + begin)
        # uint8 view: numpy has no bfloat16, and a byte view writes without another copy
        self._file.write(memoryview(data.reshape(-1).view(torch.uint8).numpy()))

    def close(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()


class ShardedSafetensorsWriter:
    """Writes a fixed set of tensors into one or more safetensors files as they arrive.

    ``specs`` lists (name, shape, dtype) in file order. Files are split greedily so that each
    holds at most ``max_shard_size`` bytes of tensor data (a larger single tensor gets its own).
    """

    def __init__(self, folder: Union[str, Path], specs: Iterable[Spec], max_shard_size: int) -> None:
        self.folder = Path(folder)
        specs = [(n, tuple(int(s) for s in shape), dtype) for n, shape, dtype in specs]
        groups: List[List[Spec]] = [[]]
        used = 0
        for spec in specs:
            size = _nbytes(spec[1], spec[2])
            if groups[-1] and used + size > max_shard_size:
                groups.append([])
                used = 0
            groups[-1].append(spec)
            used += size
        count = len(groups)
        names = [SINGLE_FILE] if count == 1 else [
            f'model-{i + 1:05d}-of-{count:05d}.safetensors' for i in range(count)]
        self.files = [_ShardFile(self.folder / n, g) for n, g in zip(names, groups)]
        self.where = {spec[0]: f for f, g in zip(self.files, groups) for spec in g}
        self.pending = set(self.where)

    @property
    def expected(self) -> Dict[str, Tuple[Tuple[int, ...], torch.dtype]]:
        return {name: f.offsets[name][2:] for name, f in self.where.items()}

    def write(self, name: str, tensor: torch.Tensor) -> None:
        """Write one tensor; its name, shape and dtype must match the layout, and only once."""
        target = self.where.get(name)
        if target is None:
            raise ViTVariantsError('tensor is not part of the target model', key=name)
        if name not in self.pending:
            raise ViTVariantsError('tensor delivered twice', key=name)
        _, _, shape, dtype = target.offsets[name]
        if tuple(tensor.shape) != shape:
            raise ViTVariantsError('tensor shape does not fit the target model', key=name,
                                   shapes=(tensor.shape, shape))
        target.write(name, tensor.to(dtype))
        self.pending.discard(name)

    def close(self) -> Optional[Path]:
        """Finish every file and write the index when sharded; returns the index path or None."""
        for f in self.files:
            f.close()
        if len(self.files) == 1:
            return None
        index = {
            'metadata': {'total_size': sum(f.total for f in self.files)},
            'weight_map': {name: f.path.name for name, f in sorted(self.where.items())},
        }
        path = self.folder / INDEX_FILE
        path.write_text(json.dumps(index, indent=2) + '\n')
        return path

    def abort(self) -> None:
        for f in self.files:
            if not f._file.closed:
                f._file.close()


def weight_files(folder: Union[str, Path]) -> List[Path]:
    """The safetensors files of a Hub folder: the single file, or every shard named by the index."""
    folder = Path(folder)
    single = folder / SINGLE_FILE
    index = folder / INDEX_FILE
    if single.is_file():
        return [single]
    if index.is_file():
        weight_map = read_json(str(index)).get('weight_map')
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) and os.path.basename(v) == v
                                                       for v in weight_map.values()):
            raise ViTVariantsError('shard index needs a weight_map of plain file names', path=str(index),
                                   key='weight_map')
        return [folder / name for name in sorted(set(weight_map.values()))]
    raise ViTVariantsError(f'no {SINGLE_FILE} or {INDEX_FILE} in the folder', path=str(folder))


_TORCH_DTYPES = {v: k for k, v in _DTYPES.items()}


def _read_header(path: Path, fh, limits: Limits = DEFAULT_LIMITS) -> Tuple[int, Dict[str, dict]]:
    """(data start offset, tensor entries) of an open safetensors file, every entry checked against the file."""
    raw = fh.read(8)
    if len(raw) != 8:
        raise ViTVariantsError('truncated safetensors header', path=str(path))
    (length,) = struct.unpack('<Q', raw)
    size = os.fstat(fh.fileno()).st_size
    if length > size - 8:
        raise ViTVariantsError('safetensors header runs past the end of the file', path=str(path))
    limits.check('json_bytes', length, path=str(path), key='__header__')
    try:
        header = json.loads(fh.read(length))
    except RecursionError:
        raise ViTVariantsError('safetensors header nests too deeply', path=str(path)) from None
    except ValueError as e:
        raise ViTVariantsError(f'unreadable safetensors header: {e}', path=str(path)) from None
    if not isinstance(header, dict):
        raise ViTVariantsError('safetensors header is not a JSON object', path=str(path))
    header.pop('__metadata__', None)
    data_size = size - 8 - length
    for name, entry in header.items():
        offsets = entry.get('data_offsets') if isinstance(entry, dict) else None
        shape = entry.get('shape') if isinstance(entry, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_count(v) for v in offsets)
                and isinstance(shape, list) and all(_is_count(v) for v in shape)):
            raise ViTVariantsError('tensor entry needs "dtype", "shape" and two "data_offsets"', path=str(path),
                                   key=name)
        begin, end = offsets
        if entry.get('dtype') not in _TORCH_DTYPES or end > data_size or begin > end:
            raise ViTVariantsError('bad tensor entry (dtype or offsets out of range)', path=str(path), key=name)
    return 8 + length, header


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def read_folder_into(folder: Union[str, Path], targets: Dict[str, torch.Tensor]) -> None:
    """Read every tensor of a Hub folder straight into ``targets`` (e.g. a model's state dict).

    Bytes go from the file into the target's own storage with ``readinto``: no intermediate
    tensor and no memory map, so loading costs no memory beyond the model itself.
    """
    missing = set(targets)
    for path in weight_files(folder):
        if not path.is_file():
            raise ViTVariantsError('shard named by the index is missing', path=str(path))
        with open(path, 'rb') as fh:
            start, header = _read_header(path, fh)
            for name, entry in sorted(header.items(), key=lambda kv: kv[1]['data_offsets'][0]):
                target = targets.get(name)
                if target is None:
                    raise ViTVariantsError('tensor has no place in the model', path=str(path), key=name)
                if tuple(entry['shape']) != tuple(target.shape):
                    raise ViTVariantsError('tensor does not fit the model', path=str(path), key=name,
                                           shapes=(entry['shape'], target.shape))
                dtype = _TORCH_DTYPES[entry['dtype']]
                begin, end = entry['data_offsets']
                if end - begin != _nbytes(entry['shape'], dtype):
                    raise ViTVariantsError('tensor byte size does not match its shape', path=str(path), key=name)
                fh.seek(start + begin)
                direct = dtype == target.dtype and target.is_contiguous() and target.device.type == 'cpu'
                buffer = target.detach() if direct else torch.empty(tuple(entry['shape']), dtype=dtype)
                view = memoryview(buffer.reshape(-1).view(torch.uint8).numpy())
                if fh.readinto(view) != end - begin:
                    raise ViTVariantsError('file ends inside a tensor', path=str(path), key=name)
                if not direct:
                    with torch.no_grad():
                        target.copy_(buffer)
                missing.discard(name)
    if missing:
        raise ViTVariantsError(f'folder lacks {len(missing)} tensor(s): {sorted(missing)[:5]}', path=str(folder))
