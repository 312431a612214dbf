"""safetensors files (one, or the shards of a Hub folder) as a tensor store, memory-mapped.

The header is checked entry by entry before any tensor is viewed, as strictly as the safetensors
library checks it: known dtypes, byte sizes that match the shapes, and offsets in order, contiguous,
non-overlapping and covering the data section exactly.
"""
import json
import math
import os
import struct
from typing import Any, Dict, List, Sequence, Tuple

import torch

from ..errors import ViTVariantsError
from ..limits import DEFAULT_LIMITS, Limits
from .store_base import Mapping, TensorStore

__all__ = ['SAFETENSORS_DTYPES', 'read_safetensors_header', 'SafetensorsStore']

# safetensors dtype names and their torch dtypes.
SAFETENSORS_DTYPES = {
    'F64': torch.float64, 'F32': torch.float32, 'F16': torch.float16, 'BF16': torch.bfloat16,
    'I64': torch.int64, 'I32': torch.int32, 'I16': torch.int16, 'I8': torch.int8, 'U8': torch.uint8,
    'BOOL': torch.bool,
}


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
    _check_offsets(path, header, data_size)
    return 8 + length, header


def _check_offsets(path: str, header: Dict[str, dict], data_size: int) -> None:
    """As the format requires: the tensors tile the data section in order, without gaps or overlaps."""
    cursor = 0
    for name, entry in sorted(header.items(), key=lambda item: tuple(item[1]['data_offsets'])):
        begin, end = entry['data_offsets']
        if begin != cursor:
            reason = 'overlaps the tensor before it' if begin < cursor else 'leaves a gap before it'
            raise ViTVariantsError(f'invalid tensor offsets [{begin}, {end}]: the tensor {reason} (ends at '
                                   f'{cursor}); the file is corrupt', path=path, key=name)
        cursor = end
    if cursor != data_size:
        raise ViTVariantsError(f'the tensors cover {cursor} of the {data_size} data bytes; the file is truncated or '
                               'corrupt', path=path, key='__header__')


class SafetensorsStore(TensorStore):
    """One or more safetensors files (Hub shards), memory-mapped."""

    def __init__(self, files: Sequence[str], limits: Limits = DEFAULT_LIMITS) -> None:
        super().__init__(files)
        self._mappings: List[Mapping] = []
        self._entries: Dict[str, Tuple[int, torch.dtype, Tuple[int, ...], int]] = {}  # start, dtype, shape, end
        try:
            for index, file in enumerate(self.files):
                with open(file, 'rb') as fp:
                    start, header = read_safetensors_header(file, fp, limits)
                self._mappings.append(Mapping(file))
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
