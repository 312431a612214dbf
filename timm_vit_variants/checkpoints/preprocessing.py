"""The preprocessing a source records, each value checked where a reader takes it from a file, and what each
ecosystem assumes when it records none.

A value that timm's eval transform cannot use (a mean of letters, a zero std, an unknown resize
filter, a crop of 150%) would be copied into ``config.json`` and fail only when the folder is used,
so it is refused here, naming the file and the key it was read from.
"""
import math
from typing import Any, Dict, Mapping, Optional, Tuple

from ..errors import ViTVariantsError

__all__ = ['INTERPOLATIONS', 'CROP_MODES', 'IMAGENET_MEAN', 'IMAGENET_STD', 'checked_preprocessing', 'checked_input_size',
           'channel_values', 'assumed_preprocessing', 'imagenet_preprocessing']

# The resize filters timm's transforms accept by name (timm.data.transforms.str_to_interp_mode).
INTERPOLATIONS = ('nearest', 'bilinear', 'bicubic', 'box', 'hamming', 'lanczos')
# timm's eval crop modes (timm.data.transforms_factory.transforms_imagenet_eval).
CROP_MODES = ('center', 'squash', 'border')
# torchvision's ImageNet statistics, which DINOv2, DINOv3 and DeiT-III (RoPE-ViT) normalise with.
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def channel_values(value: Any, in_chans: int, positive: bool, path: Optional[str], key: str) -> Tuple[float, ...]:
    """A per-channel mean or std: 3 (or ``in_chans``) finite numbers, each above 0 when ``positive``."""
    counts = sorted({3, in_chans})
    if not isinstance(value, (list, tuple)) or len(value) not in counts or not all(map(_number, value)):
        raise ViTVariantsError(f'expected {" or ".join(map(str, counts))} finite numbers (one per input channel), '
                               f'got {value!r}', path=path, key=key)
    if positive and not all(v > 0 for v in value):
        raise ViTVariantsError(f'a std must be above 0 for every channel (inputs are divided by it), got {value!r}',
                               path=path, key=key)
    return tuple(float(v) for v in value)


def checked_preprocessing(values: Mapping[str, Any], in_chans: int, path: Optional[str],
                          key_of: Mapping[str, str]) -> Dict[str, Any]:
    """``values`` (timm ``pretrained_cfg`` fields: mean, std, interpolation, crop_pct, crop_mode), each checked.

    ``key_of`` gives the name each field has in the file, for the error (e.g. ``pretrained_cfg.mean``);
    fields that are absent, None or '' (timm's ``train.py`` writes ``interpolation=''`` for "unset") are left out.
    """
    out: Dict[str, Any] = {}
    for field, value in values.items():
        if value is None or value == '':
            continue
        key = key_of.get(field, field)
        if field in ('mean', 'std'):
            value = channel_values(value, in_chans, field == 'std', path, key)
        elif field == 'interpolation' and value not in INTERPOLATIONS:
            raise ViTVariantsError(f'unknown interpolation {value!r} (expected one of {", ".join(INTERPOLATIONS)})',
                                   path=path, key=key)
        elif field == 'crop_pct' and not (_number(value) and 0 < value <= 1):
            raise ViTVariantsError(f'crop_pct must be a number in (0, 1], got {value!r}', path=path, key=key)
        elif field == 'crop_mode' and value not in CROP_MODES:
            raise ViTVariantsError(f'unknown crop_mode {value!r} (expected one of {", ".join(CROP_MODES)})',
                                   path=path, key=key)
        out[field] = value
    return out


def checked_input_size(value: Any, in_chans: int, path: Optional[str], key: str) -> None:
    """A recorded ``input_size`` (absent, or [channels, height, width]: positive integers, the model's channels),
    which timm's data config resizes every input to."""
    if value is None:
        return
    if not (isinstance(value, (list, tuple)) and len(value) == 3 and all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value) and value[0] == in_chans):
        raise ViTVariantsError(f'expected [channels, height, width]: positive integers, {in_chans} channels, got '
                               f'{value!r}', path=path, key=key)


_HALF = (0.5, 0.5, 0.5)


def assumed_preprocessing(interpolation: str, crop_pct: float, crop_mode: str, why: str,
                          range_why: Optional[str] = None, mean: Tuple[float, ...] = _HALF,
                          std: Tuple[float, ...] = _HALF) -> Dict[str, Tuple[Any, str]]:
    """An ecosystem's eval preprocessing, assumed for a source that records none: {field: (value, why)}.

    Most ecosystems read here feed pixels in [-1, 1] (mean = std = 0.5, the default); CLIP-trained ones give their
    ``mean`` and ``std``. ``range_why`` says why for those two, when it is another reason than ``why``.
    """
    return _assumed(mean, std, interpolation, crop_pct, crop_mode, why, range_why or why)


def imagenet_preprocessing(crop_pct: float, why: str) -> Dict[str, Tuple[Any, str]]:
    """The ImageNet eval preprocessing (ImageNet mean and std, bicubic, centre crop at ``crop_pct``), assumed for a
    source that records none: {field: (value, why)}."""
    return _assumed(IMAGENET_MEAN, IMAGENET_STD, 'bicubic', crop_pct, 'center', why, why)


def _assumed(mean: Tuple[float, ...], std: Tuple[float, ...], interpolation: str, crop_pct: float, crop_mode: str,
             why: str, range_why: str) -> Dict[str, Tuple[Any, str]]:
    return {'mean': (mean, range_why), 'std': (std, range_why), 'interpolation': (interpolation, why),
            'crop_pct': (crop_pct, why), 'crop_mode': (crop_mode, why)}
