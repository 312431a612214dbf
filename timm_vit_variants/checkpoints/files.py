"""Where a checkpoint's bytes are: source checks and bounded ``config.json`` reading.

Every path a reader opens passes through here, so a device, a FIFO or an oversized or
absurdly nested JSON file is refused with one clear error before anything is read.
"""
import json
import os
import stat
from typing import Any, Dict

from ..errors import ViTVariantsError
from ..limits import DEFAULT_LIMITS, Limits

__all__ = ['check_source', 'check_regular_file', 'read_json']


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
        raise ViTVariantsError(f'{size} bytes is too large for a JSON config (limit {limits.json_bytes}; '
                               'lift it with --limit json_bytes=N)', path=path)
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
