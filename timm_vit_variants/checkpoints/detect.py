"""Opening a checkpoint: find its files, open them once, tell the format from what is inside, pick the reader.

The store opened here is the one the reader plans and reads from, so nothing is opened, or
unpickled, twice.
"""
import os
from typing import Any, Dict, Optional, Type

from ..errors import ViTVariantsError
from ..limits import DEFAULT_LIMITS, Limits
from .dinov2 import Dinov2Checkpoint, is_dinov2
from .deit import Deit3Checkpoint, is_layerscale_ape, layerscale_ape_format
from .dinov3 import Dinov3Checkpoint, is_dinov3
from .eva02 import Eva02Checkpoint, is_eva02, is_eva02_architecture
from .rope_vit import RopeVitCheckpoint, is_rope_vit
from .files import discover
from .flax import BigVisionCheckpoint, VitJaxCheckpoint
from .hf import HFCheckpoint
from .hf_dinov2 import DINOV2_MODEL_TYPES, HFDinov2Checkpoint
from .hf_dinov3 import DINOV3_MODEL_TYPES, HFDinov3Checkpoint
from .hf_clip import CLIP_MODEL_TYPES, HFClipCheckpoint
from .hf_siglip import SIGLIP_MODEL_TYPES, HFSiglipCheckpoint
from .openclip import OpenAICLIPCheckpoint, OpenCLIPCheckpoint, is_openai_clip
from .source import LayoutFn, SourceCheckpoint
from .stores import NpzStore, TensorStore, open_store
from .torchscript_store import TorchScriptStore
from .timm_format import TimmCheckpoint, is_timm_eva

__all__ = ['FORMATS', 'HINTS', 'READERS', 'open_checkpoint', 'detect_format']

READERS: Dict[str, Type[SourceCheckpoint]] = {
    'bigvision': BigVisionCheckpoint,
    'vitjax': VitJaxCheckpoint,
    'timm': TimmCheckpoint,
    'hf': HFCheckpoint,
    'dinov2': Dinov2Checkpoint,
    'dinov3': Dinov3Checkpoint,
    'ropevit': RopeVitCheckpoint,
    'deit3': Deit3Checkpoint,
    'openclip': OpenCLIPCheckpoint,
    'openai': OpenAICLIPCheckpoint,
    'eva02': Eva02Checkpoint,
}
FORMATS = tuple(READERS)

# Facts a checkpoint may not record, supplied by the caller (CLI flags of the same name):
#   prefix     key prefix inside the file (npz: e.g. 'params/'; torch: stripped before mapping)
#   img_size   source image size, to split a non-square learned table into its grid
#   num_heads  attention heads (bare timm state dicts of non-standard width; checked against others)
#   assume_heads  for a bare timm state dict of a non-standard width: assume timm's 64-wide heads
#   act_layer  override the MLP activation (e.g. 'gelu' to match timm's exact-GELU AugReg port)
#   norm_eps   override the LayerNorm epsilon
#   pos_embed  'sincos' or 'none' when a checkpoint has no position table (default 'sincos')
#   use_ema    prefer EMA weights in timm training checkpoints (default True, as timm)
HINTS = ('prefix', 'img_size', 'num_heads', 'assume_heads', 'act_layer', 'norm_eps', 'pos_embed', 'use_ema',
         'in_chans')


