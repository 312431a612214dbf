"""Conversion cost: ``vit-port convert`` against a raw file copy and timm's load-then-save path.

Builds a random-weight checkpoint in real big_vision layout (flax names, HWIO patch kernel,
per-head attention kernels, a learned ``pos_embedding`` so timm's own npz loader can read it),
then runs each contender in its own subprocess and reads that child's wall time and peak RSS
(``os.wait4`` rusage):

  raw copy       copy the .npz bytes to a new file and fsync (the floor for any conversion)
  import only    ``python -c 'import porting.convert'`` (interpreter + torch/timm start-up)
  vit-port       ``python -m porting convert SRC OUT --no-verify`` (the streaming pipeline)
  convert() timed  the same pipeline timed inside the process, i.e. without interpreter/import start-up
  vit-port+check the same with numerical verification (reference model + ours, one after the other)
  naive timm     timm ``VisionTransformer.load_pretrained(npz)`` then ``timm.models.save_for_hf``

Run: ``OMP_NUM_THREADS=1 PYTHONPATH=. python benchmarks/bench_convert.py --size large``
"""
import argparse
import json
import os
import shutil
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
}

_NAIVE = '''
import sys, timm
from timm.models import save_for_hf
w, d, m, h, p, img, src, out = sys.argv[1:]
w, d, m, h, p, img = map(int, (w, d, m, h, p, img))
model = timm.create_model('vit_base_patch16_224', img_size=img, patch_size=p, embed_dim=w, depth=d, num_heads=h,
                          mlp_ratio=m / w, num_classes=1000, class_token=False, global_pool='avg',
                          no_embed_class=True, fc_norm=False, act_layer='gelu_tanh', weight_init='skip')
model.load_pretrained(src)
save_for_hf(model, out, safe_serialization=True)
'''

_TIMED = '''
import sys, time
import porting.convert, timm_vit_variants.checkpoints
start = time.perf_counter()
porting.convert.convert(sys.argv[1], sys.argv[2], verify=False)
print(f'{time.perf_counter() - start:.3f}')
'''

_COPY = '''
import os, shutil, sys
shutil.copyfile(sys.argv[1], sys.argv[2])
with open(sys.argv[2], 'rb') as f:
    os.fsync(f.fileno())
'''


def write_bigvision_npz(path: Path, size: str, seed: int = 0) -> int:
    """Stream random big_vision arrays into an uncompressed .npz, one array in memory at a time."""
    width, depth, mlp, heads, patch, img = SIZES[size]
    grid = img // patch
    hd = width // heads
    rng = np.random.default_rng(seed)
    shapes: Dict[str, tuple] = {
        'embedding/kernel': (patch, patch, 3, width), 'embedding/bias': (width,),
        'pos_embedding': (1, grid * grid, width),
        'Transformer/encoder_norm/scale': (width,), 'Transformer/encoder_norm/bias': (width,),
        'head/kernel': (width, 1000), 'head/bias': (1000,),
    }
    for i in range(depth):
        b = f'Transformer/encoderblock_{i}/'
        for ln in ('LayerNorm_0', 'LayerNorm_1'):
            shapes[f'{b}{ln}/scale'] = (width,)
            shapes[f'{b}{ln}/bias'] = (width,)
        for part in ('query', 'key', 'value'):
            shapes[f'{b}MultiHeadDotProductAttention_0/{part}/kernel'] = (width, heads, hd)
            shapes[f'{b}MultiHeadDotProductAttention_0/{part}/bias'] = (heads, hd)
        shapes[f'{b}MultiHeadDotProductAttention_0/out/kernel'] = (heads, hd, width)
        shapes[f'{b}MultiHeadDotProductAttention_0/out/bias'] = (width,)
        shapes[f'{b}MlpBlock_0/Dense_0/kernel'] = (width, mlp)
        shapes[f'{b}MlpBlock_0/Dense_0/bias'] = (mlp,)
        shapes[f'{b}MlpBlock_0/Dense_1/kernel'] = (mlp, width)
        shapes[f'{b}MlpBlock_0/Dense_1/bias'] = (width,)
    total = 0
    with zipfile.ZipFile(path, 'w', allowZip64=True) as zf:
        for name, shape in shapes.items():
            fan_in = int(np.prod(shape[:-1])) if len(shape) > 1 else 0
            array = rng.standard_normal(shape, dtype=np.float32)
            array *= (1 / np.sqrt(fan_in)) if fan_in else 0.02
            if name.endswith('/scale'):
                array += 1
            with zf.open(f'{name}.npy', 'w', force_zip64=True) as fh:
                np.lib.format.write_array(fh, array, allow_pickle=False)
            total += array.nbytes
            del array
    return total


