"""Patch embedding x patch norm x position encoding on small data: cost, speed and accuracy, in one process.

For each combination: parameters; forward GFLOPs per image (``torch.utils.flop_counter``, which counts
matmuls, convolutions and attention, not norms or activations); train and inference img/s as a ratio
to the 'conv' / no norm / sin-cos baseline (each model and a reference copy of the baseline timed back
to back in several rounds, median of the per-round ratios, so load drift cancels; the baseline's own
row is an identical copy, so its distance from 1.00 is the timing noise); and validation top-1 on
scikit-learn digits at 32x32 (``examples/quickstart.py``'s data
and stratified split) after the same short training budget, mean of 3 seeds. Then the patch
embedding alone, Conv2d against Unfold + Linear, at ViT-B/16 224 px and at the digits model's size.

    PYTHONPATH=. python benchmarks/bench_patch_embed.py            # the screen, a few CPU minutes
    PYTHONPATH=. python benchmarks/bench_patch_embed.py --full     # every sensible combination (~5x longer)

The screen crosses every patch embedding with every patch norm (sin-cos positions; 'linear' only
without a norm, as it is 'conv' computed another way), and every position encoding with the
'conv' / no-norm patchifier. Images are prepared once as tensors; training augments them with a
random crop-and-resize (area 0.75-1, aspect 0.85-1.18, as the quick start) done on the batch, so
the data pipeline costs almost nothing next to the model. One CPU thread by default: on a small or
shared machine, several OpenMP threads per process make timings swing by an order of magnitude.
"""
import argparse
import importlib.util
import math
import statistics
import time
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import numpy as np
import torch
import torch.nn.functional as F
import timm
from torch.utils.flop_counter import FlopCounterMode

import timm_vit_variants  # noqa: F401  (registers simple_vit_*)
from timm_vit_variants.config import PATCH_EMBED_TYPES, PATCH_NORM_TYPES
from timm_vit_variants.patch_layers import UnfoldLinear

REPO = Path(__file__).resolve().parents[1]
POSITIONS = ('sincos', 'learn', 'none', 'cpe', 'sincos+cpe', 'learn+cpe')
BASELINE = ('conv', None, 'sincos')
# The digits model: the quick start's 32 px input, patch 8 (4x4 tokens) and one channel, narrower.
MODEL = dict(img_size=32, patch_size=8, in_chans=1, num_classes=10, embed_dim=64, depth=4, num_heads=4, mlp_dim=128)
Combo = Tuple[str, object, str]


def sensible(embed: str, norm: object) -> bool:
    """A per-patch pixel norm needs a per-patch projection ('conv_stem' and 'overlap' see across patches)."""
    return not (norm in ('pre', 'dual') and embed in ('conv_stem', 'overlap'))


def combos(full: bool) -> List[Combo]:
    embed_norms = [(e, n) for e in PATCH_EMBED_TYPES for n in PATCH_NORM_TYPES if sensible(e, n)]
    if full:
        return [(e, n, p) for e, n in embed_norms for p in POSITIONS]
    return [(e, n, 'sincos') for e, n in embed_norms if e != 'linear' or n is None] + \
        [('conv', None, p) for p in POSITIONS[1:]]


def build(combo: Combo, seed: int) -> torch.nn.Module:
    embed, norm, pos = combo
    torch.manual_seed(seed)
    return timm.create_model('simple_vit_tiny', patch_embed=embed, patch_norm=norm, pos_embed=pos, **MODEL)


def label(combo: Combo) -> str:
    return f'| {combo[0]} | {combo[1] or "-"} | {combo[2]} |'


# -- data --------------------------------------------------------------------------------------------

def digits_tensors() -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The quick start's split as normalised 1x32x32 tensors (bilinear upsampling, mean = std = 0.5)."""
    spec = importlib.util.spec_from_file_location('quickstart', REPO / 'examples' / 'quickstart.py')
    quickstart = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(quickstart)

    def prepare(ds) -> Tuple[torch.Tensor, torch.Tensor]:
        x = torch.from_numpy(ds.images.astype(np.float32) / 255.)[:, None]
        x = F.interpolate(x, size=(32, 32), mode='bilinear', align_corners=False)
        return (x - 0.5) / 0.5, torch.from_numpy(ds.labels)

    train, val = quickstart.digits_split()
    return (*prepare(train), *prepare(val))


