"""The porting side's family registry: every ``porting/families/<name>.py`` defines ``FAMILY``, found here.

A family's porting module says which reference implementation checks each of its source formats and which
optional library that reference needs. The modules import nothing heavy (the CLI reads their formats for
``--help`` without torch): a reference is named by module and function (``lazy``) and imported when it runs.
Adding a family is adding its module; nothing here names one.
"""
import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

__all__ = ['PortingFamily', 'Needs', 'lazy', 'FAMILIES', 'REFERENCES', 'NEEDS', 'FORMATS', 'RESAMPLE_RULES']


@dataclass(frozen=True)
class Needs:
    """The optional library (a ``pyproject`` extra) a format's reference runs on, and the job named in the refusal."""
    extra: str
    what: str


@dataclass(frozen=True)
class PortingFamily:
    """One family's porting side: format -> its reference (``lazy``), format -> what that reference needs, and the
    learned-table resample rules the family defines (the CLI's ``--resample-like`` choices)."""
    name: str
    references: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    needs: Mapping[str, Needs] = field(default_factory=dict)
    resample_rules: Tuple[str, ...] = ()


def lazy(module: str, function: str) -> Callable[..., Any]:
    """``module.function``, imported when first called, so that a family module stays free of torch."""
    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module), function)(*args, **kwargs)
    call.__qualname__ = call.__name__ = f'{module}.{function}'
    return call


def _discover() -> Tuple[PortingFamily, ...]:
    """Every family module of this package (by name), each one's ``FAMILY``."""
    package = importlib.import_module(__package__)
    found = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if info.name == 'registry' or info.name.startswith('_'):
            continue
        family: Optional[PortingFamily] = getattr(importlib.import_module(f'{__package__}.{info.name}'), 'FAMILY',
                                                  None)
        if isinstance(family, PortingFamily):
            found.append(family)
    return tuple(found)


def _merged(families: Tuple[PortingFamily, ...], attribute: str) -> Dict[str, Any]:
    """One table of every family's ``attribute``; a format claimed twice is a programming error."""
    table: Dict[str, Any] = {}
    for family in families:
        for key, value in getattr(family, attribute).items():
            if key in table:
                raise RuntimeError(f'format {key!r} is claimed by two porting families (the second: {family.name})')
            table[key] = value
    return table


FAMILIES = _discover()
# format -> the reference function that runs that format's source in its own library
REFERENCES: Dict[str, Callable[..., Any]] = _merged(FAMILIES, 'references')
# format -> the optional library its reference needs (formats absent here need only timm, a dependency)
NEEDS: Dict[str, Needs] = _merged(FAMILIES, 'needs')
FORMATS = tuple(REFERENCES)
RESAMPLE_RULES = tuple(rule for family in FAMILIES for rule in family.resample_rules)
