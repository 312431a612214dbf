"""Opening a checkpoint: find its files, open them once, tell the format from what is inside, pick the reader.

The store opened here is the one the reader plans and reads from, so nothing is opened, or
unpickled, twice. Which reader reads it is decided by one table, ``DISPATCH``: its rows, in order, each test
what the source holds (``Probe``: the store's names, ``config.json``, the path); the first row that holds names
the reader (whose ``format`` is the detected format) or refuses the source. A family joins with one row, placed
before the rows its files would otherwise meet. A wrapper's folder (transformers' ``TimmWrapperModel``, its tensors
under ``timm_model.``: ``WRAPPED_PREFIXES``) is read as the timm model it holds, that prefix its default.
"""
import os
from typing import Any, Dict, Optional, Tuple, Type

from ..errors import ViTVariantsError
from ..limits import DEFAULT_LIMITS, Limits
from .files import discover
from .flax import BigVisionCheckpoint, BigVisionNaFlexCheckpoint, VitJaxCheckpoint, is_flat_patch_kernel
from .hf import HFCheckpoint, VIT_MODEL_TYPES
from .hf_clip import CLIP_MODEL_TYPES, HFClipCheckpoint
from .hf_siglip import SIGLIP_MODEL_TYPES, HFSiglip2Checkpoint, HFSiglipCheckpoint
from .openclip import OpenAICLIPCheckpoint, OpenCLIPCheckpoint, is_openai_clip
from .openclip_config import open_clip_config_path
from .openclip_timm import TRUNK, OpenCLIPTimmCheckpoint
from .options import HINTS, ReaderOptions
from .routes import WRAPPED_PREFIXES, Probe, Refuse, Route
from .source import LayoutFn, SourceCheckpoint
from .stores import NpzStore, TensorStore, open_store
from .torchscript_store import TorchScriptStore
from .timm_eva import TimmEvaCheckpoint, is_eva_architecture, is_timm_eva
from .timm_format import TimmCheckpoint
from .timm_naflex import TimmNaFlexCheckpoint
from ..families.registry import ROUTES

__all__ = ['DISPATCH', 'FORMATS', 'HINTS', 'READERS', 'WRAPPED_PREFIXES', 'Probe', 'Refuse', 'Route',
           'open_checkpoint', 'detect_format']

def _timm_eva(p: Probe) -> bool:
    """timm's Eva models: by ``architecture`` (any timm's ``Eva`` builds), or for a bare state dict of its DINOv3 or
    RoPE-ViT ports by its keys."""
    arch = p.config.get('architecture')
    return is_eva_architecture(arch) or arch is None and is_timm_eva(p.local)


def _naflexvit(p: Probe) -> bool:
    """timm NaFlexVit weights: ``embeds.proj.weight`` under the prefix."""
    return p.prefix + 'embeds.proj.weight' in p.store


_NPZ_BLOCKS = ('MultiHeadDotProductAttention_0/', 'Transformer/encoderblock/')
_NO_NPZ_BLOCKS = Refuse(lambda p: ViTVariantsError(
    'an .npz archive without ViT encoder blocks (no MultiHeadDotProductAttention arrays)', path=p.path,
    key='Transformer/encoderblock_0'))
_NO_CLIP_ARCHIVE = Refuse(lambda p: ViTVariantsError(
    'a TorchScript archive without a CLIP image tower (no visual.conv1.weight among its '
    f'{len(p.names)} tensors)', path=p.path, key='visual.conv1.weight'))
_NOT_TRANSFORMERS_VIT = Refuse(lambda p: ViTVariantsError(
    f"model_type {p.model_type!r} is not a transformers ViT, DeiT, SigLIP or CLIP model", path=p.config_path,
    key='model_type'))
_NO_PATCH_EMBED = Refuse(lambda p: ViTVariantsError(
    'no ViT patch embedding among the tensors (neither timm nor transformers layout)', path=p.path,
    key='patch_embed.proj.weight'))

def _open_clip_trunk(probe: Probe) -> bool:
    """Whether a source is an open_clip tower on a timm trunk, to be read with open_clip's head."""
    if probe.prefix not in ('', TRUNK) or not any(n.startswith(TRUNK) for n in probe.names):
        return False
    return not probe.prefix or os.path.isfile(open_clip_config_path(probe.path))


