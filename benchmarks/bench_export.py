"""Which deployment paths follow the input size: ours against timm's ViT, measured in one process.

For each model (simple_vit with the sin-cos table, with a learned table under the big_vision and timm
resample rules, and timm's ``vit_*`` with ``dynamic_img_size=True``, also with ``dynamic_img_pad=True``):

* ONNX, dynamic H x W and ``--static``, and ``torch.export`` (.pt2) with dynamic H x W, written by
  ``porting.export`` and proved by running the file at every size of ``verification_sizes``: works or
  fails (with the reason), and max |delta logits| against eager PyTorch;
* ``torch.compile(model, dynamic=True)``: graphs compiled after the first call over six more sizes
  (and two the patch does not divide, for models that pad), counted with
  ``torch._dynamo.utils.counters['stats']['unique_graphs']``, for a square first input (also marked
  with ``torch._dynamo.mark_dynamic``) and a non-square one, and max |delta| against eager;
* ONNX Runtime throughput against eager PyTorch on CPU at two sizes, as a ratio (> 1: ONNX Runtime is
  faster), timed in the same process with the same thread count, alternating which runs first: the
  median and range of the per-round ratios over ``--rounds`` (ONNX Runtime's idle threads do not spin, so
  they leave the cores to PyTorch). The header line records the versions and the load average.

Heads and learned tables are randomised (N(0, 1)) so a wrong pad or resample shows in the logits.

    python benchmarks/bench_export.py                          # ViT-Ti/16 at 224, 2 threads
    python benchmarks/bench_export.py --depth 2 --rounds 3     # quicker
"""
import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Sequence, Tuple

import timm
import torch
from torch._dynamo.utils import counters

import timm_vit_variants  # noqa: F401  (registers simple_vit_*)
from porting.export import export_onnx, export_pt2
from timm_vit_variants.errors import ViTVariantsError

# After the first call: square, non-square, smaller and larger; then two the patch (16) does not divide.
COMPILE_SIZES = [(224, 224), (160, 160), (320, 320), (224, 288), (288, 192), (128, 336)]
COMPILE_SIZES_PADDED = [(230, 200), (239, 33)]
COLUMNS = {
    'simple_vit sin-cos': ('simple_vit_{size}', {}),
    'simple_vit learned, big_vision rule': ('simple_vit_{size}', dict(
        pos_embed='learn', class_token=True, pos_embed_cls_slot=True, global_pool='token')),
    'simple_vit learned, timm rule': ('simple_vit_{size}', dict(
        pos_embed='learn', class_token=True, pos_embed_cls_slot=True, global_pool='token', pos_embed_resample='timm')),
    'timm vit dynamic_img_size': ('vit_{size}_patch16_224', dict(dynamic_img_size=True)),
    'timm vit dynamic_img_size + pad': ('vit_{size}_patch16_224', dict(dynamic_img_size=True, dynamic_img_pad=True)),
}


def build(column: str, size: str, depth: int) -> torch.nn.Module:
    name, kwargs = COLUMNS[column]
    torch.manual_seed(0)
    model = timm.create_model(name.format(size=size), depth=depth, num_classes=1000, **kwargs).eval()
    with torch.no_grad():
        model.head.weight.normal_(0, model.head.in_features ** -0.5)
        if getattr(model, 'pos_embed', None) is not None:
            model.pos_embed.normal_()
    return model


def export_cell(fn: Callable, model: torch.nn.Module, path: Path, **kwargs) -> str:
    """'works (N sizes), max |d| X' or 'fails: reason' for one export written and run by porting.export."""
    try:
        result = fn(model, path, **kwargs)
    except ViTVariantsError as e:
        return f'fails: {e.reason[:90]}'
    count = len(result.sizes)
    return f'works ({count} size{"s" if count > 1 else ""}), {result.verification.max_abs_logits:.1e}'


def compile_cell(model: torch.nn.Module, first: Tuple[int, int], sizes: Sequence[Tuple[int, int]],
                 backend: str, mark: bool = False) -> str:
    """Graphs compiled after the first call, over ``sizes`` (batch 2 and 4 in turn), and max |d| against eager."""
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, dynamic=True, backend=backend)
    worst, failed = 0.0, []
    with torch.no_grad():
        x = torch.randn(2, 3, *first)
        if mark:
            torch._dynamo.mark_dynamic(x, (0, 2, 3))
        try:
            compiled(x)
        except Exception as e:  # noqa: BLE001  (reported in the table)
            return f'fails: {type(e).__name__}'
        after_first = counters['stats']['unique_graphs']
        for i, (h, w) in enumerate(sizes):
            x = torch.randn(2 + 2 * (i % 2), 3, h, w)
            try:
                worst = max(worst, (compiled(x) - model(x)).abs().max().item())
            except Exception as e:  # noqa: BLE001  (reported in the table)
                failed.append(f'{h}x{w} {type(e).__name__}')
    recompiles = counters['stats']['unique_graphs'] - after_first
    text = f'{recompiles} recompile{"" if recompiles == 1 else "s"} / {len(sizes)} sizes, {worst:.1e}'
    return text + (f'; fails at {", ".join(failed)}' if failed else '')


