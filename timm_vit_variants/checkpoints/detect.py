"""Opening a checkpoint: find its files, open them once, tell the format from what is inside, pick the reader.

The store opened here is the one the reader plans and reads from, so nothing is opened, or
unpickled, twice. Which reader reads it is decided by one table, ``DISPATCH``: its rows, in order, each test
what the source holds (``Probe``: the store's names, ``config.json``, the path); the first row that holds names
the reader (whose ``format`` is the detected format) or refuses the source. The rows here read timm's and
transformers' plain ViT and refuse what no row takes; a family module's routes (``families/<name>.py``) fall
between them, each placed before the rows its files would otherwise meet. A wrapper's folder (transformers' ``TimmWrapperModel``, its tensors
under ``timm_model.``: ``WRAPPED_PREFIXES``) is read as the timm model it holds, that prefix its default.
"""
import os
from typing import Any, Dict, Optional, Tuple, Type

from ..errors import ViTVariantsError
from ..limits import DEFAULT_LIMITS, Limits
from .files import discover
from .hf import HFCheckpoint, VIT_MODEL_TYPES
from .options import HINTS, ReaderOptions
from .routes import WRAPPED_PREFIXES, Probe, Refuse, Route
from .source import LayoutFn, SourceCheckpoint
from .stores import NpzStore, open_store
from .timm_format import TimmCheckpoint
from ..families.registry import ROUTES

__all__ = ['DISPATCH', 'FORMATS', 'HINTS', 'READERS', 'WRAPPED_PREFIXES', 'Probe', 'Refuse', 'Route',
           'open_checkpoint', 'detect_format']

_NPZ_BLOCKS = ('MultiHeadDotProductAttention_0/', 'Transformer/encoderblock/')
_NO_NPZ_BLOCKS = Refuse(lambda p: ViTVariantsError(
    'an .npz archive without ViT encoder blocks (no MultiHeadDotProductAttention arrays)', path=p.path,
    key='Transformer/encoderblock_0'))
_UNREAD_MODEL_TYPE = Refuse(lambda p: ViTVariantsError(
    f'model_type {p.model_type!r} is not a transformers vision model this package reads', path=p.config_path,
    key='model_type'))
_NO_PATCH_EMBED = Refuse(lambda p: ViTVariantsError(
    'no ViT patch embedding among the tensors (neither timm nor transformers layout)', path=p.path,
    key='patch_embed.proj.weight'))

# The core rows, which read the plain ViT of timm and transformers and refuse what no row takes; each family's
# rows (``families/<name>.py``) fall between them by their order.
_ROWS: Tuple[Route, ...] = (
    # an .npz archive no family's row took (those take archives with encoder blocks)
    Route(200., lambda p: isinstance(p.store, NpzStore) and not p.has(*_NPZ_BLOCKS), _NO_NPZ_BLOCKS),
    # timm folders and training checkpoints (config.json's ``architecture``)
    Route(1100., lambda p: 'architecture' in p.config, TimmCheckpoint),
    # transformers folders, by config.json's ``model_type``
    Route(1700., lambda p: p.model_type in VIT_MODEL_TYPES, HFCheckpoint),
    Route(2000., lambda p: 'model_type' in p.config, _UNREAD_MODEL_TYPE),
    # a transformers ViT's weights without config.json, then timm ViT state dicts
    Route(3100., lambda p: p.ends('embeddings.patch_embeddings.projection.weight'), HFCheckpoint),
    Route(3300., lambda p: p.ends('patch_embed.proj.weight', 'embeds.proj.weight'), TimmCheckpoint),
    Route(3400., lambda p: True, _NO_PATCH_EMBED),
)
# The rows above and every family module's routes (``families.registry``), by order.
DISPATCH: Tuple[Route, ...] = tuple(sorted(_ROWS + ROUTES, key=lambda r: r.order))
# Every format a row reads, in the order of its first row.
FORMATS = tuple(dict.fromkeys(r.reader.format for r in DISPATCH if not isinstance(r.reader, Refuse)))
# Each format's plain reader: its last row's, which ``fmt=`` reads with when no row of the format holds.
READERS: Dict[str, Type[SourceCheckpoint]] = {
    fmt: [r.reader for r in DISPATCH if not isinstance(r.reader, Refuse) and r.reader.format == fmt][-1]
    for fmt in FORMATS}

def _route(probe: Probe, fmt: Optional[str] = None) -> Type[SourceCheckpoint]:
    """The reader of the first ``DISPATCH`` row that holds for ``probe`` (raising a refusing row's error); given
    ``fmt``, of the first row of that format that holds (refusals skipped), else the format's plain reader."""
    for route in DISPATCH:
        refuses = isinstance(route.reader, Refuse)
        if fmt is not None and (refuses or route.reader.format != fmt):
            continue
        if route.test(probe):
            if isinstance(route.reader, Refuse):
                raise route.reader.error(probe)
            return route.reader
    return READERS[fmt]


def _detect(probe: Probe) -> str:
    """The format of the content (the options play no part: they are the caller's facts, not the file's)."""
    return _route(Probe(probe.path, probe.store, probe.config, probe.config_path)).format


def open_checkpoint(
        path: 'str | os.PathLike',
        fmt: Optional[str] = None,
        *,
        layout: Optional[LayoutFn] = None,
        limits: Limits = DEFAULT_LIMITS,
        **hints: Any,
) -> SourceCheckpoint:
    """Open a checkpoint file or folder: the config it describes and, given a ``layout``, its tensor plan.

    ``fmt`` skips detection; ``layout`` is the model's layout function
    (``SimpleVisionTransformer.state_layout``), without which only the config and the raw inventory
    are available; ``limits`` bound what the file may claim; ``hints`` are ``ReaderOptions`` fields (``HINTS``).
    """
    options = ReaderOptions.of(**hints)
    if fmt is not None and fmt not in READERS:
        raise ViTVariantsError(f'unknown checkpoint format {fmt!r}; expected one of {FORMATS}', path=str(path))
    path = os.fspath(path)
    files, config, config_path = discover(path, limits)
    store = open_store(files, limits, use_ema=options.use_ema)
    try:
        probe = Probe(path, store, config, config_path, options)
        if probe.prefix:
            options = options.with_prefix(probe.prefix)
        if fmt is None:
            return _route(probe, _detect(probe))(path, store, config, config_path, options, layout, limits)
        try:
            return _route(probe, fmt)(path, store, config, config_path, options, layout, limits)
        except ViTVariantsError as e:
            raise _wrong_format(e, fmt, probe) from None
    except BaseException:
        store.close()
        raise


def _wrong_format(error: ViTVariantsError, fmt: str, probe: Probe) -> ViTVariantsError:
    """``error`` from reading as ``fmt``, or, when the content says another format, an error that says so."""
    try:
        detected = _detect(probe)
    except ViTVariantsError:
        return error
    if detected == fmt:
        return error
    return ViTVariantsError(f'it was read as format {fmt!r}, but its content is a {detected!r} checkpoint '
                            f'({error.reason})', path=probe.path, key=error.key, needs='fmt')


def detect_format(path: 'str | os.PathLike') -> str:
    """One of ``FORMATS`` for a file or folder; raises ViTVariantsError if it is none of them."""
    path = os.fspath(path)
    files, config, config_path = discover(path)
    store = open_store(files)
    try:
        return _detect(Probe(path, store, config, config_path))
    finally:
        store.close()
