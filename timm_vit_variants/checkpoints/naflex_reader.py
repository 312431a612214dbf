"""The shared base of the NaFlex readers: towers that embed P-P-C flattened patches with one Linear (a flax
Dense) and resize one learned table, stored as a grid, to each image's grid.

Each ecosystem's NaFlex reader is a variant of its plain reader on this base: big_vision's NaFlex
``.npz`` (``flax.BigVisionNaFlexCheckpoint``), timm's ``NaFlexVit`` (``timm_naflex.TimmNaFlexCheckpoint``)
and transformers' SigLIP 2 (``hf_siglip.HFSiglip2Checkpoint``); ``variant`` on the plain reader picks
it from the file's content.
"""
import math
from typing import Tuple

from .source import SourceCheckpoint

__all__ = ['NaFlexReader']


class NaFlexReader(SourceCheckpoint):
    """What the NaFlex variants share: the 'linear' patch embedding, its kernel over flattened patches, the
    grid table."""

    PATCH_EMBED = 'linear'

    def _flat_patch(self, key: str, flat: int, shape: Tuple[int, ...],
                    why: str) -> Tuple[int, int]:
        """(P, C) of a kernel over ``flat`` = P*P*C flattened inputs, which records neither: C as given, else 3
        assumed (``why``), and a square patch."""
        in_chans = self._unrecorded('in_chans', self.options.in_chans, 3, why)
        patch = math.isqrt(flat // in_chans) if in_chans > 0 and flat % in_chans == 0 else 0
        if patch * patch * in_chans != flat:
            raise self._error(f'a kernel over flattened patches has P*P*C inputs with a square patch; {flat} is not '
                              f'P*P*{in_chans}', key=key, shapes=(shape, ('P*P*C', 'width')), needs='in_chans')
        return patch, in_chans

    def _check_grid_table(self, key: str, width: int, leading: Tuple[int, ...] = ()) -> None:
        """Check a learned table laid out as a grid, (*leading, rows, cols, width), within the limits; sets
        ``self.grid``."""
        shape = self._shape(key)
        want = (*leading, 'rows', 'cols', width)
        if len(shape) != len(want) or shape[:len(leading)] != leading or shape[-1] != width:
            raise self._error(f'a grid position table must be ({", ".join(map(str, want))})', key=key,
                              shapes=(shape, want))
        rows, cols = shape[-3:-1]
        self._check_dims(key, tokens=rows * cols)
        self.grid = (rows, cols)
