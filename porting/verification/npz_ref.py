"""The Google ``.npz`` reference (big_vision, FlexiViT, vit_jax): an equivalent timm ``VisionTransformer`` (for a
NaFlex tower, timm's ``NaFlexVit``) loaded by timm's own npz loader (``load_pretrained``), never by our key mapping.

The network's dimensions are read off the archive's own member headers here, not taken from our reader: the
width and patch kernel from ``embedding/kernel``, the depth (the deepest claim: block modules, or the longest
stacked axis of a scanned encoder), the MLP width, whether a [CLS] token is stored, and every attention's head
count (each block's and the MAP head's, set on each timm module). timm's loader flattens the per-head kernels,
so a head count taken from elsewhere would load and run. What the reference still takes from our reader's
config: the pooling of a tower without a MAP head (token or gap), the activation and LayerNorm epsilon (flax
defaults the file does not record), the image size (which splits a non-square table), the sin-cos table of a
file without one, and the pre-logits layer's presence.
"""
import itertools
import re
import tempfile
import zipfile
from pathlib import Path
from typing import Any, Dict, List, Tuple, Union

import numpy as np
import torch
import torch.nn as nn

from timm_vit_variants.config import SimpleViTConfig
from timm_vit_variants.parts import SinCos

from .archive import ExtendedArchive
from .naflex_ref import naflex_model
from .networks import timm_network
from .rules import bigvision_posemb_sincos_2d, resize_grid_table
from .streamed import loading
from .timm_ref import PreLogitsHead, TimmReference, timm_equivalent

__all__ = ['npz_model', 'npz_outputs', 'zoom_table', 'jax_table']

_PREFIXES = ('opt/target/', 'params/img/', 'params/', 'img/', '')
_SCAN = 'Transformer/encoderblock/'
_BLOCK = re.compile(r'^Transformer/encoderblock_(\d+)/')
_QUERY = re.compile(r'MultiHeadDotProductAttention_\d/query/kernel$')
# The MAP head's sub-modules, inlined at the top of the tower in old files.
_OLD_MAP_HEAD = ('probe', 'MultiHeadDotProductAttention_0', 'LayerNorm_0', 'MlpBlock_0')


def _headers(path: str) -> Dict[str, Tuple[Tuple[int, ...], np.dtype]]:
    """Shapes and dtypes of every array in an .npz, read from the member headers only."""
    out = {}
    with zipfile.ZipFile(path) as zf:
        for name in zf.namelist():
            if not name.endswith('.npy'):
                continue
            with zf.open(name) as fh:
                major, _ = np.lib.format.read_magic(fh)
                read_header = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
                shape, _, dtype = read_header(fh)
            out[name[:-4]] = (tuple(shape), dtype)
    return out


def _bf16_to_float32(raw: np.ndarray) -> np.ndarray:
    """A 2-byte void/uint16 bfloat16 array as float32 (bfloat16 is the top half of a float32)."""
    return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def _prefix(headers: Dict[str, Any]) -> str:
    """Where the (image) ViT's arrays start in the archive."""
    return next(p for p in _PREFIXES if f'{p}embedding/kernel' in headers or not p)


def _additions(path: str, headers: Dict[str, Any], config: SimpleViTConfig) -> List[Tuple[str, np.ndarray]]:
    """Arrays timm's loader needs and the archive does not store under the names timm reads.

    A sin-cos model has no stored table: the numpy big_vision table is added. An old MAP-head layout
    (the probe, attention, LayerNorm and MLP inlined at the top of the tower) gets copies of those
    arrays under ``MAPHead_0/``, the move big_vision's ``vit.fix_old_checkpoints`` makes.
    """
    prefix = _prefix(headers)
    extra = []
    if config.flat_pos_embed == 'sincos':
        extra.append((f'{prefix}pos_embedding', bigvision_posemb_sincos_2d(
            *config.grid_size, config.embed_dim, config.position(SinCos).temperature)))
    if f'{prefix}probe' in headers and f'{prefix}MAPHead_0/probe' not in headers:
        moved = [n for n in headers if n.startswith(prefix) and n[len(prefix):].split('/')[0] in _OLD_MAP_HEAD]
        with np.load(path, allow_pickle=False) as archive:
            extra += [(f'{prefix}MAPHead_0/{n[len(prefix):]}', archive[n]) for n in moved]
    return extra


