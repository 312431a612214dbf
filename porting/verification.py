"""Numerical verification: the source in its own reference implementation against our model.

References, never our own key mapping:
  * timm sources: timm builds the network and loads the file itself (``local-dir:`` for a timm
    Hub folder, ``load_checkpoint`` for a single file into an equivalent ``VisionTransformer``);
  * big_vision / vit_jax ``.npz``: an equivalent timm ``VisionTransformer`` loaded with timm's own
    ``load_pretrained(npz)``; for sin-cos sources timm's learned table is filled from an independent
    numpy port of big_vision's ``posemb_sincos_2d`` (this module), handed to timm inside a
    temporary copy of the archive;
  * transformers folders: ``ViTForImageClassification`` / ``ViTModel`` ``.from_pretrained``.
timm has no pre-logits (``rep_size``) layer and its npz loader skips it, so for such sources the
features come from timm and the logits from an explicit ``head(tanh(pre_logits(x)))`` computed in
numpy straight from the archive's arrays. Comparison runs at the SOURCE geometry, before any resize.
"""
import ctypes
import gc
import io
import itertools
import tempfile
import zipfile
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from timm_vit_variants.checkpoints.files import SINGLE_WEIGHT_FILES, read_json
from timm_vit_variants.checkpoints.stores import drop_mapped_pages
from timm_vit_variants.errors import ViTVariantsError

from .reference_resize import flexi_pi_resize, resize_grid_table

__all__ = ['Verification', 'bigvision_posemb_sincos_2d', 'reference_outputs', 'compare', 'DEFAULT_TOL']

DEFAULT_TOL = 1e-4


@dataclass
class Verification:
    """Outcome of one check, in the shape the model card records."""
    status: str  # 'passed' | 'failed' | 'skipped'
    reference: Optional[str] = None
    max_abs_logits: Optional[float] = None
    max_abs_features: Optional[float] = None
    tolerance: Optional[float] = None
    reason: Optional[str] = None
    notes: list = field(default_factory=list)

    def as_card_dict(self) -> Dict[str, Any]:
        reason = '; '.join([r for r in [self.reason, *self.notes] if r]) or None
        return dict(status=self.status, reference=self.reference, max_abs_logits=self.max_abs_logits,
                    max_abs_features=self.max_abs_features, tolerance=self.tolerance, reason=reason)

    def summary(self) -> str:
        """One line for the terminal."""
        if self.status == 'skipped':
            return f'verification skipped: {self.reason}'
        figures = []
        if self.max_abs_logits is not None:
            figures.append(f'max|dlogits|={self.max_abs_logits:.2e}')
        if self.max_abs_features is not None:
            figures.append(f'max|dfeatures|={self.max_abs_features:.2e}')
        text = f'verification {self.status} vs {self.reference}: ' + ', '.join(figures) + f' (tol {self.tolerance:g})'
        if self.reason:
            text += f'; {self.reason}'
        return text + ''.join(f'; {n}' for n in self.notes)


@dataclass
class Outputs:
    """What a network produced on the verification inputs."""
    features: Optional[torch.Tensor]  # final-norm tokens (B, T, D)
    logits: Optional[torch.Tensor]
    name: str
    note: Optional[str] = None
    pre_logits: Optional[torch.Tensor] = None  # pooled pre-logits output (transformers ViTModel pooler)


def bigvision_posemb_sincos_2d(h: int, w: int, width: int, temperature: float = 10_000.) -> np.ndarray:
    """big_vision ``posemb_sincos_2d`` in numpy, shape (1, h*w, width).

    Written from big_vision's formula and kept apart from ``timm_vit_variants.posemb`` so the
    reference does not share code with the model under test.
    """
    if width % 4:
        raise ViTVariantsError(f'sin-cos position embedding needs a width divisible by 4, got {width}')
    y, x = np.mgrid[:h, :w]
    quarter = width // 4
    omega = np.arange(quarter) / (quarter - 1)
    omega = 1.0 / (temperature ** omega)
    y = np.einsum('m,d->md', y.flatten(), omega)
    x = np.einsum('m,d->md', x.flatten(), omega)
    table = np.concatenate([np.sin(x), np.cos(x), np.sin(y), np.cos(y)], axis=1)
    return np.asarray(table, np.float32)[None]


