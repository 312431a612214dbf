"""Byte sizes as people write them: ``5GB``, ``500MB``, ``1.5GiB`` or a plain count (Hub convention: GB = 10**9).

Free of heavy imports, so the command line can validate ``--max-shard-size`` while parsing.
"""
import math
from typing import Union

__all__ = ['DEFAULT_MAX_SHARD_SIZE', 'parse_size']

# The Hub's (and transformers' save_pretrained's) default shard size.
DEFAULT_MAX_SHARD_SIZE = '5GB'

_UNITS = {'': 1, 'B': 1, 'KB': 10 ** 3, 'MB': 10 ** 6, 'GB': 10 ** 9, 'TB': 10 ** 12,
          'KIB': 2 ** 10, 'MIB': 2 ** 20, 'GIB': 2 ** 30, 'TIB': 2 ** 40}


def parse_size(text: Union[str, int]) -> int:
    """A positive byte count below 2**63; ValueError with a usable message otherwise."""
    if isinstance(text, bool):
        raise ValueError(f'cannot read size {text!r}')
    if isinstance(text, int):
        value = float(text)
    else:
        raw = str(text).strip().upper().replace(' ', '')
        number = raw.rstrip('KMGTIB')
        unit = raw[len(number):]
        try:
            value = float(number) * _UNITS[unit] if number else math.nan
        except (KeyError, ValueError):
            value = math.nan
    if not math.isfinite(value) or value >= 2 ** 63:
        raise ValueError(f'cannot read size {text!r}; use e.g. 5GB, 500MB, 2GiB or a byte count')
    if value < 1:
        raise ValueError(f'size must be at least one byte, got {text!r}')
    return int(value)
