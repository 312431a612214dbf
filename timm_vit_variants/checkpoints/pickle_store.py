"""``torch.save`` files as a tensor store: loaded with ``weights_only=True`` (zip files memory-mapped).

Nothing is unpickled by anything but torch's weights-only unpickler. timm training checkpoints are
unwrapped from their ``state_dict``/``model``/EMA keys, as timm does. ``chosen_weights`` is the one place the
EMA-or-not choice is made: the store reads the key it picks, and a verification reference reads that same key
(``read_weights``), so both sides always run the same tensors.

A zip whose members are compressed (legal, and ``torch.load`` reads it) cannot be mapped: torch's mapping
views each member's bytes in place, so compressed bytes would be read as weights. Such a file is loaded onto
the heap instead, like a legacy pickle, after its claimed sizes pass the limits (``tensor_bytes`` per member,
``inflate_ratio`` over all, as for ``.npz``), so a decompression bomb is refused before anything is inflated.
"""
import argparse
import pickle
import zipfile
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from timm.models import clean_state_dict

from ..errors import ViTVariantsError
from ..limits import DEFAULT_LIMITS, Limits
from ..memory import release_tensor
from .store_base import TensorStore

__all__ = ['TorchPickleStore', 'chosen_weights', 'mappable_zip', 'read_weights', 'add_weight_entries']

# Keys training scripts wrap a state dict in, in timm's order of preference (EMA first); 'module': DeepSpeed's (EVA-02).
# A family whose training checkpoints hold their weights under other keys adds them (``add_weight_entries``).
_WRAPPER_KEYS: Tuple[str, ...] = ('state_dict_ema', 'model_ema', 'state_dict', 'model', 'module')
_EMA_KEYS: Tuple[str, ...] = ('state_dict_ema', 'model_ema')


def add_weight_entries(entries: Sequence[str], ema: Sequence[str] = ()) -> None:
    """More checkpoint keys a state dict may sit under, after timm's, in order of preference; those in ``ema`` are
    EMA weights (skipped without ``use_ema``). The family registry calls this with each family's ``weight_entries``."""
    global _WRAPPER_KEYS, _EMA_KEYS
    _WRAPPER_KEYS = _WRAPPER_KEYS + tuple(e for e in entries if e not in _WRAPPER_KEYS)
    _EMA_KEYS = _EMA_KEYS + tuple(e for e in ema if e not in _EMA_KEYS)
# What timm train.py's saved ``args`` may tell about the network and its preprocessing, with the types accepted.
_TRAINING_ARGS = {'model': str, 'model_kwargs': dict, 'num_classes': int, 'img_size': int, 'mean': (list, tuple),
                  'std': (list, tuple), 'interpolation': str, 'crop_pct': (int, float)}


def _training_args(checkpoint: Any) -> Dict[str, Any]:
    """The plain-data fields of a timm training checkpoint's ``args`` (an argparse.Namespace), typed as expected."""
    args = checkpoint.get('args') if isinstance(checkpoint, dict) else None
    fields = vars(args) if isinstance(args, argparse.Namespace) else args if isinstance(args, dict) else {}
    out = {k: fields[k] for k, kind in _TRAINING_ARGS.items()
           if isinstance(fields.get(k), kind) and not isinstance(fields.get(k), bool)}
    if 'model_kwargs' in out and not all(isinstance(k, str) for k in out['model_kwargs']):
        del out['model_kwargs']
    return out


def chosen_weights(checkpoint: Any, use_ema: bool = True) -> Optional[str]:
    """The key of ``checkpoint`` whose state dict is read: the first of timm's wrapper keys holding a dict, the EMA
    ones (``state_dict_ema``, BAAI's ``model_ema``) skipped unless ``use_ema``; None for a bare state dict."""
    if not isinstance(checkpoint, dict):
        return None
    return next((key for key in _WRAPPER_KEYS if (use_ema or key not in _EMA_KEYS) and
                 isinstance(checkpoint.get(key), dict)), None)