def _pair(v: Any) -> Tuple[int, int]:
    return (int(v), int(v)) if isinstance(v, int) else (int(v[0]), int(v[-1]))


def verification_inputs(model_args: Dict[str, Any], batch: int = 1, seed: int = 0) -> torch.Tensor:
    """Fixed random images at the source geometry (image size rounded to the source grid)."""
    h, w = _pair(model_args.get('img_size', 224))
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(batch, model_args.get('in_chans', 3), h, w, generator=generator)


# Input-side options and the values timm's VisionTransformer can express ('linear' is 'conv' computed as a matmul).
_TIMM_INPUT_SIDE = {'patch_embed': ('conv', 'linear'), 'patch_norm': (None,), 'grid_mode': ('pad', 'strict'),
                    'pos_embed': ('sincos', 'learn', 'none')}


def timm_equivalent(model_args: Dict[str, Any], num_classes: Optional[int] = None) -> nn.Module:
    """A timm ``VisionTransformer`` computing the same function as ``SimpleVisionTransformer(**model_args)``.

    big_vision 'gap' (norm all tokens, then average) is timm's ``fc_norm=False`` + ``global_pool='avg'``;
    a table without a cls slot is ``no_embed_class=True``; a sin-cos table becomes a learned one.
    Built on the meta device and left uninitialised (every parameter is loaded afterwards; one that
    is not makes the comparison fail loudly), which saves seconds of random init on large models.
    """
    from timm.models.vision_transformer import VisionTransformer

    beyond = [f'{name}={model_args[name]!r}' for name, same in _TIMM_INPUT_SIDE.items()
              if model_args.get(name, same[0]) not in same]
    if beyond:
        raise _Skip(f"timm's VisionTransformer has no equivalent of {', '.join(beyond)}")
    embed_dim = model_args['embed_dim']
    mlp_dim = model_args.get('mlp_dim') or 4 * embed_dim
    pos = model_args.get('pos_embed', 'sincos')
    class_token = bool(model_args.get('class_token', False))
    with torch.device('meta'):
        model = VisionTransformer(
        img_size=_pair(model_args.get('img_size', 224)),
        patch_size=_pair(model_args.get('patch_size', 16)),
        in_chans=model_args.get('in_chans', 3),
        num_classes=model_args.get('num_classes', 0) if num_classes is None else num_classes,
        global_pool=model_args.get('global_pool', 'avg'),
        embed_dim=embed_dim,
        depth=model_args['depth'],
        num_heads=model_args['num_heads'],
        mlp_ratio=mlp_dim / embed_dim,
        qkv_bias=model_args.get('qkv_bias', True),
        class_token=class_token,
        pos_embed='none' if pos == 'none' else 'learn',
        no_embed_class=not (model_args.get('pos_embed_cls_slot', False) and class_token),
        fc_norm=False,
        act_layer=model_args.get('act_layer', 'gelu_tanh'),
        norm_layer=partial(nn.LayerNorm, eps=model_args.get('norm_eps', 1e-6)),
    )
    if model.blocks[0].mlp.fc1.out_features != mlp_dim:
        raise ViTVariantsError(f'timm cannot express an MLP width of {mlp_dim} for width {embed_dim}')
    return model.to_empty(device='cpu').eval()


# -- references per source format ---------------------------------------------------------------

def _run_timm(model: nn.Module, x: torch.Tensor, with_logits: bool = True) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    with torch.no_grad():
        feats = model.forward_features(x)
        logits = model.forward_head(feats) if with_logits and model.num_classes else None
    return feats, logits


