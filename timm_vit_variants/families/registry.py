"""The family registry: every ``families/<name>.py`` module defines ``FAMILY``, found here by discovery.

A family holds its registered rows (``config.ModelEntry``), the timm pretrained cfgs of its tags, and the dispatch
routes of its source formats, each with an explicit order. This module gathers them into the tables the rest of
the package reads: the model table (``model_table.MODELS``, where each family registers its rows), the pretrained cfgs
``simple_vit`` registers with timm (``DEFAULT_CFGS``), and the routes ``checkpoints.detect`` sorts into its
dispatch table (``ROUTES``). Adding a family is adding its module; nothing here names one.
"""
import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from ..checkpoints.pickle_store import add_weight_entries
from ..checkpoints.routes import Route
from ..model_table import MODELS, ModelEntry

__all__ = ['Family', 'FAMILIES', 'DEFAULT_CFGS', 'ROUTES', 'family_of']


@dataclass(frozen=True)
class Family:
    """One family: its rows (model name -> row), its tags' pretrained cfgs ('model.tag' -> timm cfg dict; the
    first tag of a model is its default), its dispatch routes, and the keys its training checkpoints hold their
    weights under beyond timm's (``weight_entries``, in order of preference; ``ema_entries`` are EMA weights);
    ``untrained`` gives each row with published tags an untrained tag after them; ``tag_args`` and ``reads_url``
    are how its tags are built and loaded where that differs from timm's way."""
    name: str
    rows: Mapping[str, ModelEntry] = field(default_factory=dict)
    cfgs: Mapping[str, Dict[str, Any]] = field(default_factory=dict)
    routes: Tuple[Route, ...] = ()
    weight_entries: Tuple[str, ...] = ()
    ema_entries: Tuple[str, ...] = ()
    untrained: bool = False  # an 'untrained' tag after the published ones of each row (the rows' tags of release 0.2)
    # (model name, the pretrained_cfg timm hands the entrypoint) -> model arguments a tag's weights need beyond the
    # row's (CLIP's activation, which differs between tags of one architecture)
    tag_args: Optional[Callable[[str, Any], Dict[str, Any]]] = None
    # a URL of this family's weights that timm's own loader cannot read, so our reader reads it (OpenAI's .pt)
    reads_url: Optional[Callable[[str], bool]] = None


def _discover() -> Tuple[Family, ...]:
    """Every family module of this package (by module name), each one's ``FAMILY``."""
    package = importlib.import_module(__package__)
    found = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if info.name == 'registry' or info.name.startswith('_'):
            continue
        family = getattr(importlib.import_module(f'{__package__}.{info.name}'), 'FAMILY', None)
        if isinstance(family, Family):
            found.append(family)
    return tuple(found)


def _register(families: Tuple[Family, ...]) -> None:
    """Each family's rows into the model table (a name registered twice is a programming error), and its weight
    entries into the checkpoint store's."""
    for family in families:
        add_weight_entries(family.weight_entries, family.ema_entries)
        for name, row in family.rows.items():
            if name in MODELS:
                raise RuntimeError(f'model {name!r} of family {family.name!r} is registered already')
            MODELS[name] = row
        unknown = sorted({tag.split('.', 1)[0] for tag in family.cfgs} - set(MODELS))
        if unknown:
            raise RuntimeError(f'family {family.name!r} has pretrained cfgs for unregistered models {unknown}')


FAMILIES = _discover()
_register(FAMILIES)
# 'model.tag' -> pretrained cfg of every family's tags
DEFAULT_CFGS: Dict[str, Dict[str, Any]] = {tag: cfg for family in FAMILIES for tag, cfg in family.cfgs.items()}
# every family's dispatch routes (``checkpoints.detect`` sorts them into its table by ``order``)
ROUTES: Tuple[Route, ...] = tuple(route for family in FAMILIES for route in family.routes)


def family_of(model: str) -> Optional[Family]:
    """The family whose rows hold ``model`` (None for the package's own plain-recipe rows)."""
    return next((family for family in FAMILIES if model in family.rows), None)