def throughput_ratio(model: torch.nn.Module, onnx_path: Path, size: Tuple[int, int], batch: int, threads: int,
                     rounds: int, iters: int) -> Tuple[float, float, float]:
    """ONNX Runtime images/s divided by eager PyTorch images/s in each round (the order alternating each round):
    (median, lowest, highest) over the rounds."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    # Idle ONNX Runtime threads spin by default; here they would take cores from the PyTorch run that follows.
    options.add_session_config_entry('session.intra_op.allow_spinning', '0')
    session = onnxruntime.InferenceSession(str(onnx_path), options, providers=['CPUExecutionProvider'])
    x = torch.randn(batch, 3, *size)
    feed = {session.get_inputs()[0].name: x.numpy()}

    def run_torch() -> None:
        with torch.inference_mode():
            model(x)

    def run_ort() -> None:
        session.run(None, feed)

    def timed(fn: Callable[[], None]) -> float:
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        return (time.perf_counter() - start) / iters

    run_torch(), run_ort()  # warm-up
    ratios: List[float] = []
    for r in range(rounds):
        order = [('torch', run_torch), ('ort', run_ort)]
        times: Dict[str, float] = {}
        for key, fn in (order if r % 2 == 0 else order[::-1]):
            times[key] = timed(fn)
        ratios.append(times['torch'] / times['ort'])
    return statistics.median(ratios), min(ratios), max(ratios)


def _version(module: str) -> str:
    from importlib.metadata import version

    return version(module)


def main(argv: Sequence[str] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--size', default='tiny', help='ViT size: tiny, small, base (patch 16, 224)')
    parser.add_argument('--depth', type=int, default=12)
    parser.add_argument('--static', nargs=2, type=int, default=(256, 192), metavar=('H', 'W'))
    parser.add_argument('--compile-backend', default='eager',
                        help="dynamo backend for the recompile count (default eager; 'inductor' compiles for real)")
    parser.add_argument('--threads', type=int, default=2)
    parser.add_argument('--batch', type=int, default=8)
    parser.add_argument('--rounds', type=int, default=5)
    parser.add_argument('--iters', type=int, default=3)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    rows = ['ONNX, dynamic H×W', f'ONNX, --static {args.static[0]} {args.static[1]}',
            'torch.export .pt2, dynamic H×W',
            'torch.compile(dynamic=True), square first (224×224)',
            'torch.compile(dynamic=True), square first, mark_dynamic(x, (0, 2, 3))',
            'torch.compile(dynamic=True), non-square first (224×240)',
            'ONNX Runtime / eager PyTorch, images/s, 224×224', 'ONNX Runtime / eager PyTorch, images/s, 288×192']
    table: Dict[str, Dict[str, str]] = {row: {} for row in rows}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        for index, column in enumerate(COLUMNS):
            model = build(column, args.size, args.depth)
            sizes = COMPILE_SIZES + (COMPILE_SIZES_PADDED if model.patch_embed.dynamic_img_pad else [])
            onnx_path = Path(tmp) / f'{index}.onnx'
            cells = [
                export_cell(export_onnx, model, onnx_path),
                export_cell(export_onnx, model, Path(tmp) / 'static.onnx', static=args.static, overwrite=True),
                export_cell(export_pt2, model, Path(tmp) / 'm.pt2', overwrite=True),
                compile_cell(model, (224, 224), sizes[1:], args.compile_backend),
                compile_cell(model, (224, 224), sizes[1:], args.compile_backend, mark=True),
                compile_cell(model, (224, 240), sizes, args.compile_backend),
            ]
            for size in ((224, 224), (288, 192)):
                if onnx_path.exists():
                    median, low, high = throughput_ratio(model, onnx_path, size, args.batch, args.threads,
                                                         args.rounds, args.iters)
                    cells.append(f'{median:.2f} ({low:.2f}–{high:.2f})')
                else:
                    cells.append('no ONNX file')
            for row, cell in zip(rows, cells):
                table[row][column] = cell
            print(f'done: {column}', flush=True)

    print(f'\nViT-{args.size[0].upper()}/16 depth {args.depth}, random weights (heads and tables N(0, 1)); '
          f'torch {torch.__version__}, timm {timm.__version__}; {args.threads} threads; compile backend '
          f'{args.compile_backend}; throughput batch {args.batch}, median (range) of {args.rounds} rounds x '
          f'{args.iters} calls; onnxruntime {_version("onnxruntime")}; 1-min load average '
          f'{load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after\n')
    print('| feature | ' + ' | '.join(COLUMNS) + ' |')
    print('|---' * (len(COLUMNS) + 1) + '|')
    for row in rows:
        print(f'| {row} | ' + ' | '.join(table[row][c] for c in COLUMNS) + ' |')


if __name__ == '__main__':
    main()
