"""The declared protocol of a position scheme's module (``positions.py``): ``SchemeModule``.

Every scheme module derives from it. The model's one reader of the slots (``positions.PositionsMixin``) calls these
hooks on whichever scheme fills a slot; a scheme overrides only those it needs, the rest do nothing. The slot's own
step (``add_to``, ``rotations``/``layer``, ``join_mask``, ``after_block``) is the scheme's kind, called by the mixin
only on the slot of that kind.
"""
from typing import Any, ClassVar, Dict, Iterable, List, Optional, Tuple

import torch
import torch.nn as nn

from .limits import Limits

__all__ = ['SchemeModule']


class SchemeModule(nn.Module):
    """Abstract base of a position scheme's module: each hook a no-op until a scheme overrides it.

    ``learned_table``: the scheme reads the model's learned table ``pos_embed`` (timm's parameter, which the model
    holds so its key stays ``pos_embed``), made for it at the nominal grid with the prefix slots.
    """
    learned_table = False
    # its parameters kept out of weight decay, by their names within the scheme (a table, as timm keeps ``pos_embed``)
    undecayed: ClassVar[Tuple[str, ...]] = ()

    @torch.jit.ignore
    def check_cost(self, longest: int, grids: Iterable[Tuple[int, int]], itemsize: int, limits: Limits, what: str,
                   device: Optional[torch.device] = None, key: Optional[str] = None) -> None:
        """Refuse, before anything is made, what sequences of up to ``longest`` tokens on ``grids`` would cost
        this scheme beyond ``limits`` (ViTVariantsError); a scheme whose cost does not grow with the input has none."""

    @torch.jit.ignore
    def pair_bytes(self, itemsize: int) -> int:
        """Bytes this scheme adds to each (query, key) pair of a chunk of packed rows (the packing budget)."""
        return 0

    @torch.jit.ignore
    def prepare_rows(self, chunk, patches, inputs: Dict[str, torch.Tensor], tensors: Dict[str, torch.Tensor],
                     sizes: Dict[str, List[int]]) -> None:
        """Lay this scheme's inputs out for a chunk of packed NaFlex rows, into ``tensors``/``sizes`` under its slot."""

    @torch.jit.ignore
    def set_grid_size(self, grid_size: Tuple[int, int]) -> None:
        """A new nominal grid (``set_input_size``); the model resizes the scheme's stored tables itself."""

    @torch.jit.ignore
    def block_options(self) -> Dict[str, Any]:
        """Options this scheme gives every block's builder beyond ``layers.build_blocks``' own (a family's block
        kind that needs them, SAM's windows); none by default."""
        return {}

    @torch.jit.ignore
    def keep_layers(self, depth: int) -> None:
        """Keep the first ``depth`` blocks' per-layer tensors (``prune_intermediate_layers``)."""