def augment(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Random crop-and-resize of each image (area 0.75-1, aspect 0.85-1.18), as one batched resample."""
    n = x.shape[0]
    area = torch.empty(n).uniform_(0.75, 1.0, generator=generator)
    aspect = torch.exp(torch.empty(n).uniform_(math.log(0.85), math.log(1.18), generator=generator))
    sx, sy = (area * aspect).sqrt().clamp(max=1.), (area / aspect).sqrt().clamp(max=1.)
    tx = (torch.rand(n, generator=generator) * 2 - 1) * (1 - sx)
    ty = (torch.rand(n, generator=generator) * 2 - 1) * (1 - sy)
    theta = torch.zeros(n, 2, 3)
    theta[:, 0, 0], theta[:, 0, 2], theta[:, 1, 1], theta[:, 1, 2] = sx, tx, sy, ty
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode='bilinear', padding_mode='border', align_corners=False)


def train_and_validate(combo: Combo, seed: int, data: Tuple[torch.Tensor, ...], epochs: int,
                       batch: int = 64) -> float:
    """Validation top-1 (%) after ``epochs`` of AdamW (lr 1e-3, wd 0.05, 1 warmup epoch, cosine), smoothing 0.1."""
    x_tr, y_tr, x_va, y_va = data
    model = build(combo, seed).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    warmup = math.ceil(len(y_tr) / batch)
    decay = max(epochs * warmup - warmup, 1)

    def lr_factor(step: int) -> float:  # linear warmup for one epoch, then cosine down to 1% of the peak
        if step < warmup:
            return (step + 1) / warmup
        return 0.01 + 0.99 * 0.5 * (1 + math.cos(math.pi * (step - warmup) / decay))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        order = torch.randperm(len(y_tr), generator=generator)
        for i in range(0, len(order), batch):
            idx = order[i:i + batch]
            loss = F.cross_entropy(model(augment(x_tr[idx], generator)), y_tr[idx], label_smoothing=0.1)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
    model.eval()
    with torch.inference_mode():
        return 100. * (model(x_va).argmax(-1) == y_va).float().mean().item()


# -- cost and speed ----------------------------------------------------------------------------------

def gflops(model: torch.nn.Module, shape: Tuple[int, ...]) -> float:
    """Forward GFLOPs per image (2 per multiply-add, as FlopCounterMode counts)."""
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model.eval()(torch.zeros(*shape))
    return counter.get_total_flops() / shape[0] / 1e9


def _seconds(fn: Callable[[], None], iters: int) -> float:
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - start) / iters


def interleaved(steps: Dict[str, Callable[[], None]], rounds: int,
                min_seconds: float = 0.05) -> Dict[str, List[float]]:
    """Seconds per step of each function in each round; all run once per round, in reversed order every other round.

    Each measurement repeats its step for at least ``min_seconds`` (counted from a warm-up step), so
    that microsecond layers are not timed at the resolution of the clock.
    """
    names = list(steps)
    iters = {}
    for name, fn in steps.items():
        fn()  # warm-up: allocations, optimizer state
        iters[name] = max(1, math.ceil(min_seconds / _seconds(fn, 1)))
    times: Dict[str, List[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            times[name].append(_seconds(steps[name], iters[name]))
    return times


def paired_ratios(times: Dict[str, List[float]], slow: str, fast: str) -> List[float]:
    """``slow`` time / ``fast`` time within each round (neighbours in time, so load drift cancels), sorted."""
    return sorted(a / b for a, b in zip(times[slow], times[fast]))


def speed_vs(reference: torch.nn.Module, model: torch.nn.Module, x: torch.Tensor,
             step: Callable[[torch.nn.Module, torch.Tensor], Callable[[], None]], rounds: int) -> float:
    """``model``'s img/s over ``reference``'s: the two timed back to back in each round, median of the ratios."""
    times = interleaved({'reference': step(reference, x), 'model': step(model, x)}, rounds)
    return statistics.median(paired_ratios(times, 'reference', 'model'))


def train_step(model: torch.nn.Module, x: torch.Tensor) -> Callable[[], None]:
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    target = torch.randint(0, model.num_classes, (x.shape[0],), generator=torch.Generator().manual_seed(0))

    def step() -> None:
        F.cross_entropy(model(x), target).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def infer_step(model: torch.nn.Module, x: torch.Tensor) -> Callable[[], None]:
    def step() -> None:
        model.eval()
        with torch.inference_mode():
            model(x)
    return step


def layer_train_step(layer: torch.nn.Module, x: torch.Tensor) -> Callable[[], None]:
    """Forward and backward of a patchifier alone (what 'trains faster' can mean for the layer itself)."""
    def step() -> None:
        layer(x).square().mean().backward()
        layer.zero_grad(set_to_none=True)
    return step


def conv_vs_linear(rounds: int) -> List[str]:
    """Conv2d against Unfold + Linear with the same weights: train step (fwd + bwd) and inference, time linear/conv."""
    rows = []
    for name, chans, dim, patch, side, batch in (('ViT-B/16, 224 px, batch 16', 3, 768, 16, 224, 16),
                                                 ('digits model, 32 px, batch 64', 1, 64, 8, 32, 64)):
        torch.manual_seed(0)
        conv = torch.nn.Conv2d(chans, dim, patch, stride=patch)
        linear = UnfoldLinear(chans, dim, (patch, patch))
        linear.load_state_dict(conv.state_dict())
        x = torch.randn(batch, chans, side, side)
        train = interleaved({'conv': layer_train_step(conv, x), 'linear': layer_train_step(linear, x)}, rounds, 0.2)
        infer = interleaved({'conv': infer_step(conv, x), 'linear': infer_step(linear, x)}, rounds, 0.2)
        cells = [paired_ratios(times, 'linear', 'conv') for times in (train, infer)]
        rows.append(f'| {name} |' + ''.join(f' {statistics.median(r):.2f} [{r[0]:.2f}-{r[-1]:.2f}] |' for r in cells))
    return rows


# -- the sweep ---------------------------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--full', action='store_true', help='every sensible combination, not the screen')
    parser.add_argument('--epochs', type=int, default=8, help='training epochs per run (default: 8)')
    parser.add_argument('--seeds', type=int, default=3, help='runs per combination (default: 3)')
    parser.add_argument('--rounds', type=int, default=7, help='paired timing rounds per model (default: 7)')
    parser.add_argument('--layer-rounds', type=int, default=21, help='paired rounds, patchifier alone (default: 21)')
    parser.add_argument('--threads', type=int, default=1, help='CPU threads (default: 1)')
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    start = time.time()
    todo = combos(args.full)
    print(f'torch {torch.__version__}, timm {timm.__version__}, {torch.get_num_threads()} CPU threads; model '
          f'{MODEL}; {len(todo)} combinations x {args.seeds} seeds x {args.epochs} epochs\n')

    models = {c: build(c, 0) for c in todo}
    # Every model, the baseline's own row included, is timed against a separate copy of the baseline, so
    # that row's distance from 1.00 is the timing noise.
    reference = build(BASELINE, 0)
    x_train, x_infer = torch.randn(64, 1, 32, 32), torch.randn(256, 1, 32, 32)
    train = {c: speed_vs(reference, m, x_train, train_step, args.rounds) for c, m in models.items()}
    infer = {c: speed_vs(reference, m, x_infer, infer_step, args.rounds) for c, m in models.items()}

    data = digits_tensors()
    print('| patch_embed | patch_norm | pos_embed | params (k) | GFLOPs/img | train img/s vs conv '
          f'| infer img/s vs conv | top-1 % (mean ± sd, {args.seeds} seeds) |')
    print('|---|---|---|---:|---:|---:|---:|---:|')
    results = {}
    for combo, model in models.items():
        accs = [train_and_validate(combo, seed, data, args.epochs) for seed in range(args.seeds)]
        results[combo] = statistics.mean(accs)
        params = sum(p.numel() for p in model.parameters()) / 1e3
        print(f'{label(combo)} {params:.1f} | {gflops(model, (1, 1, 32, 32)):.5f} | {train[combo]:.2f} '
              f'| {infer[combo]:.2f} | {statistics.mean(accs):.1f} ± {statistics.pstdev(accs):.1f} |', flush=True)
    best = max(results, key=results.get)
    print(f'\nbest: {label(best)} {results[best]:.1f}% (baseline {results[BASELINE]:.1f}%)')

    print(f'\n| patchifier alone (same weights; median [range] of {args.layer_rounds} paired rounds) '
          '| train step time, linear / conv | inference time, linear / conv |')
    print('|---|---:|---:|')
    print('\n'.join(conv_vs_linear(args.layer_rounds)))
    print(f'\n{(time.time() - start) / 60:.1f} min')


if __name__ == '__main__':
    main()
