"""Sanity limits on what a checkpoint or config may claim, checked before anything is allocated.

A hostile file can claim any depth, width or size in a few bytes; every reader and the model
config check the claims against these limits first, so memory and time stay bounded. Each limit
can be lifted (``Limits(depth=512)``, on the command line ``--limit depth=512``) for a genuinely larger model.

``rel_pos_bytes`` also bounds what one input may cost a model with relative positions (whose bias grows with the
square of the tokens): the model checks each input against its ``limits`` (``model.limits``, which
``timm.create_model(..., limits=...)`` sets) before the bias is made.
"""
from dataclasses import dataclass, fields, replace
from typing import Iterable, Optional

from .errors import ViTVariantsError

__all__ = ['Limits', 'DEFAULT_LIMITS', 'rel_pos_bytes']


@dataclass(frozen=True)
class Limits:
    """Upper bounds on a model's dimensions and on the bytes a source may ask us to hold."""
    depth: int = 256
    width: int = 16384
    mlp: int = 65536
    heads: int = 1024
    classes: int = 100_000
    img_size: int = 16384
    tokens: int = 16384  # a 128x128 grid: 2048 px at patch 16; verification cost grows with its square
    # One tensor of the largest legal shape (width x mlp, float32) fits; anything claiming more is refused.
    tensor_bytes: int = 4 << 30
    # Relative positions (BEiT) of one input: a block's (heads, S, S) bias and (S, S) index for S tokens, and the
    # tables resized to its grids. Quadratic in S: 2 GiB holds a BEiT-L at 1024 px (4097 tokens).
    rel_pos_bytes: int = 2 << 30
    # A JSON config or shard index larger than this is not a config.
    json_bytes: int = 16 << 20
    # Deflated .npz members may claim at most this many times their compressed bytes (floats compress ~1.1x).
    inflate_ratio: int = 32

    def with_overrides(self, pairs: Iterable[str]) -> 'Limits':
        """A copy with ``name=value`` overrides (the form of the command line's ``--limit``)."""
        names = {f.name for f in fields(self)}
        changes = {}
        for pair in pairs:
            name, _, value = pair.partition('=')
            name = name.strip().replace('-', '_')
            if name not in names:
                raise ViTVariantsError(f'unknown limit {name!r} in {pair!r}; known: {", ".join(sorted(names))}')
            try:
                number = int(value)
            except ValueError:
                raise ViTVariantsError(f'limit {name} needs a positive integer, got {value!r}') from None
            if number < 1:
                raise ViTVariantsError(f'limit {name} needs a positive integer, got {value!r}')
            changes[name] = number
        return replace(self, **changes)

    def check(self, name: str, value: int, *, path: Optional[str] = None, key: Optional[str] = None) -> None:
        """Raise naming the claim, the limit and how to lift it, when ``value`` exceeds limit ``name``."""
        bound = getattr(self, name)
        if value > bound:
            raise ViTVariantsError(
                f'{name} {value} exceeds the limit of {bound}; refusing before reading or allocating anything '
                f'(if the file is genuine, lift the {name} limit to {value})', path=path, key=key,
                needs=f'limit:{name}={value}')

    def check_dims(
            self,
            *,
            path: Optional[str] = None,
            key: Optional[str] = None,
            **dims: Optional[int],
    ) -> None:
        """Check several named dimensions at once (None values are skipped)."""
        for name, value in dims.items():
            if value is not None:
                self.check(name, int(value), path=path, key=key)


def rel_pos_bytes(seq_len: int, heads: int, itemsize: int = 4) -> int:
    """Bytes of one block's relative positions over ``seq_len`` tokens: its (heads, S, S) bias in ``itemsize``-byte
    floats and the (S, S) int64 index into its table (what ``Limits.rel_pos_bytes`` bounds, with resized tables)."""
    return seq_len * seq_len * (heads * itemsize + 8)


DEFAULT_LIMITS = Limits()