def measure(argv: List[str], env: Dict[str, str]) -> Dict[str, float]:
    """Wall seconds and peak RSS (bytes) of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    out, err = proc.stdout.read().decode(), proc.stderr.read().decode()
    proc.stdout.close()
    proc.stderr.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f'{argv[:4]} failed ({proc.returncode}):\n{err[-2000:]}')
    return {'wall_s': wall, 'peak_rss_bytes': usage.ru_maxrss * 1024, 'stdout': out.strip()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--size', choices=sorted(SIZES), default='large')
    parser.add_argument('--workdir', help='where to write the checkpoint and outputs (default: a temp dir)')
    parser.add_argument('--skip-naive', action='store_true', help='skip the timm load-then-save baseline')
    parser.add_argument('--json', help='also write the figures here')
    args = parser.parse_args()

    work = Path(args.workdir or tempfile.mkdtemp(prefix='bench-convert-'))
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get('PYTHONPATH', ''))
    env.setdefault('OMP_NUM_THREADS', '1')
    py = sys.executable
    src = work / f'bigvision_{args.size}.npz'
    try:
        t0 = time.perf_counter()
        nbytes = write_bigvision_npz(src, args.size)
        file_size = src.stat().st_size
        print(f'checkpoint: {src.name}, {file_size / 1e9:.3f} GB on disk ({nbytes / 1e9:.3f} GB float32), '
              f'written in {time.perf_counter() - t0:.1f}s', flush=True)
        width, depth, mlp, heads, patch, img = SIZES[args.size]
        runs = {
            'raw copy': [py, '-c', _COPY, str(src), str(work / 'copy.npz')],
            'import only': [py, '-c', 'import porting.convert, timm_vit_variants.checkpoints'],
            'vit-port': [py, '-m', 'porting', 'convert', str(src), str(work / 'out'), '--no-verify'],
            'convert() timed': [py, '-c', _TIMED, str(src), str(work / 'out_timed')],
            'vit-port+check': [py, '-m', 'porting', 'convert', str(src), str(work / 'out_checked')],
        }
        if not args.skip_naive:
            runs['naive timm'] = [py, '-c', _NAIVE, *map(str, (width, depth, mlp, heads, patch, img)), str(src),
                                  str(work / 'naive')]
        results = {}
        for name, argv in runs.items():
            results[name] = measure(argv, env)
            r = results[name]
            print(f'  {name:15s} {r["wall_s"]:7.2f} s   peak RSS {r["peak_rss_bytes"] / 1e9:6.3f} GB', flush=True)
            if name == 'raw copy':
                (work / 'copy.npz').unlink()
        copy_s = results['raw copy']['wall_s']
        base_s = results['import only']['wall_s']
        base_rss = results['import only']['peak_rss_bytes']
        print(f'\nratios (checkpoint {file_size / 1e9:.3f} GB, raw copy {copy_s:.2f} s, '
              f'imports {base_s:.2f} s / {base_rss / 1e9:.3f} GB):')
        for name, r in results.items():
            if name in ('raw copy', 'import only', 'convert() timed'):
                continue
            print(f'  {name:15s} time {r["wall_s"] / copy_s:5.2f}x copy '
                  f'({(r["wall_s"] - base_s) / copy_s:5.2f}x without imports)   '
                  f'peak RSS {r["peak_rss_bytes"] / file_size:4.2f}x checkpoint '
                  f'({(r["peak_rss_bytes"] - base_rss) / file_size:4.2f}x above imports)')
        timed = float(results['convert() timed']['stdout'])
        print(f'  convert() alone (in-process timer, imports excluded): {timed:.2f} s = {timed / copy_s:.2f}x copy')
        if 'vit-port+check' in results:
            print(f'  verification: {results["vit-port+check"]["stdout"].splitlines()[-1]}')
        if args.json:
            Path(args.json).write_text(json.dumps(dict(size=args.size, checkpoint_bytes=file_size,
                                                       results=results), indent=2))
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == '__main__':
    main()
