"""Pickle-safe, lazy access to PyTorch weight files: safetensors and ``torch.save`` pickles.

Both open without reading tensor data (safetensors by header, zip pickles memory-mapped),
and every failure, including a pickle that asks for code, becomes ``ViTVariantsError``.
"""
import abc
import argparse
import zipfile
from typing import Any, Dict, Iterator, List, Sequence, Tuple

import torch
from safetensors import SafetensorError, safe_open
from timm.models import clean_state_dict

from ..errors import ViTVariantsError
from .files import check_regular_file

__all__ = ['TensorStore', 'open_store', 'is_safetensors']

# Keys timm training scripts wrap a state dict in, in timm's order of preference (EMA first).
_WRAPPER_KEYS = ('state_dict_ema', 'model_ema', 'state_dict', 'model')

_ST_DTYPES = {'F64': 'float64', 'F32': 'float32', 'F16': 'float16', 'BF16': 'bfloat16'}


class TensorStore(abc.ABC):
    """Named tensors spread over one or more files; data is read one tensor at a time."""

    def __init__(self, files: Sequence[str]) -> None:
        self.files = [str(f) for f in files]
        self._where: Dict[str, int] = {}      # name -> index into self.files
        self._handles: List[Any] = []         # safe_open handles or loaded (memory-mapped) dicts

    def names(self) -> List[str]:
        return list(self._where)

    def __contains__(self, name: str) -> bool:
        return name in self._where

    def file_of(self, name: str) -> str:
        return self.files[self._where[name]]

    @abc.abstractmethod
    def shape(self, name: str) -> Tuple[int, ...]:
        """Shape from metadata, without reading data."""

    @abc.abstractmethod
    def dtype(self, name: str) -> str:
        """dtype name from metadata, without reading data."""

    @abc.abstractmethod
    def get(self, name: str) -> torch.Tensor:
        """The stored tensor (may be a view of a memory-mapped file)."""

    def get_float32(self, name: str) -> torch.Tensor:
        tensor = self.get(name)
        if not tensor.is_floating_point():
            raise ViTVariantsError(f'expected a floating-point tensor, got {tensor.dtype}',
                                   path=self.file_of(name), key=name)
        return tensor.to(dtype=torch.float32, copy=True)  # one owned copy, never a view of a mapped file

    def items(self) -> Iterator[Tuple[str, Tuple[int, ...], str]]:
        for name in self._where:
            yield name, self.shape(name), self.dtype(name)

    def _add(self, name: str, index: int) -> None:
        if name in self._where:
            raise ViTVariantsError(f'tensor also stored in {self.files[self._where[name]]!r}',
                                   path=self.files[index], key=name)
        self._where[name] = index

    def close(self) -> None:
        self._handles.clear()


class SafetensorsStore(TensorStore):
    def __init__(self, files: Sequence[str]) -> None:
        super().__init__(files)
        for index, file in enumerate(self.files):
            try:
                handle = safe_open(file, framework='pt', device='cpu')
                names = list(handle.keys())
            except FileNotFoundError as e:
                raise ViTVariantsError('file not found', path=file) from e
            except (SafetensorError, OSError, ValueError) as e:
                raise ViTVariantsError(f'truncated or corrupt safetensors file: {e}', path=file) from e
            self._handles.append(handle)
            for name in names:
                self._add(name, index)

    def _slice(self, name: str) -> Any:
        return self._handles[self._where[name]].get_slice(name)

    def shape(self, name: str) -> Tuple[int, ...]:
        return tuple(int(s) for s in self._slice(name).get_shape())

    def dtype(self, name: str) -> str:
        raw = self._slice(name).get_dtype()
        return _ST_DTYPES.get(raw, raw.lower())

    def get(self, name: str) -> torch.Tensor:
        try:
            return self._handles[self._where[name]].get_tensor(name)
        except (SafetensorError, OSError, ValueError, RuntimeError) as e:
            raise ViTVariantsError(f'unreadable tensor data: {e}', path=self.file_of(name), key=name) from e


def _torch_load(file: str) -> Any:
    """``torch.load`` that never runs pickled code; zip-format files are memory-mapped."""
    try:
        mmap = zipfile.is_zipfile(file)
    except OSError as e:
        raise ViTVariantsError(f'unreadable file: {e}', path=file) from e
    try:
        # timm training checkpoints carry argparse.Namespace in 'args'; allow that one plain-data class.
        with torch.serialization.safe_globals([argparse.Namespace]):
            return torch.load(file, map_location='cpu', weights_only=True, mmap=mmap)
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
    def __init__(self, files: Sequence[str], unwrap: bool = False, use_ema: bool = True) -> None:
        super().__init__(files)
        for index, file in enumerate(self.files):
            state = _torch_load(file)
            if unwrap and isinstance(state, dict):
                for key in _WRAPPER_KEYS:
                    if not use_ema and key in ('state_dict_ema', 'model_ema'):
                        continue
                    if isinstance(state.get(key), dict):
                        state = state[key]
                        break
            if not isinstance(state, dict):
                raise ViTVariantsError(f'expected a state dict, found {type(state).__name__}', path=file)
            state = clean_state_dict(state) if unwrap else state
            for name, value in state.items():
                if not isinstance(name, str) or not isinstance(value, torch.Tensor):
                    raise ViTVariantsError(f'state-dict entry is a {type(value).__name__}, not a tensor',
                                           path=file, key=str(name))
                self._add(name, index)
            self._handles.append(state)

    def shape(self, name: str) -> Tuple[int, ...]:
        return tuple(self._handles[self._where[name]][name].shape)

    def dtype(self, name: str) -> str:
        return str(self._handles[self._where[name]][name].dtype).replace('torch.', '')

    def get(self, name: str) -> torch.Tensor:
        return self._handles[self._where[name]][name]


def is_safetensors(file: str) -> bool:
    """Sniff the safetensors layout: an 8-byte little-endian header length, then a JSON object."""
    try:
        with open(file, 'rb') as fp:
            head = fp.read(9)
    except FileNotFoundError as e:
        raise ViTVariantsError('file not found', path=file) from e
    except OSError as e:
        raise ViTVariantsError(f'unreadable file: {e}', path=file) from e
    return len(head) == 9 and head[8:9] == b'{' and not head.startswith(b'PK')


def open_store(files: Sequence[str], unwrap: bool = False, use_ema: bool = True) -> TensorStore:
    """A store for safetensors shards or torch pickles, told apart by content (all files of one kind)."""
    for file in files:
        check_regular_file(file)
    if all(is_safetensors(f) for f in files):
        return SafetensorsStore(files)
    return TorchPickleStore(files, unwrap=unwrap, use_ema=use_ema)