def _sniff(path: str, store: TensorStore, config: Dict[str, Any], config_path: Optional[str]) -> str:
    names = store.names()
    if isinstance(store, NpzStore):
        if any('MultiHeadDotProductAttention_1/' in n or 'posembed_input/' in n for n in names):
            return 'vitjax'
        if any('MultiHeadDotProductAttention_0/' in n or 'Transformer/encoderblock/' in n for n in names):
            return 'bigvision'
        raise ViTVariantsError('an .npz archive without ViT encoder blocks (no MultiHeadDotProductAttention arrays)',
                               path=path, key='Transformer/encoderblock_0')
    if isinstance(store, TorchScriptStore):
        if 'visual.conv1.weight' in names:
            return 'openai'
        raise ViTVariantsError('a TorchScript archive without a CLIP image tower (no visual.conv1.weight among its '
                               f'{len(names)} tensors)', path=path, key='visual.conv1.weight')
    if is_eva02_architecture(config.get('architecture')):  # timm's eva02_* folders
        return 'eva02'
    if 'architecture' in config:
        return 'timm'
    if 'model_type' in config:
        if config['model_type'] in ('vit', *SIGLIP_MODEL_TYPES, *DINOV2_MODEL_TYPES, *DINOV3_MODEL_TYPES, *CLIP_MODEL_TYPES):
            return 'hf'
        raise ViTVariantsError(f"model_type {config['model_type']!r} is not a transformers ViT, SigLIP or CLIP model",
                               path=config_path, key='model_type')
    if is_dinov2(set(names)):
        return 'dinov2'
    if is_dinov3(set(names)):
        return 'dinov3'
    if is_eva02(set(names)):  # before timm's other Eva ports: an EVA-02 file with LayerScale has their gamma_1
        return 'eva02'
    if is_timm_eva(set(names)):
        return 'timm'
    if is_layerscale_ape(set(names)):  # DeiT-III or RoPE-ViT rope_axial_ape: the same keys, told apart by name
        return layerscale_ape_format(path)
    if is_rope_vit(set(names)):
        return 'ropevit'
    if 'visual.conv1.weight' in names:  # open_clip's layout: OpenAI's state dict (its scalars), else OpenCLIP's
        return 'openai' if is_openai_clip(set(names)) else 'openclip'
    if any(n.endswith('embeddings.patch_embeddings.projection.weight') for n in names):
        return 'hf'
    if any(n.endswith(('patch_embed.proj.weight', 'embeds.proj.weight')) for n in names):  # ViT, NaFlexVit
        return 'timm'
    raise ViTVariantsError('no ViT patch embedding among the tensors (neither timm nor transformers layout)',
                           path=path, key='patch_embed.proj.weight')


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
    are available; ``limits`` bound what the file may claim; ``hints`` are listed in ``HINTS``.
    """
    unknown = sorted(set(hints) - set(HINTS))
    if unknown:
        raise TypeError(f'unknown checkpoint hint(s) {unknown}; expected some of {HINTS}')
    if hints.get('pos_embed') not in (None, 'sincos', 'none', 'learn'):
        raise ViTVariantsError(f"pos_embed hint must be 'sincos', 'none' or 'learn', got {hints['pos_embed']!r}")
    if fmt is not None and fmt not in READERS:
        raise ViTVariantsError(f'unknown checkpoint format {fmt!r}; expected one of {FORMATS}', path=str(path))
    hints = {k: v for k, v in hints.items() if v is not None}
    path = os.fspath(path)
    files, config, config_path = discover(path, limits)
    store = open_store(files, limits, use_ema=hints.get('use_ema', True))
    try:
        if fmt is None:
            return _reader(_sniff(path, store, config, config_path), store, config, hints)(
                path, store, config, config_path, hints, layout, limits)
        try:
            return _reader(fmt, store, config, hints)(path, store, config, config_path, hints, layout, limits)
        except ViTVariantsError as e:
            raise _wrong_format(e, fmt, path, store, config, config_path) from None
    except BaseException:
        store.close()
        raise


def _reader(fmt: str, store: TensorStore, config: Dict[str, Any], hints: Dict[str, Any]) -> Type[SourceCheckpoint]:
    """The reader of a format (a transformers folder's ``model_type`` tells a ViT from a SigLIP or DINOv2 tower), or
    the variant of it the content calls for (a NaFlex tower's)."""
    reader = READERS[fmt]
    if fmt == 'hf' and config.get('model_type') in SIGLIP_MODEL_TYPES:
        reader = HFSiglipCheckpoint
    elif fmt == 'hf' and config.get('model_type') in DINOV2_MODEL_TYPES:
        reader = HFDinov2Checkpoint
    elif fmt == 'hf' and config.get('model_type') in DINOV3_MODEL_TYPES:
        reader = HFDinov3Checkpoint
    elif fmt == 'hf' and config.get('model_type') in CLIP_MODEL_TYPES:
        reader = HFClipCheckpoint
    return reader.variant(store, config, hints)


def _wrong_format(error: ViTVariantsError, fmt: str, path: str, store: TensorStore, config: Dict[str, Any],
                  config_path: Optional[str]) -> ViTVariantsError:
    """``error`` from reading as ``fmt``, or, when the content says another format, an error that says so."""
    try:
        detected = _sniff(path, store, config, config_path)
    except ViTVariantsError:
        return error
    if detected == fmt:
        return error
    return ViTVariantsError(f'it was read as format {fmt!r}, but its content is a {detected!r} checkpoint '
                            f'({error.reason})', path=path, key=error.key, needs='fmt')


def detect_format(path: 'str | os.PathLike') -> str:
    """One of ``FORMATS`` for a file or folder; raises ViTVariantsError if it is none of them."""
    path = os.fspath(path)
    files, config, config_path = discover(path)
    store = open_store(files)
    try:
        return _sniff(path, store, config, config_path)
    finally:
        store.close()
