"""``SourceCheckpoint``: the format-independent face of every checkpoint reader.

A reader inspects names and shapes only when it is opened, and builds a conversion
plan: one ``PlanItem`` per tensor of our (timm-layout) state dict, naming the source
arrays it is made from. ``iter_tensors`` then executes the plan one item at a time,
so only the arrays of the current item are in memory.
"""
import abc
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch

from ..errors import ViTVariantsError
from ..limits import DEFAULT_LIMITS, Limits

__all__ = ['SourceCheckpoint', 'PlanItem', 'Inventory']

Inventory = List[Tuple[str, Tuple[int, ...], str]]


@dataclass(frozen=True)
class PlanItem:
    """How one of our tensors is made: ``build(*sources)``, each optionally sliced at ``index`` (scan layout)."""
    key: str
    shape: Tuple[int, ...]
    sources: Tuple[str, ...]
    build: Callable[..., torch.Tensor]
    index: Optional[int] = None


def as_is(x: torch.Tensor) -> torch.Tensor:
    return x


class SourceCheckpoint(abc.ABC):
    """An opened source checkpoint: inferred architecture plus streamed, converted tensors.

    Attributes:
        path: The file or folder that was opened.
        format: One of ``FORMATS``.
        model_args: ``SimpleVisionTransformer`` kwargs that reproduce the source network.
        grid: Source position grid (rows, cols) of a learned table, None otherwise.
        label_names: Class names (transformers ``id2label``) when the source has them.
        source_config: The raw config found next to the weights, if any.
    """

    format: str = ''

    def __init__(self, path: 'str | os.PathLike', limits: Limits = DEFAULT_LIMITS) -> None:
        self.path = str(path)
        self.limits = limits
        self.model_args: Dict[str, Any] = {}
        self.grid: Optional[Tuple[int, int]] = None
        self.label_names: Optional[List[str]] = None
        self.source_config: Dict[str, Any] = {}
        self._plan: List[PlanItem] = []

    # -- provided by each format -----------------------------------------------------------------
    @abc.abstractmethod
    def _plan_conversion(self, hints: Dict[str, Any]) -> None:
        """Infer ``model_args`` and build the conversion plan from names and shapes only."""

    # -- shared ----------------------------------------------------------------------------------
    def _open(self, store: Any, hints: Dict[str, Any]) -> None:
        """Adopt an opened store (``items``, ``get_float32``, ``close``) and plan; close it if planning fails."""
        self._store = store
        try:
            self._plan_conversion(hints)
        except BaseException:
            store.close()
            raise

    def inventory(self) -> Inventory:
        """Raw source tensor names, shapes and dtypes, read without loading data."""
        return list(self._store.items())

    def _read(self, name: str) -> torch.Tensor:
        """One raw source array as a float32 tensor."""
        return self._store.get_float32(name)

    def close(self) -> None:
        """Release open files."""
        self._store.close()

    @property
    def tensor_shapes(self) -> Dict[str, Tuple[int, ...]]:
        """Our state-dict keys and the shapes ``iter_tensors`` will yield, known before any data is read."""
        return {item.key: item.shape for item in self._plan}

    def iter_tensors(self) -> Iterator[Tuple[str, torch.Tensor]]:
        """Yield (our key, float32 tensor), converting one source array group at a time."""
        cache: Dict[str, torch.Tensor] = {}
        for item in self._plan:
            for stale in [name for name in cache if name not in item.sources]:
                del cache[stale]
            parts = []
            for name in item.sources:
                if name not in cache:
                    cache[name] = self._read(name)
                part = cache[name]
                parts.append(part if item.index is None else part[item.index])
            tensor = item.build(*parts).contiguous()
            if tuple(tensor.shape) != item.shape:
                raise ViTVariantsError('converted tensor has an unexpected shape', path=self.path, key=item.key,
                                       shapes=(tensor.shape, item.shape))
            yield item.key, tensor
        cache.clear()

    def state_dict(self) -> Dict[str, torch.Tensor]:
        """All converted tensors at once (small checkpoints and tests; prefer ``iter_tensors``)."""
        return dict(self.iter_tensors())

    def __enter__(self) -> 'SourceCheckpoint':
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f'{type(self).__name__}({self.path!r}, format={self.format!r}, model_args={self.model_args})'

    # -- helpers for readers -----------------------------------------------------------------------
    def _error(self, reason: str, key: Optional[str] = None, shapes: Optional[Sequence] = None) -> ViTVariantsError:
        return ViTVariantsError(reason, path=self.path, key=key, shapes=shapes)

    def _check_dims(self, key: Optional[str] = None, **dims: Optional[int]) -> None:
        """Refuse claimed dimensions above ``self.limits`` before anything is planned or read."""
        self.limits.check_dims(path=self.path, key=key, **dims)

    def _expect_shape(self, key: str, shape: Sequence[int], expected: Sequence[int]) -> None:
        if tuple(shape) != tuple(expected):
            raise self._error('unexpected shape', key=key, shapes=(tuple(shape), tuple(expected)))
