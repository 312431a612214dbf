"""The Google ``.npz`` reference (big_vision, FlexiViT, vit_jax): an equivalent timm ``VisionTransformer`` (for a
NaFlex tower, timm's ``NaFlexVit``) loaded by timm's own npz loader (``load_pretrained``), never by our key mapping."""
import itertools
import tempfile
import zipfile
from pathlib import Path
from typing import Any, Dict, List, Tuple, Union

import numpy as np

from .archive import ExtendedArchive
from .naflex_ref import naflex_model
from .rules import bigvision_posemb_sincos_2d
from .streamed import loading
from .timm_ref import PreLogitsHead, TimmReference, grid, timm_equivalent

__all__ = ['npz_model']

_PREFIXES = ('opt/target/', 'params/img/', 'params/', 'img/', '')
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


def _additions(path: str, headers: Dict[str, Any], model_args: Dict[str, Any]) -> List[Tuple[str, np.ndarray]]:
    """Arrays timm's loader needs and the archive does not store under the names timm reads.

    A sin-cos model has no stored table: the numpy big_vision table is added. An old MAP-head layout
    (the probe, attention, LayerNorm and MLP inlined at the top of the tower) gets copies of those
    arrays under ``MAPHead_0/``, the move big_vision's ``vit.fix_old_checkpoints`` makes.
    """
    prefix = _prefix(headers)
    extra = []
    if model_args.get('pos_embed') == 'sincos':
        extra.append((f'{prefix}pos_embedding', bigvision_posemb_sincos_2d(
            *grid(model_args), model_args['embed_dim'], model_args.get('sincos_temperature', 10_000.))))
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


def npz_model(path: str, model_args: Dict[str, Any]) -> TimmReference:
    """timm's VisionTransformer loaded by timm's own npz loader (headless when there is a pre-logits layer)."""
    headers = _headers(path)
    if len(headers.get(f'{_prefix(headers)}embedding/kernel', ((),))[0]) == 2:  # big_vision's NaFlex tower
        return naflex_model(path, model_args, _prefix(headers))
    head = _pre_logits_head(path) if model_args.get('rep_size') else None
    extra = _additions(path, headers, model_args)
    with tempfile.TemporaryDirectory(prefix='vit-port-verify-') as tmp:
        readable = _timm_readable(path, headers, Path(tmp), extra)
        model = timm_equivalent(model_args, num_classes=0 if head is not None else None)
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
