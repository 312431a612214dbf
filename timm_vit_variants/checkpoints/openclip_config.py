"""What open_clip records beside a tower's tensors: ``open_clip_config.json`` (its ``model_cfg`` and preprocessing)
and the parts of a full-model file that are not the image tower. Shared by the readers of open_clip's native towers
(``openclip``) and of its towers on a timm trunk (``openclip_timm``)."""
import os
from typing import Any, Dict, Iterable, Optional, Tuple

from ..errors import ViTVariantsError
from ..limits import Limits
from .files import read_json

__all__ = ['OPEN_CLIP_CONFIG', 'OPENAI_SCALARS', 'VISUAL', 'open_clip_config_path', 'read_open_clip_config',
           'open_clip_data_config', 'skipped_note']

OPEN_CLIP_CONFIG = 'open_clip_config.json'
OPENAI_SCALARS = ('input_resolution', 'context_length', 'vocab_size')
VISUAL = 'visual.'  # where every open_clip image tower sits in a full-model file


def skipped_note(names: Iterable[str]) -> Optional[str]:
    """What of an open_clip file is left out (the text tower, logit_scale, OpenAI's scalars); None when nothing is."""
    outside = sorted(n for n in names if not n.startswith(VISUAL))
    if not outside:
        return None
    scalars = [n for n in outside if n in OPENAI_SCALARS]
    text = [n for n in outside if n not in scalars and n != 'logit_scale']
    parts = [f'the text tower ({len(text)} tensors)'] if text else []
    parts += ['logit_scale'] if 'logit_scale' in outside else []
    parts += [f"the scalars {', '.join(scalars)}"] if scalars else []
    return f'skipped: {", ".join(parts)}; only the image tower (visual.*) is converted'


def open_clip_config_path(path: str) -> str:
    """Where the ``open_clip_config.json`` of a source (a folder, or a file in one) sits."""
    folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    return os.path.join(folder, OPEN_CLIP_CONFIG)


def read_open_clip_config(path: str, limits: Limits) -> Tuple[Dict[str, Any], Dict[str, Any], Optional[str]]:
    """(the whole ``open_clip_config.json``, its ``model_cfg``, its path) beside a source; ({}, {}, None) without one.
    ``model_cfg`` and its ``vision_cfg`` are checked to be JSON objects."""
    path = open_clip_config_path(path)
    if not os.path.isfile(path):
        return {}, {}, None
    data = read_json(path, limits)
    cfg = data.get('model_cfg', {})
    vision = cfg.get('vision_cfg', {}) if isinstance(cfg, dict) else None
    if not isinstance(cfg, dict) or not isinstance(vision, dict):
        raise ViTVariantsError('model_cfg and its vision_cfg must be JSON objects', path=path, key='model_cfg')
    return data, cfg, path


def open_clip_data_config(data: Dict[str, Any]) -> Dict[str, Any]:
    """An ``open_clip_config.json``'s ``preprocess_cfg`` as timm ``pretrained_cfg`` fields."""
    pre = data.get('preprocess_cfg')
    if not isinstance(pre, dict):
        return {}
    out: Dict[str, Any] = {}
    for name in ('mean', 'std'):
        value = pre.get(name)
        if isinstance(value, (list, tuple)) and len(value) == 3 and all(isinstance(v, (int, float)) for v in value):
            out[name] = tuple(float(v) for v in value)
    if pre.get('interpolation') in ('bicubic', 'bilinear', 'nearest'):
        out['interpolation'] = pre['interpolation']
    mode = pre.get('resize_mode')
    if mode == 'squash':
        out.update(crop_pct=1.0, crop_mode='squash')
    elif mode in (None, 'shortest'):
        out.update(crop_pct=1.0, crop_mode='center')
    return out