def _timm_readable(path: str, headers: Dict[str, Tuple[Tuple[int, ...], np.dtype]], tmp: Path,
                   extra: List[Tuple[str, np.ndarray]]) -> Union[str, ExtendedArchive]:
    """The archive timm's ``load_pretrained`` can read: the original path, or an archive built for it.

    Arrays timm needs beyond what is stored (``_additions``) are appended in memory to the original
    archive (nothing copied). timm cannot decode bfloat16 without jax, so such archives are rewritten
    with the arrays widened to float32, one at a time (disk, not memory).
    """
    bf16 = any(dtype.kind == 'V' and dtype.itemsize == 2 for _, dtype in headers.values())
    if not extra and not bf16:
        return path
    if not bf16:
        archive = ExtendedArchive(path)
        with zipfile.ZipFile(archive, 'a', allowZip64=True) as extended:
            for name, array in extra:
                with extended.open(f'{name}.npy', 'w', force_zip64=True) as fh:
                    np.lib.format.write_array(fh, np.ascontiguousarray(array), allow_pickle=False)
        archive.seek(0)
        return archive
    prefix = _prefix(headers)
    # timm recognises big_vision names under params/; a vit_jax archive (its table under posembed_input) stays bare
    vitjax = f'{prefix}Transformer/posembed_input/pos_embedding' in headers
    new_prefix = prefix if vitjax else prefix or 'params/'
    out_path = tmp / 'timm_reference.npz'
    with np.load(path, allow_pickle=False) as src, zipfile.ZipFile(out_path, 'w', allowZip64=True) as dst:
        for name, array in itertools.chain(((name, src[name]) for name in src.files), extra):
            if array.dtype.kind == 'V' and array.dtype.itemsize == 2:
                array = _bf16_to_float32(array)
            local = name[len(prefix):] if name.startswith(prefix) else name
            with dst.open(f'{new_prefix}{local}.npy', 'w', force_zip64=True) as fh:
                np.lib.format.write_array(fh, np.ascontiguousarray(array), allow_pickle=False)
            del array
    return str(out_path)


def _pre_logits_head(path: str) -> PreLogitsHead:
    """The archive's own flax pre-logits and head Dense layers ((in, out) kernels)."""
    with np.load(path, allow_pickle=False) as w:
        prefix = next(p for p in _PREFIXES if f'{p}pre_logits/kernel' in w.files)

        def get(name: str):
            if f'{prefix}{name}' not in w.files:
                return None
            array = w[f'{prefix}{name}']
            return _bf16_to_float32(array) if array.dtype.kind == 'V' else array.astype(np.float64)

        return PreLogitsHead(get('pre_logits/kernel'), get('pre_logits/bias'), get('head/kernel'), get('head/bias'))


class _Recorded:
    """What the archive's shapes record about the network, read here and not by our reader."""

    def __init__(self, headers: Dict[str, Tuple[Tuple[int, ...], np.dtype]]) -> None:
        prefix = _prefix(headers)
        shapes = {name[len(prefix):]: shape for name, (shape, _) in headers.items() if name.startswith(prefix)}
        kernel = shapes['embedding/kernel']
        self.args: Dict[str, Any] = dict(embed_dim=kernel[-1], class_token='cls' in shapes)
        if len(kernel) == 4:  # HWIO; a NaFlex tower's (P*P*C, D) Dense records neither P nor C
            self.args.update(patch_size=tuple(kernel[:2]), in_chans=kernel[2])
        scanned = {name: shape for name, shape in shapes.items() if name.startswith(_SCAN)}
        blocks = sorted({int(m.group(1)) for m in map(_BLOCK.match, shapes) if m})
        if scanned:
            depth = max(shape[0] if shape else 0 for shape in scanned.values())
            queries = [shape[2] for name, shape in scanned.items() if _QUERY.search(name)] * depth
            fc1 = next(shape[2] for name, shape in scanned.items() if name.endswith('Dense_0/kernel'))
        else:
            depth = blocks[-1] + 1 if blocks else 0
            queries = [next(shapes[n][1] for n in shapes if n.startswith(f'Transformer/encoderblock_{i}/') and
                            _QUERY.search(n)) for i in range(depth)]
            fc1 = next(shapes[n][1] for n in shapes if n.startswith('Transformer/encoderblock_0/') and
                       n.endswith('Dense_0/kernel'))
        self.args.update(depth=depth, num_heads=queries[0], mlp_dim=fc1)
        self.block_heads = queries
        pool = next((n for n in ('MAPHead_0/MultiHeadDotProductAttention_0/query/kernel',
                                 'MultiHeadDotProductAttention_0/query/kernel') if n in shapes), None)
        self.map_heads = shapes[pool][1] if pool else None

    def regroup(self, model: nn.Module) -> None:
        """Give each timm attention module the head count its own arrays were stored with."""
        for block, heads in zip(model.blocks, self.block_heads):
            _set_heads(block.attn, heads)
        if self.map_heads is not None and getattr(model, 'attn_pool', None) is not None:
            _set_heads(model.attn_pool, self.map_heads)


