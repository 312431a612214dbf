"""Deployable files from a ViT: ONNX and ``torch.export`` (``.pt2``) graphs for any batch and any H x W.

The graph follows the input size because the model records its right/bottom pad, its sin-cos table
and its learned-table resample in the graph whenever one is captured
(``timm_vit_variants.geometry.is_capturing``). ONNX goes through PyTorch's dynamo exporter
(``torch.onnx.export(dynamo=True)``, opset 18 to 23): the TorchScript exporter is deprecated and cannot
translate the antialiased resizes of the timm and flexi rules, which ONNX ``Resize`` expresses exactly
from opset 18 (``antialias=1``).

Nothing is trusted because the export succeeded. An ONNX file is checked with ``onnx.checker`` and
run by ONNX Runtime (CPU); a ``.pt2`` is saved, loaded back and run. Either is compared with the eager
model at several sizes (the nominal one, smaller, larger, non-square, and one the patch does not
divide when the model pads). Files are written beside OUT and renamed into place only once verified
(``porting.output.atomic_file``), so a failure leaves nothing behind.
"""
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch

from timm_vit_variants import __version__ as plugin_version
from timm_vit_variants.errors import ViTVariantsError, first_line
from timm_vit_variants.limits import DEFAULT_LIMITS, Limits

from .extras import require
from .hub_folder import load_folder, read_config
from .output import atomic_file, check_output
from .pipeline import all_finite
from .constants import DEFAULT_OPSET, EXPORT_FORMATS as FORMATS, ONNX_OPSETS
from .request import ExportRequest, request_of
from .verification import Outputs, Verification
from .verification.compare import OutputsDiffer, deltas

__all__ = ['FORMATS', 'ONNX_OPSETS', 'DEFAULT_OPSET', 'METADATA_FILE', 'ExportResult', 'export_onnx', 'export_pt2',
           'verification_sizes']

INPUT_NAME, OUTPUT_NAME = 'pixel_values', 'logits'
METADATA_FILE = 'vit_port_metadata.json'  # the .pt2 archive's copy of the ONNX metadata_props
# A protobuf message (one ONNX file without external data) holds at most 2 GiB.
_ONNX_MAX_BYTES = 2 ** 31 - 2 ** 24
_REGISTRY_PREFIXES = ('hf-hub:', 'local-dir:')

Size = Tuple[int, int]


@dataclass
class _Model:
    """The network to export and what its file should say about it."""
    module: torch.nn.Module
    name: str
    in_chans: int
    img_size: Size
    patch_size: Size
    grid_mode: str  # 'pad', 'pool' and 'crop' take any size; 'strict' only patch multiples

    @property
    def any_size(self) -> bool:
        return self.grid_mode != 'strict'
    data_config: Dict[str, Any]
    source_sha256: str
    label_names: Optional[List[str]] = None


@dataclass
class ExportResult:
    """Where the file went, what it accepts and how it was checked (``sizes``: the H x W it was run at)."""
    out: Path
    format: str
    static: Optional[Size]
    opset: Optional[int]
    verification: Verification
    sizes: List[Size]
    metadata: Dict[str, str]

    def summary(self) -> str:
        """One line: the path, then the format and which input axes are dynamic."""
        kind = f'ONNX opset {self.opset}' if self.format == 'onnx' else 'torch.export .pt2'
        axes = 'dynamic batch' + (f', fixed {self.static[0]}x{self.static[1]}' if self.static
                                  else ', height and width')
        return f'{self.out} ({kind}, {axes})'