def _timm_weights(file: Path) -> Dict[str, torch.Tensor]:
    """A timm weight file as tensors viewing the file where the format allows (safetensors, zip pickles)."""
    from timm.models import clean_state_dict, load_state_dict

    if file.suffix == '.safetensors':
        from safetensors import safe_open

        with safe_open(str(file), framework='pt') as f:
            return {k: f.get_tensor(k) for k in f.keys()}
    if zipfile.is_zipfile(file):
        from timm_vit_variants._timm_compat import mapped_torch_load

        with mapped_torch_load():
            return clean_state_dict(load_state_dict(str(file)))  # timm's own unwrapping of training checkpoints
    return clean_state_dict(load_state_dict(str(file)))


def _timm_model(path: str, model_args: Dict[str, Any]) -> Tuple[nn.Module, str]:
    """timm's network, built from config.json (``local-dir:``) or as the equivalent VisionTransformer.

    The weights are assigned, not copied, into a meta-device model, so the reference costs the file
    once in memory rather than a state dict plus a model.
    """
    import timm

    folder = Path(path)
    if folder.is_dir():
        if not (folder / 'config.json').is_file():
            raise _Skip('timm loads a folder only through its config.json, and this folder has none')
        files = [folder / name for name in SINGLE_WEIGHT_FILES if (folder / name).is_file()]
        if not files:
            raise _Skip('timm can only load an unsharded Hub folder (config.json + model.safetensors)')
        import timm_vit_variants  # noqa: F401  (simple_vit folders need the plugin)
        with torch.device('meta'):
            model = timm.create_model(f'local-dir:{folder}', pretrained=False)
        file, name = files[0], "timm.create_model('local-dir:...') + its weights"
    else:
        model, file, name = timm_equivalent(model_args), folder, 'timm VisionTransformer + timm load_state_dict'
    model.load_state_dict(_timm_weights(file), strict=True, assign=True)
    if hasattr(model, 'pos_sincos') and model.pos_sincos is not None:  # a non-persistent table, built on meta
        model.pos_sincos.table = torch.empty(0)
        model.pos_sincos.init_non_persistent_buffers()
    return model.eval(), name


def _npz_headers(path: str) -> Dict[str, Tuple[Tuple[int, ...], np.dtype]]:
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


class _ExtendedArchive(io.RawIOBase):
    """A zip archive with members appended in memory: reads come from the original file, which is never
    written or copied, and only the tail (central directory onwards) lives in RAM."""

    def __init__(self, path: str) -> None:
        super().__init__()
        with zipfile.ZipFile(path) as archive:
            self._split = archive.start_dir
        self._file = open(path, 'rb')
        self._file.seek(self._split)
        self._tail = bytearray(self._file.read())
        self._pos = 0

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._split + len(self._tail)}[whence]
        self._pos = base + offset
        return self._pos

    def readinto(self, buffer) -> int:
        view = memoryview(buffer).cast('B')
        if self._pos < self._split:
            self._file.seek(self._pos)
            n = self._file.readinto(view[:self._split - self._pos])
        else:
            chunk = self._tail[self._pos - self._split:self._pos - self._split + len(view)]
            n = len(chunk)
            view[:n] = chunk
        self._pos += n
        return n

    def write(self, data) -> int:
        if self._pos < self._split:
            raise io.UnsupportedOperation('the original archive is read-only')
        start = self._pos - self._split
        data = bytes(data)
        self._tail[start:start + len(data)] = data
        self._pos += len(data)
        return len(data)

    def truncate(self, size: Optional[int] = None) -> int:
        size = self._pos if size is None else size
        del self._tail[max(size - self._split, 0):]
        return size

    def close(self) -> None:
        self._file.close()
        super().close()


