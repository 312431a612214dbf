"""SAM's config parts (torch-free): its windows (``SamWindows``, scheme 'sam_windows'), its neck (``SamNeck``, pool
kind 'sam_neck') and its block kind 'sam'. Their modules are in ``sam_layers.py``."""
from dataclasses import dataclass
from typing import ClassVar, Optional, Tuple

from ..choices import _is_int, add_block_type
from ..parts import PoolPart, PositionScheme

__all__ = ['SamWindows', 'SamNeck', 'SAM_BLOCK']

# The block kind of SAM's image encoder (timm's ``vision_transformer_sam.Block``), built in ``sam_layers``.
SAM_BLOCK = 'sam'
add_block_type(SAM_BLOCK)


@dataclass(frozen=True)
class SamWindows(PositionScheme, scheme='sam_windows'):
    """Where SAM's blocks attend and how they know relative positions: each block but those of ``global_blocks``
    attends within ``window_size`` x ``window_size`` windows of the token grid (zero-padded to whole windows,
    timm's ``window_partition``), the others over the whole grid; with ``rel_pos``, each block's attention adds
    MViTv2's decomposed relative positions from its own height and width tables (``attn.rel_pos_h``/``_w``: a
    window's extent, or the nominal grid's for a global block), linearly resized to another grid as it runs (timm's
    ``get_rel_pos``). ``table_grid``: the grid a global block's tables cover, the one they were trained at (None: the
    nominal grid), so a model made for another grid keeps them as they are and resizes them as it runs, as timm does.
    Needs the 'sam' block kind."""
    window_size: int = 14
    global_blocks: Tuple[int, ...] = ()
    rel_pos: bool = True
    table_grid: Optional[Tuple[int, int]] = None
    slot: ClassVar[str] = 'rel_pos'

    def __post_init__(self) -> None:
        for name in ('global_blocks', 'table_grid'):  # JSON gives lists
            value = getattr(self, name)
            object.__setattr__(self, name, tuple(value) if isinstance(value, list) else value)
        self._check('window_size', lambda v: _is_int(v) and v >= 1, 'expected a positive integer')
        self._check('global_blocks', lambda v: isinstance(v, tuple) and all(_is_int(i) and i >= 0 for i in v),
                    'expected a list of block indices')
        self._check('table_grid', lambda v: v is None or (isinstance(v, tuple) and len(v) == 2 and
                                                         all(_is_int(i) and i >= 1 for i in v)),
                    'expected None or two positive integers (rows, cols)')
        self._bools('rel_pos')

    def window_of(self, block: int) -> int:
        """Block ``block``'s window side (0: global attention)."""
        return 0 if block in self.global_blocks else self.window_size


@dataclass(frozen=True)
class SamNeck(PoolPart, kind='sam_neck'):
    """SAM's neck over the token grid, then the mean of its outputs: a 1x1 conv to ``chans`` channels (no bias),
    LayerNorm2d, a 3x3 conv (no bias), LayerNorm2d (timm's ``neck``); ``chans`` None: LayerNorm2d over the tokens'
    width alone (``samvit_base_patch16_224``). It holds the model's final norm."""
    chans: Optional[int] = 256
    owns_final_norm: ClassVar[bool] = True

    def __post_init__(self) -> None:
        self._check('chans', lambda v: v is None or (_is_int(v) and v >= 1), 'expected a positive integer or None')

    def width(self, embed_dim: int) -> int:
        return self.chans or embed_dim
