"""Conversion cost against a plain file copy: time as a ratio to ``shutil.copyfile``, and extra memory.

Builds random-weight ViT checkpoints of one size in four real layouts (big_vision ``.npz``,
vit_jax/AugReg ``.npz``, timm ``.safetensors`` and timm ``.pth``), then, for each, in fresh child
processes so every run starts alike:

  copy        ``shutil.copyfile`` of the same file, then fsync (the floor for any conversion)
  convert     ``porting.pipeline.convert(..., no_verify=True)``, timed inside the process (no start-up)
  verified    the same with numerical verification against the source's reference implementation
  streamed    verified with ``memory_budget=1`` (forcing the streamed mode: block by block, from mapped weights)
  CLI         ``python -m porting convert SRC OUT --no-verify``, wall time including interpreter start-up

Resident memory is sampled every 5 ms inside the child (``/proc/self/statm``); "extra" is the peak
during the work minus the resident memory after the imports, and "peak" the whole process's. The machine is shared and noisy:
each figure is a ratio to the copy measured in the same round, and rounds are repeated (median and
range are reported).

Run: ``OMP_NUM_THREADS=1 python benchmarks/bench_convert.py --size large --rounds 3``
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Dict, List

import numpy as np

REPO = Path(__file__).resolve().parents[1]

# width, depth, mlp, heads, patch, img
SIZES = {
    'tiny': (192, 12, 768, 3, 16, 224),
    'base': (768, 12, 3072, 12, 16, 224),
    'large': (1024, 24, 4096, 16, 16, 224),
    # the large towers of issue 27, written as float32 .npz / timm files (minutes each; not for CI)
    'g14': (1408, 40, 6144, 16, 14, 224),
    'so400m': (1152, 27, 4304, 16, 14, 224),
}

# Runs in a child: imports, baseline RSS, the timed work, then one JSON line.
_CHILD = '''
import json, os, shutil, sys, threading, time
kind, src, out = sys.argv[1:4]
if kind != 'copy':
    from porting.pipeline import convert
page = os.sysconf('SC_PAGE_SIZE')
def rss():
    with open('/proc/self/statm') as f:
        return int(f.read().split()[1]) * page
base, peak, done = rss(), [0], threading.Event()
def sample():
    while not done.wait(0.005):
        peak[0] = max(peak[0], rss())
sampler = threading.Thread(target=sample, daemon=True)
sampler.start()
start = time.perf_counter()
if kind == 'copy':
    shutil.copyfile(src, out)
    with open(out, 'rb') as f:
        os.fsync(f.fileno())
else:
    result = convert(src, out, no_verify=(kind == 'convert'), memory_budget=1 if kind == 'streamed' else None)
seconds = time.perf_counter() - start
done.set()
sampler.join()
peak[0] = max(peak[0], rss())
print(json.dumps(dict(seconds=seconds, extra_rss=peak[0] - base, peak_rss=peak[0],
                      note=result.verification.summary() if kind != 'copy' else '')))
'''


def _flax_shapes(size: str, flavour: str) -> Dict[str, tuple]:
    width, depth, mlp, heads, patch, img = SIZES[size]
    grid, hd = img // patch, width // heads
    names = {'bigvision': ('LayerNorm_0', 'MultiHeadDotProductAttention_0', 'LayerNorm_1', 'MlpBlock_0'),
             'vitjax': ('LayerNorm_0', 'MultiHeadDotProductAttention_1', 'LayerNorm_2', 'MlpBlock_3')}[flavour]
    shapes: Dict[str, tuple] = {'embedding/kernel': (patch, patch, 3, width), 'embedding/bias': (width,)}
    if flavour == 'bigvision':
        shapes['pos_embedding'] = (1, grid * grid, width)
    else:
        shapes['cls'] = (1, 1, width)
        shapes['Transformer/posembed_input/pos_embedding'] = (1, 1 + grid * grid, width)
    shapes.update({'Transformer/encoder_norm/scale': (width,), 'Transformer/encoder_norm/bias': (width,),
                   'head/kernel': (width, 1000), 'head/bias': (1000,)})
    ln1, attn, ln2, mlp_name = names
    for i in range(depth):
        b = f'Transformer/encoderblock_{i}/'
        for ln in (ln1, ln2):
            shapes[f'{b}{ln}/scale'] = (width,)
            shapes[f'{b}{ln}/bias'] = (width,)
        for part in ('query', 'key', 'value'):
            shapes[f'{b}{attn}/{part}/kernel'] = (width, heads, hd)
            shapes[f'{b}{attn}/{part}/bias'] = (heads, hd)
        shapes[f'{b}{attn}/out/kernel'] = (heads, hd, width)
        shapes[f'{b}{attn}/out/bias'] = (width,)
        shapes[f'{b}{mlp_name}/Dense_0/kernel'] = (width, mlp)
        shapes[f'{b}{mlp_name}/Dense_0/bias'] = (mlp,)
        shapes[f'{b}{mlp_name}/Dense_1/kernel'] = (mlp, width)
        shapes[f'{b}{mlp_name}/Dense_1/bias'] = (width,)
    return shapes


def write_npz(path: Path, size: str, flavour: str, seed: int = 0) -> None:
    """Random flax arrays streamed into an uncompressed .npz, one array in memory at a time."""
    rng = np.random.default_rng(seed)
    with zipfile.ZipFile(path, 'w', allowZip64=True) as zf:
        for name, shape in _flax_shapes(size, flavour).items():
            fan_in = int(np.prod(shape[:-1])) if len(shape) > 1 else 0
            array = rng.standard_normal(shape, dtype=np.float32)
            array *= (1 / np.sqrt(fan_in)) if fan_in else 0.02
            if name.endswith('/scale'):
                array += 1
            with zf.open(f'{name}.npy', 'w', force_zip64=True) as fh:
                np.lib.format.write_array(fh, array, allow_pickle=False)


def write_timm(folder: Path, size: str) -> Dict[str, Path]:
    """A timm ``vit_*`` state dict of this size as .safetensors and as .pth (zip format)."""
    import timm
    import torch
    from safetensors.torch import save_file

    width, depth, mlp, heads, patch, img = SIZES[size]
    model = timm.create_model('vit_base_patch16_224', img_size=img, patch_size=patch, embed_dim=width, depth=depth,
                              num_heads=heads, mlp_ratio=mlp / width, num_classes=1000)
    state = model.state_dict()
    paths = {'timm .safetensors': folder / 'timm.safetensors', 'timm .pth': folder / 'timm.pth'}
    save_file(state, str(paths['timm .safetensors']))
    torch.save(state, paths['timm .pth'])
    return paths


def run_child(kind: str, src: Path, out: Path, env: Dict[str, str]) -> Dict[str, float]:
    proc = subprocess.run([sys.executable, '-c', _CHILD, kind, str(src), str(out)], env=env, capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise RuntimeError(f'{kind} {src.name} failed:\n{proc.stderr[-3000:]}')
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_cli(src: Path, out: Path, env: Dict[str, str], extra: List[str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, '-m', 'porting', 'convert', str(src), str(out), *extra], env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f'CLI {src.name} failed:\n{proc.stderr[-3000:]}')
    return time.perf_counter() - start


def _fmt(values: List[float], digits: int = 2) -> str:
    return f'{statistics.median(values):.{digits}f} ({min(values):.{digits}f}–{max(values):.{digits}f})'


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--size', choices=sorted(SIZES), default='large')
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--sources', nargs='+', default=['big_vision .npz', 'vit_jax .npz', 'timm .safetensors',
                                                         'timm .pth'])
    parser.add_argument('--workdir', help='where to write the checkpoints and outputs (default: a temp dir)')
    parser.add_argument('--json', help='also write the raw figures here')
    args = parser.parse_args()

    work = Path(args.workdir or tempfile.mkdtemp(prefix='bench-convert-'))
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get('PYTHONPATH', ''))
    env.setdefault('OMP_NUM_THREADS', '1')
    try:
        sources: Dict[str, Path] = {}
        if 'big_vision .npz' in args.sources:
            sources['big_vision .npz'] = work / 'bigvision.npz'
            write_npz(sources['big_vision .npz'], args.size, 'bigvision')
        if 'vit_jax .npz' in args.sources:
            sources['vit_jax .npz'] = work / 'vitjax.npz'
            write_npz(sources['vit_jax .npz'], args.size, 'vitjax')
        if any(s.startswith('timm') for s in args.sources):
            sources.update({k: v for k, v in write_timm(work, args.size).items() if k in args.sources})
        figures: Dict[str, Dict[str, List[float]]] = {}
        for name, src in sources.items():
            size = src.stat().st_size
            rows = figures.setdefault(name, {'bytes': [size]})
            for round_ in range(args.rounds):
                copy = run_child('copy', src, work / 'copy.bin', env)
                (work / 'copy.bin').unlink()
                for kind in ('convert', 'verified', 'streamed'):
                    r = run_child(kind, src, work / f'out_{kind}', env)
                    shutil.rmtree(work / f'out_{kind}')
                    rows.setdefault(f'{kind} x copy', []).append(r['seconds'] / copy['seconds'])
                    rows.setdefault(f'{kind} s', []).append(r['seconds'])
                    rows.setdefault(f'{kind} extra RSS x ckpt', []).append(r['extra_rss'] / size)
                    rows.setdefault(f'{kind} peak RSS GB', []).append(r['peak_rss'] / 1e9)
                    if kind != 'convert':
                        rows[f'{kind} note'] = [r['note']]
                cli = run_cli(src, work / 'out_cli', env, ['--no-verify'])
                shutil.rmtree(work / 'out_cli')
                rows.setdefault('copy s', []).append(copy['seconds'])
                rows.setdefault('CLI x copy', []).append(cli / copy['seconds'])
                rows.setdefault('CLI s', []).append(cli)
                print(f'{name} round {round_ + 1}: copy {copy["seconds"]:.2f}s, convert '
                      f'{rows["convert s"][-1]:.2f}s, verified {rows["verified s"][-1]:.2f}s, CLI {cli:.2f}s',
                      flush=True)
        print(f'\nViT size {args.size}, {args.rounds} rounds, median (range); ratios are to shutil.copyfile of '
              'the same file in the same round\n')
        print('| source | size | copy | convert() | × copy | extra RSS × ckpt | CLI × copy | verified × copy '
              '| verified extra RSS × ckpt | verified peak RSS | streamed × copy | streamed peak RSS |')
        print('|---|---|---|---|---|---|---|---|---|---|---|---|')
        for name, rows in figures.items():
            print(f'| {name} | {rows["bytes"][0] / 1e9:.3f} GB | {_fmt(rows["copy s"])} s | '
                  f'{_fmt(rows["convert s"])} s | {_fmt(rows["convert x copy"])} | '
                  f'{_fmt(rows["convert extra RSS x ckpt"])} | {_fmt(rows["CLI x copy"])} | '
                  f'{_fmt(rows["verified x copy"])} | {_fmt(rows["verified extra RSS x ckpt"])} | '
                  f'{_fmt(rows["verified peak RSS GB"])} GB | {_fmt(rows["streamed x copy"])} | '
                  f'{_fmt(rows["streamed peak RSS GB"])} GB |')
        for name, rows in figures.items():
            print(f'{name}: {rows["verified note"][0]}\n  streamed: {rows["streamed note"][0]}')
        if args.json:
            Path(args.json).write_text(json.dumps(dict(size=args.size, figures=figures), indent=2))
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == '__main__':
    main()
