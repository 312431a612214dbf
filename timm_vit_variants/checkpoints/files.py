"""Where a checkpoint's bytes are: file discovery, source checks and bounded ``config.json`` reading.

This is the one list of weight-file names a folder may hold (timm and transformers Hub layouts,
single files or index-named shards), and the one JSON reader. Every path a reader opens passes
through here, so a device, a FIFO or an oversized or absurdly nested JSON file is refused with one
clear error before anything is read.
"""
import json
import os
import stat
from typing import Any, Dict, List, Optional, Tuple

from ..errors import ViTVariantsError
from ..limits import DEFAULT_LIMITS, Limits

__all__ = ['CONFIG_FILE', 'SINGLE_WEIGHT_FILES', 'INDEX_FILES', 'check_source', 'check_regular_file', 'read_json',
           'weight_files', 'discover']

CONFIG_FILE = 'config.json'
# A Hub folder's weights: one of these files, else the shards an index names (first match wins).
SINGLE_WEIGHT_FILES = ('model.safetensors', 'pytorch_model.bin', 'model.pth', 'pytorch_model.pth',
                       'open_clip_model.safetensors', 'open_clip_pytorch_model.bin')
INDEX_FILES = ('model.safetensors.index.json', 'pytorch_model.bin.index.json')


def check_source(path: str) -> str:
    """``path`` if it is a regular file or a folder (links followed); anything else is refused."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise ViTVariantsError('source not found', path=path) from None
    except OSError as e:
        raise ViTVariantsError(f'cannot read the source: {e.strerror or e}', path=path) from None
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise ViTVariantsError('not a regular file or folder (a device, FIFO or socket is never read as a '
                               'checkpoint)', path=path)
    return path


def check_regular_file(path: str) -> str:
    """``path`` if it is a regular file; folders, devices and FIFOs are refused."""
    check_source(path)
    if os.path.isdir(path):
        raise ViTVariantsError('expected a file, found a folder', path=path)
    return path


def read_json(path: str, limits: Limits = DEFAULT_LIMITS) -> Dict[str, Any]:
    """A JSON object from a regular file of bounded size and nesting, or ViTVariantsError."""
    check_regular_file(path)
    size = os.path.getsize(path)
    if size > limits.json_bytes:
        raise ViTVariantsError(f'{size} bytes is too large for a JSON config (the json_bytes limit is '
                               f'{limits.json_bytes})', path=path, needs=f'limit:json_bytes={size}')
    try:
        with open(path, 'rb') as fp:
            data = json.loads(fp.read().decode('utf-8'))
    except RecursionError:
        raise ViTVariantsError('JSON nests too deeply to be a config', path=path) from None
    except (OSError, ValueError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ViTVariantsError(f'unreadable JSON: {e}', path=path) from None
    if not isinstance(data, dict):
        raise ViTVariantsError('expected a JSON object', path=path)
    return data


def weight_files(folder: str, limits: Limits = DEFAULT_LIMITS) -> List[str]:
    """The weight files of a Hub folder: the single file, or every shard its index names."""
    for name in SINGLE_WEIGHT_FILES:
        if os.path.isfile(os.path.join(folder, name)):
            return [os.path.join(folder, name)]
    for name in INDEX_FILES:
        index = os.path.join(folder, name)
        if os.path.isfile(index):
            weight_map = read_json(index, limits).get('weight_map')
            if not isinstance(weight_map, dict) or not weight_map or not all(
                    isinstance(v, str) and os.path.basename(v) == v and v for v in weight_map.values()):
                raise ViTVariantsError('shard index needs a weight_map of plain file names', path=index,
                                       key='weight_map')
            shards = [os.path.join(folder, shard) for shard in sorted(set(weight_map.values()))]
            missing = [s for s in shards if not os.path.isfile(s)]
            if missing:
                raise ViTVariantsError('shard named by the index is missing', path=missing[0])
            return shards
    raise ViTVariantsError(f'no weight file found (looked for {", ".join(SINGLE_WEIGHT_FILES + INDEX_FILES)})',
                           path=folder)


def discover(path: str, limits: Limits = DEFAULT_LIMITS) -> Tuple[List[str], Dict[str, Any], Optional[str]]:
    """(weight files, the ``config.json`` beside them or {}, its path or None) for a file or a folder."""
    path = check_source(path)
    if os.path.isdir(path):
        folder, files = path, weight_files(path, limits)
    else:
        folder, files = os.path.dirname(os.path.abspath(path)), [path]
    config_path = os.path.join(folder, CONFIG_FILE)
    if os.path.isfile(config_path):
        return files, read_json(config_path, limits), config_path
    return files, {}, None
