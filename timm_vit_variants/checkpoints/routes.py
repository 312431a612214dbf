"""How a source reaches its reader: ``Probe`` (what a dispatch row tests), ``Route`` (one row) and ``Refuse``.

Each family's module (``families/<name>.py``) lists its routes, each with an explicit ``order``; the dispatch
table (``detect.DISPATCH``) is every route sorted by it, and the first whose test holds reads (or refuses) the
source. Core code: it names no family.
"""
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, Dict, FrozenSet, Optional, Type, Union

from ..errors import ViTVariantsError
from .options import ReaderOptions
from .source import SourceCheckpoint
from .stores import TensorStore

__all__ = ['Probe', 'Refuse', 'Route', 'WRAPPED_PREFIXES']

# config.json's model_type of a folder that wraps a model of another format -> where the wrapped tensors sit:
# transformers' TimmWrapperModel / TimmWrapperForImageClassification hold a timm model as ``timm_model``.
WRAPPED_PREFIXES = {'timm_wrapper': 'timm_model.'}


@dataclass(frozen=True)
class Probe:
    """What a ``DISPATCH`` row tests: the opened store and its tensor names (``local``: under the ``prefix`` option,
    without it), ``config.json`` (empty without one), the path asked for and the caller's options."""
    path: str
    store: TensorStore
    config: Dict[str, Any]
    config_path: Optional[str]
    options: ReaderOptions = ReaderOptions()

    @cached_property
    def names(self) -> FrozenSet[str]:
        return frozenset(self.store.names())

    @cached_property
    def local(self) -> FrozenSet[str]:
        return frozenset(n[len(self.prefix):] for n in self.names)

    @property
    def prefix(self) -> str:
        """The caller's ``prefix`` option, else the one a wrapper's ``config.json`` implies (``WRAPPED_PREFIXES``)."""
        wrapped = WRAPPED_PREFIXES.get(self.model_type, '') if isinstance(self.model_type, str) else ''
        return self.options.prefix or wrapped

    @property
    def model_type(self) -> Any:
        return self.config.get('model_type')

    def has(self, *parts: str) -> bool:
        """Whether any tensor name contains one of ``parts``."""
        return any(part in n for n in self.names for part in parts)

    def ends(self, *suffixes: str) -> bool:
        """Whether any tensor name ends with one of ``suffixes``."""
        return any(n.endswith(suffixes) for n in self.names)


@dataclass(frozen=True)
class Refuse:
    """A row's outcome that is no reader: the error for a source no reader takes."""
    error: Callable[[Probe], ViTVariantsError]


@dataclass(frozen=True)
class Route:
    """One dispatch row: a source ``test`` holds for is read by ``reader`` (or refused). Rows are tried by ascending
    ``order``; a family places its row before the rows its files would otherwise meet."""
    order: float
    test: Callable[[Probe], bool]
    reader: Union[Type[SourceCheckpoint], Refuse]