def _timm_readable_npz(path: str, model_args: Dict[str, Any], tmp: Path):
    """The archive timm's ``load_pretrained`` can read: the original path, or an archive built for it.

    timm needs a stored ``pos_embedding``: for a sin-cos model the numpy big_vision table is appended
    in memory to the original archive (nothing copied). timm cannot decode bfloat16 without jax, so
    such archives are rewritten with the arrays widened to float32, one at a time (disk, not memory).
    """
    headers = _npz_headers(path)
    bf16 = any(dtype.kind == 'V' and dtype.itemsize == 2 for _, dtype in headers.values())
    sincos = model_args.get('pos_embed') == 'sincos'
    if not sincos and not bf16:
        return path
    prefix = next((p for p in ('opt/target/', 'params/img/', 'params/') if f'{p}embedding/kernel' in headers), '')
    table = None
    if sincos:
        grid = _grid(model_args)
        table = bigvision_posemb_sincos_2d(grid[0], grid[1], model_args['embed_dim'],
                                           model_args.get('sincos_temperature', 10_000.))
    if not bf16:
        archive = _ExtendedArchive(path)
        with zipfile.ZipFile(archive, 'a', allowZip64=True) as extended, \
                extended.open(f'{prefix}pos_embedding.npy', 'w', force_zip64=True) as fh:
            np.lib.format.write_array(fh, table, allow_pickle=False)
        archive.seek(0)
        return archive
    new_prefix = prefix or 'params/'  # timm recognises big_vision block names under params/
    out_path = tmp / 'timm_reference.npz'
    with np.load(path, allow_pickle=False) as src, zipfile.ZipFile(out_path, 'w', allowZip64=True) as dst:
        arrays = ((name, src[name]) for name in src.files)
        if table is not None:
            arrays = itertools.chain(arrays, [(f'{prefix}pos_embedding', table)])
        for name, array in arrays:
            if array.dtype.kind == 'V' and array.dtype.itemsize == 2:
                array = _bf16_to_float32(array)
            local = name[len(prefix):] if name.startswith(prefix) else name
            with dst.open(f'{new_prefix}{local}.npy', 'w', force_zip64=True) as fh:
                np.lib.format.write_array(fh, np.ascontiguousarray(array), allow_pickle=False)
            del array
    return str(out_path)


