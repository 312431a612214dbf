"""``ReaderOptions``: the facts a caller gives about a source that the source may not record.

``open_checkpoint(path, **hints)`` takes them as keywords (CLI flags of the same names) and builds one
``ReaderOptions``, checked once here; every reader reads ``self.options.<name>``. None means "not given".
"""
from dataclasses import dataclass, fields, replace
from typing import Any, Optional, Tuple

from ..errors import ViTVariantsError

__all__ = ['ReaderOptions', 'HINTS', 'POS_EMBED_HINTS']

# The position schemes a caller may name for a source without a stored table.
POS_EMBED_HINTS = ('sincos', 'none', 'learn')


@dataclass(frozen=True)
class ReaderOptions:
    """The caller's facts about a source (None, or the default, when not given).

    Attributes:
        prefix: Key prefix inside the file (npz: e.g. 'params/'; torch: stripped before mapping).
        img_size: Source image size, to split a non-square learned table into its grid.
        num_heads: Attention heads (bare state dicts of non-standard width; checked against recorded ones).
        assume_heads: For a bare timm state dict of a non-standard width: assume timm's 64-wide heads.
        act_layer: The MLP activation, over the source's (e.g. 'gelu' for timm's exact-GELU AugReg port).
        norm_eps: The LayerNorm epsilon, over the source's.
        pos_embed: 'sincos', 'none' or 'learn' for a checkpoint without a position table (default 'sincos').
        use_ema: Prefer EMA weights in timm training checkpoints (default True, as timm).
        in_chans: Input channels where the source does not record them (a NaFlex patch kernel).
    """
    prefix: Optional[str] = None
    img_size: Any = None
    num_heads: Optional[int] = None
    assume_heads: bool = False
    act_layer: Optional[str] = None
    norm_eps: Optional[float] = None
    pos_embed: Optional[str] = None
    use_ema: bool = True
    in_chans: Optional[int] = None

    def __post_init__(self) -> None:
        if self.pos_embed not in (None, *POS_EMBED_HINTS):
            raise ViTVariantsError(f"pos_embed hint must be 'sincos', 'none' or 'learn', got {self.pos_embed!r}")

    @classmethod
    def of(cls, **hints: Any) -> 'ReaderOptions':
        """The options ``hints`` name (keywords of ``HINTS``; None: not given); an unknown keyword is a caller's bug
        (TypeError)."""
        unknown = sorted(set(hints) - set(HINTS))
        if unknown:
            raise TypeError(f'unknown checkpoint hint(s) {unknown}; expected some of {HINTS}')
        return cls(**{k: v for k, v in hints.items() if v is not None})

    def with_prefix(self, prefix: str) -> 'ReaderOptions':
        """These options, with ``prefix`` where the tensors sit."""
        return replace(self, prefix=prefix)


# The keywords ``open_checkpoint`` takes, in the order its docs list them.
HINTS: Tuple[str, ...] = tuple(f.name for f in fields(ReaderOptions))
