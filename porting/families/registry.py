"""The porting side's family registry: every ``porting/families/<name>.py`` defines ``FAMILY``, found here.

A family's porting module says which reference implementation checks each of its source formats and which
optional library that reference needs; which of another format's sources are its own (``Claim``: a BEiT folder
timm saved, a DINOv2 folder transformers saved), run by its own reference; and the learned-table resizes it
defines (``TableRule``). The modules import nothing heavy (the CLI reads their formats for ``--help`` without
torch): a function is named by module and name (``lazy``) and imported when it runs. Adding a family is adding
its module; nothing here names one.
"""
import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

__all__ = ['PortingFamily', 'Needs', 'Claim', 'TableRule', 'lazy', 'FAMILIES', 'REFERENCES', 'NEEDS', 'FORMATS',
           'RESAMPLE_RULES', 'TABLE_RULES']


@dataclass(frozen=True)
class Needs:
    """The optional library (a ``pyproject`` extra) a format's reference runs on, and the job named in the refusal."""
    extra: str
    what: str


@dataclass(frozen=True)
class Claim:
    """The sources of another family's ``format`` that ``test(check)`` accepts, run by ``reference`` instead of that
    format's own reference; a format's claims are tried by ``order`` (both ``lazy``)."""
    format: str
    order: float
    test: Callable[..., bool]
    reference: Callable[..., Any]


@dataclass(frozen=True)
class TableRule:
    """A learned-table resize rule as its framework runs it: the name a check reports, and, where code outside the
    framework's own model runs it, ``resize(table, source_grid, target_grid, prefix) -> table`` (``lazy``)."""
    what: str
    resize: Optional[Callable[..., Any]] = None


@dataclass(frozen=True)
class PortingFamily:
    """One family's porting side: format -> its reference (``lazy``), format -> what that reference needs, the
    learned-table resample rules the family defines (the CLI's ``--resample-like`` choices), its claims on other
    formats' sources, and rule -> how its framework resizes a table (``TableRule``)."""
    name: str
    references: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    needs: Mapping[str, Needs] = field(default_factory=dict)
    resample_rules: Tuple[str, ...] = ()
    claims: Tuple[Claim, ...] = ()
    table_rules: Mapping[str, TableRule] = field(default_factory=dict)


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
    """One table of every family's ``attribute``; a key two families define is a programming error."""
    table: Dict[str, Any] = {}
    for family in families:
        for key, value in getattr(family, attribute).items():
            if key in table:
                raise RuntimeError(f'{attribute} {key!r} is defined by two porting families (the second: '
                                   f'{family.name})')
            table[key] = value
    return table


def _with_claims(fmt: str, reference: Callable[..., Any], claims: Tuple[Claim, ...]) -> Callable[..., Any]:
    """``reference``, preceded by the claims on ``fmt`` (by order): the first whose test accepts the check runs."""
    mine = sorted((claim for claim in claims if claim.format == fmt), key=lambda claim: claim.order)
    if not mine:
        return reference

    def claimed(check: Any, *args: Any) -> Any:
        return next((claim.reference for claim in mine if claim.test(check)), reference)(check, *args)
    claimed.__qualname__ = claimed.__name__ = f'{fmt} reference with claims'
    return claimed


def _references(families: Tuple[PortingFamily, ...]) -> Dict[str, Callable[..., Any]]:
    """format -> its reference, claims included; a claim on a format no family defines is a programming error."""
    plain = _merged(families, 'references')
    claims = tuple(claim for family in families for claim in family.claims)
    unknown = sorted({claim.format for claim in claims} - set(plain))
    if unknown:
        raise RuntimeError(f'porting families claim sources of formats no family defines: {unknown}')
    return {fmt: _with_claims(fmt, reference, claims) for fmt, reference in plain.items()}


FAMILIES = _discover()
# format -> the reference function that runs that format's source in its own library (its claims tried first)
REFERENCES: Dict[str, Callable[..., Any]] = _references(FAMILIES)
# format -> the optional library its reference needs (formats absent here need only timm, a dependency)
NEEDS: Dict[str, Needs] = _merged(FAMILIES, 'needs')
FORMATS = tuple(REFERENCES)
RESAMPLE_RULES = tuple(rule for family in FAMILIES for rule in family.resample_rules)
# resample rule -> how its framework resizes a table, for a reference at a new grid
TABLE_RULES: Dict[str, TableRule] = _merged(FAMILIES, 'table_rules')