# Every reader, and how a source reaches it: the first row whose test holds reads (or refuses) the source.
_ROWS: Tuple[Route, ...] = (
    # flax .npz archives
    Route(100., lambda p: isinstance(p.store, NpzStore) and p.has('MultiHeadDotProductAttention_1/', 'posembed_input/'),
          VitJaxCheckpoint),
    Route(200., lambda p: isinstance(p.store, NpzStore) and not p.has(*_NPZ_BLOCKS), _NO_NPZ_BLOCKS),
    Route(300., lambda p: isinstance(p.store, NpzStore) and is_flat_patch_kernel(p.store, p.options.prefix),
          BigVisionNaFlexCheckpoint),
    Route(400., lambda p: isinstance(p.store, NpzStore), BigVisionCheckpoint),
    # OpenAI's TorchScript archives
    Route(500., lambda p: isinstance(p.store, TorchScriptStore) and 'visual.conv1.weight' in p.names,
          OpenAICLIPCheckpoint),
    Route(600., lambda p: isinstance(p.store, TorchScriptStore), _NO_CLIP_ARCHIVE),
    # timm folders and training checkpoints (config.json's ``architecture``)
    Route(900., lambda p: 'architecture' in p.config and _timm_eva(p), TimmEvaCheckpoint),
    Route(1000., lambda p: 'architecture' in p.config and _naflexvit(p), TimmNaFlexCheckpoint),
    Route(1100., lambda p: 'architecture' in p.config, TimmCheckpoint),
    # transformers folders, by config.json's ``model_type``
    Route(1200., lambda p: p.model_type in SIGLIP_MODEL_TYPES and str(p.model_type).startswith('siglip2'),
          HFSiglip2Checkpoint),
    Route(1300., lambda p: p.model_type in SIGLIP_MODEL_TYPES, HFSiglipCheckpoint),
    Route(1600., lambda p: p.model_type in CLIP_MODEL_TYPES, HFClipCheckpoint),
    Route(1700., lambda p: p.model_type in VIT_MODEL_TYPES, HFCheckpoint),
    Route(2000., lambda p: 'model_type' in p.config, _NOT_TRANSFORMERS_VIT),
    # open_clip towers on a timm trunk (visual.trunk.*): with their open_clip_config.json, else unless the trunk alone
    # is asked for (--prefix visual.trunk.: read below as a timm state dict)
    Route(2100., lambda p: _open_clip_trunk(p), OpenCLIPTimmCheckpoint),
    # bare state dicts, by their keys
    Route(2600., _timm_eva, TimmEvaCheckpoint),
    # open_clip's layout: OpenAI's state dict (its scalars), else OpenCLIP's
    Route(2900., lambda p: 'visual.conv1.weight' in p.names and is_openai_clip(p.names), OpenAICLIPCheckpoint),
    Route(3000., lambda p: 'visual.conv1.weight' in p.names, OpenCLIPCheckpoint),
    # a transformers ViT's weights without config.json, then timm ViT and NaFlexVit state dicts
    Route(3100., lambda p: p.ends('embeddings.patch_embeddings.projection.weight'), HFCheckpoint),
    Route(3200., lambda p: p.ends('patch_embed.proj.weight', 'embeds.proj.weight') and _naflexvit(p),
          TimmNaFlexCheckpoint),
    Route(3300., lambda p: p.ends('patch_embed.proj.weight', 'embeds.proj.weight'), TimmCheckpoint),
    Route(3400., lambda p: True, _NO_PATCH_EMBED),
)
# The rows above and every family module's routes (``families.registry``), by order.
DISPATCH: Tuple[Route, ...] = tuple(sorted(_ROWS + ROUTES, key=lambda r: r.order))
_CORE_FORMATS = ('bigvision', 'vitjax', 'timm', 'hf', 'dinov2', 'dinov3', 'ropevit', 'deit3', 'openclip', 'openai',
                 'eva02', 'beit')
FORMATS = _CORE_FORMATS + tuple(dict.fromkeys(
    r.reader.format for r in ROUTES if not isinstance(r.reader, Refuse) and r.reader.format not in _CORE_FORMATS))
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