def _grid(model_args: Dict[str, Any]) -> Tuple[int, int]:
    h, w = _pair(model_args.get('img_size', 224))
    ph, pw = _pair(model_args.get('patch_size', 16))
    return -(-h // ph), -(-w // pw)


def _npz_pre_logits_head(path: str, pooled: torch.Tensor) -> torch.Tensor:
    """``head(tanh(pre_logits(pooled)))`` in numpy from the archive's own flax Dense kernels (in, out)."""
    with np.load(path, allow_pickle=False) as w:
        prefix = next((p for p in ('opt/target/', 'params/img/', 'params/', '') if f'{p}pre_logits/kernel' in w.files))

        def get(name: str) -> np.ndarray:
            array = w[f'{prefix}{name}']
            return _bf16_to_float32(array) if array.dtype.kind == 'V' else array.astype(np.float32)

        hidden = np.tanh(pooled.numpy().astype(np.float64) @ get('pre_logits/kernel') + get('pre_logits/bias'))
        logits = hidden @ get('head/kernel') + get('head/bias')
    return torch.from_numpy(logits.astype(np.float32))


def _npz_model(path: str, model_args: Dict[str, Any]) -> Tuple[nn.Module, str]:
    """timm's VisionTransformer loaded by timm's own npz loader (headless when there is a pre-logits layer)."""
    num_classes = 0 if model_args.get('rep_size') else model_args.get('num_classes', 0)
    with tempfile.TemporaryDirectory(prefix='vit-port-verify-') as tmp:
        readable = _timm_readable_npz(path, model_args, Path(tmp))
        model = timm_equivalent(model_args, num_classes=num_classes)
        model.load_pretrained(readable)
        name = 'timm VisionTransformer.load_pretrained(npz)'
        if isinstance(readable, _ExtendedArchive):
            readable.close()
            name += ' (the archive with the numpy big_vision sin-cos table appended in memory)'
        elif readable != path:
            name += ' (archive copy with bfloat16 widened to float32)'
    return model, name


def _npz_outputs(model: nn.Module, name: str, path: str, model_args: Dict[str, Any], x: torch.Tensor) -> Outputs:
    """timm has no pre-logits layer: for such sources the logits are ``head(tanh(pre_logits(x)))`` in numpy."""
    feats, logits = _run_timm(model, x)
    if model_args.get('rep_size') and model_args.get('num_classes'):
        with torch.no_grad():
            pooled = model.forward_head(feats, pre_logits=True)
        return Outputs(feats, _npz_pre_logits_head(path, pooled), name,
                       'logits via explicit numpy head(tanh(pre_logits(x))) from the archive (timm has no pre-logits '
                       'layer)')
    return Outputs(feats, logits, name)


def _at_target(model: nn.Module, source_args: Dict[str, Any], target_args: Dict[str, Any], rule: str) -> nn.Module:
    """The reference network at the target geometry, its kernel and table resized by the framework's own rule.

    The resizes are the independent numpy transcriptions of ``porting.reference_resize`` (big_vision's
    PI-resize, scipy zoom, FlexiViT's jax resize) or timm's own ``resample_abs_pos_embed``; never ours.
    """
    state = model.state_dict()
    source_patch, target_patch = _pair(source_args.get('patch_size', 16)), _pair(target_args.get('patch_size', 16))
    if source_patch != target_patch:
        kernel = state['patch_embed.proj.weight'].detach().numpy()
        state['patch_embed.proj.weight'] = torch.from_numpy(flexi_pi_resize(kernel, *target_patch))
    source_grid, target_grid = _grid(source_args), _grid(target_args)
    pos = source_args.get('pos_embed', 'sincos')
    if pos == 'sincos':
        state['pos_embed'] = torch.from_numpy(bigvision_posemb_sincos_2d(
            *target_grid, source_args['embed_dim'], source_args.get('sincos_temperature', 10_000.)))
    elif pos == 'learn' and source_grid != target_grid:
        prefix = 1 if source_args.get('pos_embed_cls_slot') and source_args.get('class_token') else 0
        table = state['pos_embed'].detach()
        if rule in ('bigvision', 'flexi'):
            state['pos_embed'] = torch.from_numpy(resize_grid_table(table.numpy(), source_grid, target_grid, prefix,
                                                                    rule))
        elif rule == 'timm':
            from timm.layers import resample_abs_pos_embed

            state['pos_embed'] = resample_abs_pos_embed(table, list(target_grid), list(source_grid),
                                                        num_prefix_tokens=prefix)
        else:
            raise _Skip(f"the {rule!r} table resize has no reference outside transformers' own model")
    padded = dict(target_args, img_size=(target_grid[0] * target_patch[0], target_grid[1] * target_patch[1]))
    target = timm_equivalent(padded, num_classes=model.num_classes)
    target.load_state_dict(state, strict=True, assign=True)
    return target.eval()


def _hf_reference(path: str, model_args: Dict[str, Any], x: torch.Tensor,
                  target: Optional[Tuple[Dict[str, Any], str]] = None) -> Outputs:
    """transformers itself; at a target geometry only through its own ``interpolate_pos_encoding``."""
    if target is not None:
        if _pair(target[0].get('patch_size', 16)) != _pair(model_args.get('patch_size', 16)):
            raise _Skip('transformers has no rule for a patch-size change')
        if any(s % p for s, p in zip(_pair(target[0].get('img_size', 224)), _pair(target[0].get('patch_size', 16)))):
            raise _Skip('transformers drops the pixels the patch does not divide, where this model pads them')
        if target[1] != 'hf':
            raise _Skip(f"the table was resized with the {target[1]!r} rule, not transformers' own")
    try:
        import transformers
    except ImportError:
        raise _Skip('transformers is not installed') from None
    transformers.utils.logging.disable_progress_bar()
    folder = Path(path) if Path(path).is_dir() else Path(path).parent
    cfg = read_json(str(folder / 'config.json')) if (folder / 'config.json').is_file() else {}
    classify = any('ForImageClassification' in a for a in cfg.get('architectures') or [])
    cls = transformers.ViTForImageClassification if classify else transformers.ViTModel
    # A bare ViTModel's pooler (Dense + tanh) is our pre-logits layer when the reader found one.
    kwargs = {} if classify else {'add_pooling_layer': bool(model_args.get('rep_size'))}
    model = cls.from_pretrained(str(folder), attn_implementation='eager', **kwargs).eval().float()
    pooled = None
    resize = {'interpolate_pos_encoding': True} if target is not None else {}
    with torch.no_grad():
        if classify:
            feats = model.vit(pixel_values=x, **resize).last_hidden_state
            logits = model(pixel_values=x, **resize).logits
        else:
            out = model(pixel_values=x, **resize)
            feats, logits, pooled = out.last_hidden_state, None, out.pooler_output
    name = f'transformers {cls.__name__}.from_pretrained' + (' with interpolate_pos_encoding' if resize else '')
    return Outputs(feats, logits, name, pre_logits=pooled)


class _Skip(Exception):
    """No reference can run; the message says why."""


# How each format's reference network is built (timm models, which the target check can re-geometry).
_TIMM_BUILT: Dict[str, Callable[[str, Dict[str, Any]], Tuple[nn.Module, str]]] = {
    'timm': _timm_model,
    'bigvision': _npz_model,
    'vitjax': _npz_model,
}
_RULE_NAMES = {'bigvision': "big_vision's scipy zoom", 'flexi': "FlexiViT's jax.image.resize",
               'timm': "timm's resample_abs_pos_embed", 'hf': "transformers' interpolate_pos_encoding"}


def reference_outputs(
        path: str,
        fmt: str,
        model_args: Dict[str, Any],
        x: torch.Tensor,
        target: Optional[Tuple[Dict[str, Any], str]] = None,
) -> Outputs:
    """Run the source's reference implementation on ``x``; raises ``_Skip`` when none can run.

    With ``target`` (target model args, resample rule) the reference runs at the target geometry, its
    weights resized by the source framework's own rule (``_at_target``), or transformers' own resize.
    """
    try:
        if fmt == 'hf':
            return _hf_reference(path, model_args, x, target)
        if fmt not in _TIMM_BUILT:
            raise _Skip(f'no reference implementation for format {fmt!r}')
        model, name = _TIMM_BUILT[fmt](path, model_args)
        if target is not None:
            model = _at_target(model, model_args, target[0], target[1])
            patch = _pair(target[0].get('patch_size', 16))
            x = F.pad(x, (0, -x.shape[-1] % patch[1], 0, -x.shape[-2] % patch[0]))  # our model pads the same way
            patch = '' if _pair(model_args.get('patch_size', 16)) == _pair(target[0].get('patch_size', 16)) else \
                "big_vision's PI-resize, "
            table = 'numpy big_vision sin-cos' if model_args.get('pos_embed') == 'sincos' else _RULE_NAMES[target[1]]
            name += f' at the target geometry ({patch}{table}, independent numpy/timm code)'
        release_as_it_runs(model)
        if fmt == 'timm':
            feats, logits = _run_timm(model, x)
            return Outputs(feats, logits, name)
        return _npz_outputs(model, name, path, model_args, x)
    except (_Skip, ViTVariantsError):
        raise
    except Exception as e:  # the reference library refusing the file is a verification failure to report
        raise _Skip(f'the reference implementation could not load the source: {type(e).__name__}: {e}') from None


def _release_memory() -> None:
    """Return freed tensor memory to the OS, so the reference and our model do not add up in RSS.

    glibc keeps freed heap blocks (tensors under its mmap threshold) for reuse; ``malloc_trim``
    hands them back. Elsewhere this is a no-op.
    """
    gc.collect()
    try:
        ctypes.CDLL('libc.so.6').malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _file_mapped_ranges() -> Tuple[Tuple[int, int], ...]:
    """Address ranges of this process's private, non-executable mappings of regular files (weights, not code)."""
    ranges = []
    try:
        with open('/proc/self/maps') as maps:
            for line in maps:
                parts = line.split(maxsplit=5)
                if len(parts) == 6 and parts[1][2] == '-' and parts[1][3] == 'p' and parts[5].startswith('/') \
                        and '.so' not in parts[5]:
                    start, end = parts[0].split('-')
                    ranges.append((int(start, 16), int(end, 16)))
    except OSError:
        return ()
    return tuple(ranges)


def release_as_it_runs(model: nn.Module) -> None:
    """After each block of ``model`` has run, hand back the pages of its memory-mapped weights.

    Both networks of a verification view their weight files where they can (our folder, safetensors,
    timm folders, zip pickles), and a forward pass touches every page once; without this a
    verification would hold the whole checkpoint in RSS by its end. Only tensors inside private,
    non-executable file mappings are released (``drop_mapped_pages``); heap weights are left alone.
    """
    blocks = getattr(model, 'blocks', None)
    if not isinstance(blocks, nn.Sequential) or not blocks:
        return
    mapped = _file_mapped_ranges()

    def release(block: nn.Module, *_: Any) -> None:
        for tensor in itertools.chain(block.parameters(), block.buffers()):
            begin = tensor.data_ptr()
            end = begin + tensor.numel() * tensor.element_size()
            if any(lo <= begin and end <= hi for lo, hi in mapped):
                drop_mapped_pages(tensor)

    for block in blocks:
        block.register_forward_hook(release)


def compare(
        path: str,
        fmt: str,
        model_args: Dict[str, Any],
        build_ours: Callable[[], nn.Module],
        tol: float = DEFAULT_TOL,
        progress: bool = False,
        target: Optional[Tuple[Dict[str, Any], str]] = None,
        compare_logits: bool = True,
) -> Verification:
    """Reference first (then freed), then ours, so both networks are never in memory together.

    ``target`` (target model args, resample rule) compares at the target geometry instead (see
    ``reference_outputs``); ``compare_logits=False`` leaves logits out (a new, zero head).
    """
    from tqdm import tqdm

    x = verification_inputs(target[0] if target is not None else model_args)
    with tqdm(total=2, desc='verify', unit='model', disable=not progress, leave=False) as bar:
        try:
            ref = reference_outputs(path, fmt, model_args, x, target)
        except _Skip as e:
            return Verification('skipped', reason=str(e), tolerance=tol)
        _release_memory()
        bar.update(1)
        ours = build_ours().eval()
        release_as_it_runs(ours)
        with torch.no_grad():
            feats = ours.forward_features(x)
            logits = ours.forward_head(feats) if ours.num_classes and compare_logits else None
            pre_logits = ours.forward_head(feats, pre_logits=True) if ref.pre_logits is not None else None
        has_pre_logits = not isinstance(ours.pre_logits, nn.Identity)
        del ours
        _release_memory()
        bar.update(1)
    if ref.features is None or tuple(ref.features.shape) != tuple(feats.shape):
        return Verification('failed', reference=ref.name, tolerance=tol, reason=(
            f'feature shapes differ: reference {tuple(ref.features.shape) if ref.features is not None else None} '
            f'vs ours {tuple(feats.shape)}'))
    d_feat = (ref.features - feats).abs().max().item()
    d_logit = None
    notes = [ref.note] if ref.note else []
    if ref.logits is not None and logits is not None:
        if ref.logits.shape != logits.shape:
            return Verification('failed', reference=ref.name, tolerance=tol, max_abs_features=d_feat,
                                reason=f'logit shapes differ: {tuple(ref.logits.shape)} vs {tuple(logits.shape)}')
        d_logit = (ref.logits - logits).abs().max().item()
    elif logits is not None:
        notes.append('logits not compared: the reference has no classifier')
    elif ref.logits is not None:
        notes.append('logits not compared: the output has a new, zero-initialised head')
    d_pre = None
    if pre_logits is not None:
        d_pre = (ref.pre_logits - pre_logits).abs().max().item()
        notes.append(f'pre-logits (pooler output) max|d|={d_pre:.2e}')
    elif has_pre_logits and d_logit is None:
        notes.append('the pre-logits layer was not covered: neither logits nor pooled output were compared')
    worst = max(d for d in (d_feat, d_logit, d_pre) if d is not None)
    status = 'passed' if worst <= tol else 'failed'
    return Verification(status, reference=ref.name, max_abs_logits=d_logit, max_abs_features=d_feat,
                        tolerance=tol, notes=notes)