def read_weights(file: str, key: Optional[str], limits: Limits = DEFAULT_LIMITS) -> Dict[str, torch.Tensor]:
    """``file``'s state dict under ``key`` (the store's ``chosen_weights``, its ``wrapped_in``; None: the file is the
    state dict), cleaned as timm cleans it, viewing the file where it is a zip of stored members."""
    state = _torch_load(file, mappable_zip(file, limits))
    if key is None and chosen_weights(state) is not None:
        raise ViTVariantsError('a training checkpoint, read without naming the entry to read (weights_key)', path=file)
    if key is not None:
        if not isinstance(state, dict) or not isinstance(state.get(key), dict):
            raise ViTVariantsError(f'the weights were read from its {key!r} entry, which it does not hold', path=file,
                                   key=key)
        state = state[key]
    if not isinstance(state, dict):
        raise ViTVariantsError(f'expected a state dict, found {type(state).__name__}', path=file)
    return clean_state_dict(state)


def mappable_zip(file: str, limits: Limits = DEFAULT_LIMITS) -> bool:
    """Whether ``file`` is a zip of stored members (memory-mapped); a legacy pickle or a zip of compressed
    members is read onto the heap, the latter only once its claimed sizes pass the limits."""
    try:
        if not zipfile.is_zipfile(file):
            return False
        with zipfile.ZipFile(file) as archive:
            infos = archive.infolist()
    except FileNotFoundError as e:
        raise ViTVariantsError('file not found', path=file) from e
    except (OSError, zipfile.BadZipFile, NotImplementedError, ValueError, EOFError) as e:
        raise ViTVariantsError(f'unreadable file: {e}', path=file) from e
    packed = [info for info in infos if info.compress_type != zipfile.ZIP_STORED]
    for info in packed:
        limits.check('tensor_bytes', info.file_size, path=file, key=info.filename)
    claimed = sum(info.file_size for info in packed)
    compressed = sum(info.compress_size for info in packed)
    if packed and claimed > max(16 << 20, limits.inflate_ratio * compressed):
        worst = max(packed, key=lambda i: i.file_size / max(i.compress_size, 1))
        raise ViTVariantsError(
            f'compressed members claim {claimed} bytes from {compressed} stored bytes (more than '
            f'{limits.inflate_ratio}x, a decompression bomb); refusing before inflating any', path=file,
            key=worst.filename, needs=f'limit:inflate_ratio={-(-claimed // max(compressed, 1))}')
    return not packed


def _torch_load(file: str, mapped: bool) -> Any:
    """``torch.load`` that never runs pickled code; ``mapped`` zip files are memory-mapped."""
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
        elif isinstance(e, (RuntimeError, pickle.UnpicklingError, EOFError)):  # torch's and pickle's own words
            reason = f'truncated, corrupt or not a PyTorch weight file ({text})'
        else:  # a Python error from deep inside the unpickler (e.g. IndexError on text) says nothing more
            reason = 'truncated, corrupt or not a PyTorch weight file'
        raise ViTVariantsError(reason, path=file) from e


class TorchPickleStore(TensorStore):
    """``torch.save`` state dicts, unwrapped from timm's training-checkpoint keys (EMA first)."""

    def __init__(self, files: Sequence[str], use_ema: bool = True, limits: Limits = DEFAULT_LIMITS) -> None:
        super().__init__(files)
        self._states: List[Dict[str, torch.Tensor]] = []
        # zip files of stored members are memory-mapped; legacy pickles and compressed zips live on the heap
        self._mapped: List[bool] = []
        self._args: Dict[str, Any] = {}
        self._wrapper: Optional[str] = None
        for index, file in enumerate(self.files):
            self._mapped.append(mappable_zip(file, limits))
            state = _torch_load(file, self._mapped[-1])
            self._args = self._args or _training_args(state)
            key = chosen_weights(state, use_ema)
            if key is not None:
                state = state[key]
                self._wrapper = self._wrapper or key
            if not isinstance(state, dict):
                raise ViTVariantsError(f'expected a state dict, found {type(state).__name__}', path=file)
            state = clean_state_dict(state)
            for name, value in state.items():
                if not isinstance(name, str) or not isinstance(value, torch.Tensor):
                    raise ViTVariantsError(f'state-dict entry is a {type(value).__name__}, not a tensor',
                                           path=file, key=str(name))
                self._add(name, index)
            self._states.append(state)

    def training_args(self) -> Dict[str, Any]:
        return dict(self._args)

    def wrapped_in(self) -> Optional[str]:
        return self._wrapper

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