def _set_heads(module: nn.Module, heads: int) -> None:
    width = module.num_heads * module.head_dim
    if width % heads:
        raise ValueError(f'{heads} heads do not divide the attention width {width}')
    module.num_heads, module.head_dim = heads, width // heads
    module.scale = module.head_dim ** -0.5


def npz_model(path: str, config: SimpleViTConfig) -> TimmReference:
    """timm's VisionTransformer loaded by timm's own npz loader (headless when there is a pre-logits layer), its
    dimensions and head counts read off the archive itself."""
    headers = _headers(path)
    recorded = _Recorded(headers)
    config = config.replace(**recorded.args)
    if len(headers.get(f'{_prefix(headers)}embedding/kernel', ((),))[0]) == 2:  # big_vision's NaFlex tower
        ref = naflex_model(path, config, _prefix(headers))
        recorded.regroup(ref.model)
        return ref
    head = _pre_logits_head(path) if config.head.rep_size else None
    extra = _additions(path, headers, config)
    with tempfile.TemporaryDirectory(prefix='vit-port-verify-') as tmp:
        readable = _timm_readable(path, headers, Path(tmp), extra)
        model = timm_equivalent(config, num_classes=0 if head is not None else None)
        recorded.regroup(model)
        # timm finds 'params/img/' itself but not a bare 'img/' tower; a rewritten bf16 copy moves '' to 'params/'
        prefix = _prefix(headers) if isinstance(readable, ExtendedArchive) or readable == path else ''
        with loading(model):  # the weights' pages go back as timm's loader writes them
            model.load_pretrained(readable, prefix=prefix)
        name = 'timm VisionTransformer.load_pretrained(npz)'
        if isinstance(readable, ExtendedArchive):
            readable.close()
            added = dict.fromkeys('the numpy big_vision sin-cos table' if key.endswith('pos_embedding') else
                                  "the MAP head under MAPHead_0/ (as big_vision's fix_old_checkpoints moves it)"
                                  for key, _ in extra)
            name += f' (the archive with {" and ".join(added)} appended in memory)'
        elif readable != path:
            name += ' (archive copy with bfloat16 widened to float32)'
    return TimmReference(model, name, head)


# big_vision and vit_jax archives: the timm network npz_model loads, rebuilt at a target by the source's rule.
npz_outputs = timm_network(npz_model)


def zoom_table(table: torch.Tensor, source_grid: Tuple[int, int], target_grid: Tuple[int, int],
               prefix: int) -> torch.Tensor:
    """big_vision's (and vit_jax's) table resize, scipy's linear zoom as ``rules`` transcribes it."""
    return torch.from_numpy(resize_grid_table(table.numpy(), source_grid, target_grid, prefix, 'bigvision'))


def jax_table(table: torch.Tensor, source_grid: Tuple[int, int], target_grid: Tuple[int, int],
              prefix: int) -> torch.Tensor:
    """FlexiViT's run-time table resize, ``jax.image.resize`` as ``rules`` transcribes it."""
    return torch.from_numpy(resize_grid_table(table.numpy(), source_grid, target_grid, prefix, 'flexi'))