def verification_sizes(img_size: Sequence[int], patch_size: Sequence[int], any_size: bool) -> List[Size]:
    """The H x W sizes an export is verified at: nominal, smaller, larger, non-square and, when the model
    takes any size (pads or crops), two the patch does not divide. Every axis keeps at least two patches
    (see ``export_pt2``)."""
    (height, width), (ph, pw) = img_size, patch_size
    gh, gw = max(2, -(-height // ph)), max(2, -(-width // pw))
    grids = [(gh, gw), (max(2, gh // 2), max(2, gw // 2)), (gh + max(1, gh // 2), gw + max(1, gw // 2)),
             (gh, gw + max(1, gw // 3) + 1), (gh + 2, max(2, gw - 1))]
    sizes = [(a * ph, b * pw) for a, b in grids]
    if any_size and (ph > 1 or pw > 1):
        sizes += [(gh * ph + 1, gw * pw - 1), ((gh + 1) * ph - 1, 2 * pw + 1)]
    if (height, width) not in sizes:
        sizes.insert(0, (height, width))
    return list(dict.fromkeys(sizes))


def _recorded_sha256(raw: Dict[str, Any], where: str) -> str:
    """The source sha256 a converted folder's ``config.json`` records (``conversion.source_sha256``)."""
    conversion = raw.get('conversion')
    sha = conversion.get('source_sha256') if isinstance(conversion, dict) else None
    return sha if isinstance(sha, str) and re.fullmatch(r'[0-9a-f]{64}', sha) else \
        f'not recorded (no conversion.source_sha256 in {where})'


def _check_finite(module: torch.nn.Module, where: str) -> None:
    """Refuse weights holding NaN or Inf, naming the first tensor: an export of them could only fail its check."""
    for key, tensor in module.state_dict().items():
        if not all_finite(tensor):
            raise ViTVariantsError('the weights hold NaN or Inf values; an exported graph of them cannot be checked',
                                   path=where, key=key)


def _describe(module: torch.nn.Module, name: str, data_config: Dict[str, Any], sha256: str,
              labels: Optional[List[str]] = None, where: Optional[str] = None) -> _Model:
    embed = getattr(module, 'patch_embed', None)
    if embed is None or not hasattr(embed, 'patch_size') or not hasattr(embed, 'img_size'):
        raise ViTVariantsError(f'{type(module).__name__} has no ViT patch embedding (patch_embed with img_size '
                               'and patch_size); only ViTs can be exported here')
    in_chans = getattr(module, 'in_chans', None) or embed.proj.in_channels
    _check_finite(module, where or name)
    grid_mode = getattr(embed, 'grid_mode', None) or ('pad' if getattr(embed, 'dynamic_img_pad', False) else 'strict')
    return _Model(module.eval(), name, int(in_chans), tuple(embed.img_size), tuple(embed.patch_size), grid_mode,
                  data_config, sha256, labels)


def _open(source: Union[str, os.PathLike, torch.nn.Module], limits: Limits = DEFAULT_LIMITS) -> _Model:
    """The model behind a Hub folder, a registered ``simple_vit_*`` name (or hf-hub:/local-dir:), or a module."""
    import timm

    from timm_vit_variants import SimpleVisionTransformer

    if isinstance(source, torch.nn.Module):
        cfg = dict(getattr(source, 'pretrained_cfg', None) or {})
        return _describe(source, type(source).__name__, cfg, 'not recorded (exported from an in-memory model)')
    text = os.fspath(source)
    if os.path.isdir(text):
        _, raw = read_config(text, limits)  # raises for a folder without a simple_vit config.json
        return _describe(load_folder(text, limits, 'float32'), raw['architecture'], dict(raw.get('pretrained_cfg') or {}),
                         _recorded_sha256(raw, os.path.join(text, 'config.json')), raw.get('label_names'), where=text)
    if os.path.lexists(text):
        raise ViTVariantsError('export takes a converted folder (config.json + weights) or a model name; convert '
                               'checkpoint files with "vit-port convert" first', path=text)
    if not text.startswith(_REGISTRY_PREFIXES):
        if os.sep in text or text.startswith(('.', '~')):
            raise ViTVariantsError('no such folder', path=text)
        if text.split('.', 1)[0] not in timm.list_models('simple_vit*'):
            raise ViTVariantsError(f'unknown model {text!r}: not a folder and not a registered simple_vit_* name '
                                   f'(see timm.list_models("simple_vit*"))')
    try:
        module = timm.create_model(text, pretrained=True)
    except (RuntimeError, OSError) as e:  # timm: "No pretrained weights exist for ..."; a Hub or file error
        raise ViTVariantsError(f'cannot load {text!r} with weights: {first_line(e)}') from None
    if not isinstance(module, SimpleVisionTransformer):
        raise ViTVariantsError(f'{text!r} is a {type(module).__name__}, not a simple_vit_* model')
    folder = text[len('local-dir:'):] if text.startswith('local-dir:') else None
    if folder is not None:
        _, raw = read_config(folder, limits)
        sha = _recorded_sha256(raw, os.path.join(folder, 'config.json'))
    else:
        sha = f'not recorded (built from the model name {text})'
    return _describe(module, text, dict(module.pretrained_cfg or {}), sha, module.pretrained_cfg.get('label_names'))


def _source_paths(source: Union[str, os.PathLike, torch.nn.Module]) -> List[str]:
    """The files a source reads, which OUT may never replace (known before anything is loaded)."""
    if isinstance(source, torch.nn.Module):
        return []
    text = os.fspath(source)
    if text.startswith('local-dir:'):
        return [text[len('local-dir:'):]]
    return [text] if os.path.lexists(text) else []


def _check_static(model: _Model, static: Optional[Sequence[int]], limits: Limits) -> Optional[Size]:
    """The fixed (H, W) asked for (one value: a square), within the limits on image size and tokens."""
    if static is None:
        return None
    if len(static) not in (1, 2) or min(static) < 1:
        raise ViTVariantsError(f'a static size is one or two positive integers (H [W]), got {list(static)}',
                               key='static')
    size = (int(static[0]), int(static[-1]))
    (ph, pw) = model.patch_size
    limits.check('img_size', max(size), key='static')
    limits.check('tokens', -(-size[0] // ph) * -(-size[1] // pw), key='static')
    limits.check('tensor_bytes', 2 * model.in_chans * size[0] * size[1] * 4, key='static')  # the example batch
    if not model.any_size and (size[0] % ph or size[1] % pw):
        raise ViTVariantsError(f'static size {size[0]}x{size[1]} is not divisible by patch size {ph}x{pw} and this '
                               "model neither pads nor crops (grid_mode='strict', the older dynamic_img_pad=False)",
                               key='static')
    return size


def _metadata(model: _Model, static: Optional[Size], exporter: str) -> Dict[str, str]:
    """String key/value pairs for the file: what a runtime needs to feed the graph, and where it came from."""
    cfg = model.data_config
    meta = {
        'architecture': model.name,
        'input': f'float32 NCHW (batch, {model.in_chans}, height, width), normalised with mean and std',
        'mean': json.dumps(list(cfg['mean'])) if cfg.get('mean') is not None else 'not recorded',
        'std': json.dumps(list(cfg['std'])) if cfg.get('std') is not None else 'not recorded',
        'input_size': json.dumps([model.in_chans, *(static or model.img_size)]),
        'patch_size': json.dumps(list(model.patch_size)),
        'dynamic_axes': 'batch' if static else 'batch,height,width',
        'size_rule': {'crop': 'any H, W: cropped to whole patches in the graph (a VALID patch conv)',
                      'strict': 'H and W must be multiples of patch_size (the model neither pads nor crops)'}.get(
            model.grid_mode, 'any H, W: padded right/bottom to a patch multiple in the graph'),
        'source_sha256': model.source_sha256,
        'exported_by': f'vit-port export (timm-vit-variants {plugin_version}, torch {torch.__version__}, {exporter})',
    }
    for key in ('interpolation', 'crop_pct'):
        if cfg.get(key) is not None:
            meta[key] = str(cfg[key])
    if model.label_names:
        meta['label_names'] = json.dumps(list(model.label_names))
    return meta


def _inputs(model: _Model, sizes: Sequence[Size]) -> List[torch.Tensor]:
    """Seeded inputs, batch 1 and 3 in turn, so a dynamic batch is exercised too."""
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(1 + 2 * (i % 2), model.in_chans, h, w, generator=gen) for i, (h, w) in enumerate(sizes)]


def _verify(model: _Model, run: Callable[[torch.Tensor], torch.Tensor], sizes: Sequence[Size], runner: str,
            tol: float, progress: bool) -> Verification:
    """Run the exported artifact and the eager model on the same inputs (``verification.deltas`` of their logits,
    or features for a headless model); the worst over all sizes, each size's recorded."""
    from tqdm import tqdm

    label = 'logits' if getattr(model.module, 'num_classes', 1) else 'features'
    shown = ', '.join(f'{h}x{w}' for h, w in sizes)
    where = f'PyTorch eager ({runner} at {len(sizes)} size{"s" if len(sizes) > 1 else ""}: {shown})'
    found: Dict[str, float] = {}
    informative = False
    for x in tqdm(_inputs(model, sizes), desc='verify', unit='size', disable=not progress, leave=False):
        size = f'{x.shape[-2]}x{x.shape[-1]} (batch {x.shape[0]})'
        with torch.no_grad():
            expected = model.module(x)
            try:
                got = run(x)
            except Exception as e:  # noqa: BLE001  (a runtime refusing a size is a failed check, reported as such)
                return Verification('failed', reference=where, tolerance=tol,
                                    reason=f'the exported file failed at {size}: {first_line(e)}')
        try:
            delta = deltas(Outputs(None, expected, 'eager'), Outputs(None, got, 'the file'))['logits']
        except OutputsDiffer as e:
            return Verification('failed', reference=where, tolerance=tol,
                                reason=f'at {size} the exported file gave shape {e.ours} (expected {e.reference})')
        if not torch.isfinite(got).all():
            return Verification('failed', reference=where, tolerance=tol,
                                reason=f'at {size} the exported file gave NaN or Inf values')
        found[f'{label} at {size}'] = delta
        informative = informative or bool((expected != expected.flatten()[0]).any())
    worst = max(found.values())
    status = 'passed' if worst <= tol else 'failed'
    figures = {'max_abs_logits' if label == 'logits' else 'max_abs_features': worst}
    result = Verification(status, reference=where, tolerance=tol, deltas=found, **figures)
    if not informative:
        result.notes.append(f'the eager {label} are constant (an all-zero head?), so they cannot show a wrong graph')
    return result


def _example(model: _Model, static: Optional[Size]) -> torch.Tensor:
    # batch 2: torch.export specialises a size-1 dimension to a constant
    return torch.randn(2, model.in_chans, *(static or model.img_size), generator=torch.Generator().manual_seed(1))


def _failure(stage: str, e: Exception, path: str) -> ViTVariantsError:
    return ViTVariantsError(f'{stage} failed: {first_line(e)}', path=path)


def export_onnx(
        source: Union[str, os.PathLike, torch.nn.Module],
        out: Union[str, os.PathLike],
        request: Optional[ExportRequest] = None,
        **options: Any,
) -> ExportResult:
    """Write ``source`` as one ONNX file with dynamic batch, height and width (``static=(H, W)`` fixes the size).

    ``request`` (``porting.request.ExportRequest``) or its fields as keywords: ``static``, ``opset``,
    ``overwrite``, ``tol``, ``limits``, ``progress``.

    ``source`` is a converted Hub folder, a registered ``simple_vit_*`` name (also ``hf-hub:``/``local-dir:``,
    loaded with its weights), or an ``nn.Module`` ViT. The file is checked by ``onnx.checker`` and run by
    ONNX Runtime against the eager model (max |delta logits| <= ``tol``); it carries mean/std, patch size
    and the source sha256 as ``metadata_props``. Raises ViTVariantsError for bad input, an unusable OUT
    or a failed check, leaving nothing behind.
    """
    request = request_of(ExportRequest, request, options)
    opset, overwrite, tol, progress = request.opset, request.overwrite, request.tol, request.progress
    require('onnx', 'ONNX export', 'export --format pt2')
    paths = _source_paths(source)
    out_path = check_output(out, overwrite, sources=paths, folder=False)
    model = _open(source, request.limits)
    size = _check_static(model, request.static, request.limits)
    weight_bytes = sum(t.numel() * t.element_size() for t in (*model.module.parameters(), *model.module.buffers()))
    if weight_bytes > _ONNX_MAX_BYTES:
        raise ViTVariantsError(f'the weights take {weight_bytes / 2 ** 30:.2f} GiB; one ONNX file holds at most 2 GiB '
                               '(export --format pt2 instead)', path=str(out_path))
    sizes = [size] if size else verification_sizes(model.img_size, model.patch_size, model.any_size)
    meta = _metadata(model, size, f'torch.onnx dynamo exporter, opset {opset}')
    axes = {0: 'batch'} if size else {0: 'batch', 2: 'height', 3: 'width'}
    with atomic_file(out_path, overwrite, sources=paths) as tmp:
        _write_onnx(model.module, _example(model, size), axes, opset, meta, tmp, str(out_path))
        verification = _verify(model, _onnx_runner(tmp), sizes, 'the file run by ONNX Runtime CPU', tol, progress)
        if verification.status != 'passed':
            raise ViTVariantsError(verification.summary(), path=str(out_path))
    return ExportResult(out_path, 'onnx', size, opset, verification, sizes, meta)


def _write_onnx(module: torch.nn.Module, example: torch.Tensor, axes: Dict[int, str], opset: int,
                meta: Dict[str, str], path: Path, shown: str) -> None:
    """Export to ``path`` (the partial file), add the metadata and run onnx.checker; errors name ``shown`` (OUT)."""
    import onnx

    try:
        with torch.no_grad():
            program = torch.onnx.export(
                module, (example,), dynamo=True, opset_version=opset, input_names=[INPUT_NAME],
                output_names=[OUTPUT_NAME], dynamic_shapes=(axes,), external_data=False, optimize=True,
                verbose=False)
    except Exception as e:  # noqa: BLE001  (torch.export and onnxscript raise many types)
        raise _failure('the ONNX export', e, shown) from None
    program.model.metadata_props.update(meta)
    program.save(str(path), external_data=False)
    try:
        onnx.checker.check_model(str(path), full_check=True)
    except onnx.checker.ValidationError as e:
        raise _failure('onnx.checker', e, shown) from None


def _onnx_runner(path: Path) -> Callable[[torch.Tensor], torch.Tensor]:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=['CPUExecutionProvider'])

    def run(x: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(session.run([OUTPUT_NAME], {INPUT_NAME: x.numpy()})[0])
    return run


def export_pt2(
        source: Union[str, os.PathLike, torch.nn.Module],
        out: Union[str, os.PathLike],
        request: Optional[ExportRequest] = None,
        **options: Any,
) -> ExportResult:
    """Write ``source`` as a ``torch.export`` program (``torch.export.save``) with dynamic batch, H and W.

    Same sources, checks and guarantees as ``export_onnx``: the saved file is loaded back with
    ``torch.export.load`` and run at several sizes against the eager model; the metadata is stored as
    ``METADATA_FILE`` (read it with ``torch.export.load(path, extra_files={METADATA_FILE: ''})``). The
    program keeps torch.export's guards, so it refuses (rather than miscomputes) a size outside what it
    was proved for: H and W of at least patch + 1 (two patches, and multiples of the patch, for a model
    that does not pad).
    """
    request = request_of(ExportRequest, request, options)
    overwrite, tol, progress = request.overwrite, request.tol, request.progress
    paths = _source_paths(source)
    out_path = check_output(out, overwrite, sources=paths, folder=False)
    model = _open(source, request.limits)
    size = _check_static(model, request.static, request.limits)
    sizes = [size] if size else verification_sizes(model.img_size, model.patch_size, model.any_size)
    meta = _metadata(model, size, 'torch.export.export')
    dynamic = torch.export.Dim.DYNAMIC
    axes = {0: dynamic} if size else {0: dynamic, 2: dynamic, 3: dynamic}
    with atomic_file(out_path, overwrite, sources=paths) as tmp:
        try:
            with torch.no_grad():
                program = torch.export.export(model.module, (_example(model, size),), dynamic_shapes=(axes,))
        except Exception as e:  # noqa: BLE001
            raise _failure('torch.export', e, str(out_path)) from None
        with open(tmp, 'wb') as fh:  # a file object: torch.export wants a path ending in .pt2 otherwise
            torch.export.save(program, fh, extra_files={METADATA_FILE: json.dumps(meta)})
        with open(tmp, 'rb') as fh:
            loaded = torch.export.load(fh).module()
        verification = _verify(model, loaded, sizes, 'the file loaded by torch.export.load', tol, progress)
        if verification.status != 'passed':
            raise ViTVariantsError(verification.summary(), path=str(out_path))
    return ExportResult(out_path, 'pt2', size, None, verification, sizes, meta)
