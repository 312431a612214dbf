"""Conversion cost against a plain file copy: time as a ratio to ``shutil.copyfile``, and extra memory.

Builds random-weight ViT checkpoints of one size, each as its framework writes it and in the dtype asked
(big_vision and vit_jax/AugReg ``.npz``, timm ``.safetensors``, ``.pth`` and ``save_for_hf`` folder, a
transformers ``save_pretrained`` folder, DINOv2- and DINOv3-style hub ``.pth`` files; streamed to disk one tensor
at a time, so the 13 GB 7B shape needs no 13 GB of memory to write), then, for each, in fresh child processes
so every run starts alike:

  copy        ``shutil.copyfile`` of the same file, then fsync (the floor for any conversion)
  convert     ``porting.pipeline.convert(..., no_verify=True)``, timed inside the process (no start-up)
  verified    the same with numerical verification against the source's reference implementation
  streamed    verified with ``memory_budget=1`` (forcing the streamed mode: block by block, from mapped weights)
  cli         ``python -m porting convert SRC OUT --no-verify``, wall time including interpreter start-up

For a folder, the copy is of its weight file.

Resident memory is sampled every 5 ms inside the child (``/proc/self/statm``); "extra" is the peak
during the work minus the resident memory after the imports, and "peak" the whole process's. The machine is shared and noisy:
each figure is a ratio to the copy measured in the same round, and rounds are repeated (median and
range are reported).

Run: ``OMP_NUM_THREADS=1 python benchmarks/bench_convert.py --size large --rounds 3``; the large towers one
source at a time, e.g. ``--size 7b --dtype bfloat16 --sources 'dinov3 .pth' --kinds convert verified``.
"""
import argparse
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Tuple

import numpy as np

REPO = Path(__file__).resolve().parents[1]

# width, depth, mlp, heads, patch, img, SwiGLU (mlp is then the gated width, fc1 twice it)
SIZES = {
    'tiny': (192, 12, 768, 3, 16, 224, False),
    'base': (768, 12, 3072, 12, 16, 224, False),
    'large': (1024, 24, 4096, 16, 16, 224, False),
    # the large towers of issue 27 (minutes each; never in CI or the repository)
    'g14': (1408, 40, 6144, 16, 14, 224, False),  # ViT-g/14 (big_vision's and timm's vit_giant_patch14), 1.0B
    'so400m': (1152, 27, 4304, 16, 14, 224, False),  # SigLIP So400m/14's shape, 0.4B
    '7b': (4096, 40, 8192, 32, 16, 224, True),  # DINOv3 7B's shape (dinov3/hub/backbones.py::dinov3_vit7b16), 6.7B
}
SOURCES = ('big_vision .npz', 'vit_jax .npz', 'timm .safetensors', 'timm .pth', 'timm folder',
           'transformers folder', 'dinov2 .pth', 'dinov3 .pth')
KINDS = ('convert', 'verified', 'streamed', 'cli')
DTYPES = ('float32', 'bfloat16', 'float16')
# Runs in a child: imports, baseline RSS, the timed work, then one JSON line.
_CHILD = """
import json, os, shutil, sys, threading, time
kind, src, out, options = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
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
    result = convert(src, out, no_verify=(kind == 'convert'), memory_budget=1 if kind == 'streamed' else None,
                     **options)
seconds = time.perf_counter() - start
done.set()
sampler.join()
peak[0] = max(peak[0], rss())
v = result.verification if kind != 'copy' else None
print(json.dumps(dict(seconds=seconds, extra_rss=peak[0] - base, peak_rss=peak[0], note=v.summary() if v else '',
                      max_abs=max(v.max_abs_logits or 0, v.max_abs_features or 0) if v and kind != 'convert' else None)))
"""


def _init(rng: np.random.Generator, name: str, shape: Tuple[int, ...], fan_in: int) -> np.ndarray:
    """Random float32 values scaled so activations stay O(1) and a wrong layout would show."""
    array = rng.standard_normal(shape, dtype=np.float32)
    if len(shape) > 1:
        array *= 1 / np.sqrt(max(fan_in, 1))
    elif name.endswith(('gamma',)):
        array = np.full(shape, 0.1, np.float32)
    else:
        array *= 0.02
        if name.endswith(('/scale', 'norm1.weight', 'norm2.weight', 'norm.weight', 'layernorm_before.weight',
                          'layernorm_after.weight', 'layernorm.weight')):
            array += 1
    return array


def _cast(array: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values in the stored dtype (bfloat16 through ml_dtypes, as jax writes it)."""
    if dtype == 'float32':
        return array
    if dtype == 'float16':
        return array.astype(np.float16)
    import ml_dtypes
    return array.astype(ml_dtypes.bfloat16)


def _flax_shapes(size: str, flavour: str) -> Dict[str, tuple]:
    width, depth, mlp, heads, patch, img, _ = SIZES[size]
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


def write_npz(path: Path, size: str, flavour: str, dtype: str = 'float32', seed: int = 0) -> None:
    """Random flax arrays streamed into an uncompressed .npz, one array in memory at a time (bfloat16 as jax's
    ``np.savez`` stores it: a 2-byte void member)."""
    rng = np.random.default_rng(seed)
    with zipfile.ZipFile(path, 'w', allowZip64=True) as zf:
        for name, shape in _flax_shapes(size, flavour).items():
            fan_in = int(np.prod(shape[:-1])) if len(shape) > 1 else 0
            array = _cast(_init(rng, name, shape, fan_in), dtype)
            with zf.open(f'{name}.npy', 'w', force_zip64=True) as fh:
                np.lib.format.write_array(fh, array, allow_pickle=False)


def _timm_kwargs(size: str) -> Dict[str, object]:
    width, depth, mlp, heads, patch, img, _ = SIZES[size]
    return dict(img_size=img, patch_size=patch, embed_dim=width, depth=depth, num_heads=heads, mlp_ratio=mlp / width,
                num_classes=1000)


def _meta_layout(build: Callable[[], object]) -> Dict[str, tuple]:
    import torch
    with torch.device('meta'):
        model = build()
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def timm_shapes(size: str) -> Dict[str, tuple]:
    import timm
    return _meta_layout(lambda: timm.create_model('vit_base_patch16_224', **_timm_kwargs(size)))


def hf_config(size: str):
    from transformers import ViTConfig
    width, depth, mlp, heads, patch, img, _ = SIZES[size]
    return ViTConfig(hidden_size=width, num_hidden_layers=depth, num_attention_heads=heads, intermediate_size=mlp,
                     image_size=img, patch_size=patch, num_labels=1000)


def hf_shapes(size: str) -> Dict[str, tuple]:
    """``ViTForImageClassification``'s state dict under the names ``save_pretrained`` writes."""
    width, depth, mlp, heads, patch, img, _ = SIZES[size]
    e = 'vit.embeddings.'
    shapes: Dict[str, tuple] = {e + 'cls_token': (1, 1, width), e + 'position_embeddings': (1, 1 + (img // patch) ** 2, width),
                                e + 'patch_embeddings.projection.weight': (width, 3, patch, patch),
                                e + 'patch_embeddings.projection.bias': (width,)}
    for i in range(depth):
        b = f'vit.encoder.layer.{i}.'
        for name in ('attention.attention.query', 'attention.attention.key', 'attention.attention.value',
                     'attention.output.dense'):
            shapes.update({f'{b}{name}.weight': (width, width), f'{b}{name}.bias': (width,)})
        shapes.update({b + 'intermediate.dense.weight': (mlp, width), b + 'intermediate.dense.bias': (mlp,),
                       b + 'output.dense.weight': (width, mlp), b + 'output.dense.bias': (width,)})
        for name in ('layernorm_before', 'layernorm_after'):
            shapes.update({f'{b}{name}.weight': (width,), f'{b}{name}.bias': (width,)})
    shapes.update({'vit.layernorm.weight': (width,), 'vit.layernorm.bias': (width,),
                   'classifier.weight': (1000, width), 'classifier.bias': (1000,)})
    return shapes


def dinov2_shapes(size: str) -> Dict[str, tuple]:
    """A DINOv2 hub backbone's state dict (LayerScale; SwiGLU as w12/w3 when the size says so), no head."""
    width, depth, mlp, heads, patch, img, swiglu = SIZES[size]
    tokens = 1 + (img // patch) ** 2
    shapes: Dict[str, tuple] = {'cls_token': (1, 1, width), 'pos_embed': (1, tokens, width), 'mask_token': (1, width),
                                'patch_embed.proj.weight': (width, 3, patch, patch), 'patch_embed.proj.bias': (width,)}
    for i in range(depth):
        b = f'blocks.{i}.'
        shapes.update({b + 'norm1.weight': (width,), b + 'norm1.bias': (width,),
                       b + 'attn.qkv.weight': (3 * width, width), b + 'attn.qkv.bias': (3 * width,),
                       b + 'attn.proj.weight': (width, width), b + 'attn.proj.bias': (width,), b + 'ls1.gamma': (width,),
                       b + 'norm2.weight': (width,), b + 'norm2.bias': (width,)})
        if swiglu:
            shapes.update({b + 'mlp.w12.weight': (2 * mlp, width), b + 'mlp.w12.bias': (2 * mlp,),
                           b + 'mlp.w3.weight': (width, mlp), b + 'mlp.w3.bias': (width,)})
        else:
            shapes.update({b + 'mlp.fc1.weight': (mlp, width), b + 'mlp.fc1.bias': (mlp,),
                           b + 'mlp.fc2.weight': (width, mlp), b + 'mlp.fc2.bias': (width,)})
        shapes[b + 'ls2.gamma'] = (width,)
    shapes.update({'norm.weight': (width,), 'norm.bias': (width,)})
    return shapes


def dinov3_shapes(size: str) -> Dict[str, tuple]:
    """A DINOv3 hub backbone's state dict, keys in the order ``DinoVisionTransformer.state_dict()`` gives them:
    [CLS], 4 storage tokens, the mask token, the patch conv, the RoPE periods (head width / 4), flat blocks with
    LayerScale and an MLP of fc1/fc2 or SwiGLU w1/w2/w3, the final norm and the training-only ``local_cls_norm``.
    The 7B has no qkv bias (``qkv_bias=False``); the smaller hub models have one, with its ``bias_mask``."""
    width, depth, mlp, heads, patch, img, swiglu = SIZES[size]
    qkv_bias = size != '7b'
    shapes: Dict[str, tuple] = {'cls_token': (1, 1, width), 'storage_tokens': (1, 4, width), 'mask_token': (1, width),
                                'patch_embed.proj.weight': (width, 3, patch, patch), 'patch_embed.proj.bias': (width,),
                                'rope_embed.periods': (width // heads // 4,)}
    for i in range(depth):
        b = f'blocks.{i}.'
        shapes.update({b + 'norm1.weight': (width,), b + 'norm1.bias': (width,),
                       b + 'attn.qkv.weight': (3 * width, width)})
        if qkv_bias:
            shapes.update({b + 'attn.qkv.bias': (3 * width,), b + 'attn.qkv.bias_mask': (3 * width,)})
        shapes.update({b + 'attn.proj.weight': (width, width), b + 'attn.proj.bias': (width,),
                       b + 'ls1.gamma': (width,), b + 'norm2.weight': (width,), b + 'norm2.bias': (width,)})
        if swiglu:
            shapes.update({b + 'mlp.w1.weight': (mlp, width), b + 'mlp.w1.bias': (mlp,),
                           b + 'mlp.w2.weight': (mlp, width), b + 'mlp.w2.bias': (mlp,),
                           b + 'mlp.w3.weight': (width, mlp), b + 'mlp.w3.bias': (width,)})
        else:
            shapes.update({b + 'mlp.fc1.weight': (mlp, width), b + 'mlp.fc1.bias': (mlp,),
                           b + 'mlp.fc2.weight': (width, mlp), b + 'mlp.fc2.bias': (width,)})
        shapes[b + 'ls2.gamma'] = (width,)
    shapes.update({'norm.weight': (width,), 'norm.bias': (width,),
                   'local_cls_norm.weight': (width,), 'local_cls_norm.bias': (width,)})
    return shapes


def _dinov3_fixed(name: str, shape: Tuple[int, ...]) -> object:
    """The values DINOv3 computes rather than learns: its RoPE periods (base 100, in float32 as the 7B file stores
    them) and the qkv ``bias_mask`` (the k third zeroed); None for a learned tensor."""
    if name == 'rope_embed.periods':
        quarter = shape[0]
        return (100.0 ** (2 * np.arange(quarter, dtype=np.float32) / (2 * quarter))).astype(np.float32)
    if name.endswith('bias_mask'):
        mask = np.ones(shape, np.float32)
        mask[shape[0] // 3:2 * shape[0] // 3] = 0
        return mask
    return None


def _torch_arrays(shapes: Dict[str, tuple], dtype: str, seed: int = 0) -> Iterator[Tuple[str, np.ndarray]]:
    """(name, array in ``dtype``) for a PyTorch-layout state dict, one at a time (fan-in: all but the first axis)."""
    rng = np.random.default_rng(seed)
    for name, shape in shapes.items():
        yield name, _cast(_init(rng, name, shape, int(np.prod(shape[1:])) if len(shape) > 1 else 0), dtype)


def write_safetensors(path: Path, shapes: Dict[str, tuple], dtype: str) -> None:
    """A .safetensors file as safetensors writes it (header, then each tensor in order), streamed one at a time."""
    item = {'float32': 4, 'bfloat16': 2, 'float16': 2}[dtype]
    code = {'float32': 'F32', 'bfloat16': 'BF16', 'float16': 'F16'}[dtype]
    header: Dict[str, object] = {'__metadata__': {'format': 'pt'}}
    cursor = 0
    for name, shape in shapes.items():
        size = int(np.prod(shape)) * item
        header[name] = {'dtype': code, 'shape': list(shape), 'data_offsets': [cursor, cursor + size]}
        cursor += size
    blob = json.dumps(header, separators=(',', ':')).encode()
    blob += b' ' * (-len(blob) % 8)
    with open(path, 'wb') as fh:
        fh.write(struct.pack('<Q', len(blob)) + blob)
        for _, array in _torch_arrays(shapes, dtype):
            fh.write(np.ascontiguousarray(array).view(np.uint8).data)


def write_pth(path: Path, shapes: Dict[str, tuple], dtype: str, work: Path) -> None:
    """A ``torch.save``d state dict (zip format), its tensors first placed on a shared mapping of a temporary file
    so a 13 GB checkpoint is written without 13 GB of heap."""
    import torch
    item = {'float32': 4, 'bfloat16': 2, 'float16': 2}[dtype]
    total = sum(int(np.prod(s)) * item for s in shapes.values())
    backing = work / 'pth-backing.bin'
    with open(backing, 'wb') as fh:
        fh.truncate(max(total, 1))
    flat = torch.from_file(str(backing), shared=True, size=max(total, 1), dtype=torch.uint8)
    state, offset = {}, 0
    for name, array in _torch_arrays(shapes, dtype):
        nbytes = array.size * item
        view = flat[offset:offset + nbytes].view(getattr(torch, dtype)).view(array.shape)
        view.copy_(_as_torch(array, dtype))
        state[name], offset = view, offset + nbytes
    torch.save(state, path)
    del state, flat
    backing.unlink()


def _as_torch(array: np.ndarray, dtype: str):
    import torch
    if dtype == 'bfloat16':
        return torch.from_numpy(np.ascontiguousarray(array).view(np.uint16)).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(array))


def write_dinov3_pth(path: Path, size: str, dtype: str, work: Path, seed: int = 0) -> None:
    """A DINOv3 hub ``.pth`` as its repository's bf16 files are: ``torch.save`` of the backbone's state dict, one
    storage per tensor, every learned tensor in ``dtype`` and the RoPE periods in float32. Each tensor is written to
    a temporary file mapping as it is made (one tensor in memory at a time), then ``torch.save`` streams them."""
    import torch
    shapes = dinov3_shapes(size)
    item = {'float32': 4, 'bfloat16': 2, 'float16': 2}[dtype]
    kept = {'rope_embed.periods'}  # float32 in the published files whatever the weights' dtype
    sizes = {n: int(np.prod(s)) * (4 if n in kept else item) for n, s in shapes.items()}
    offsets = dict(zip(sizes, np.cumsum([0] + list(sizes.values()))[:-1].tolist()))
    backing = work / 'pth-backing.bin'
    with open(backing, 'wb') as fh:
        fh.truncate(max(sum(sizes.values()), 1))
    rng = np.random.default_rng(seed)
    state = {}
    for name, shape in shapes.items():
        fixed = _dinov3_fixed(name, shape)
        array = fixed if fixed is not None else _init(rng, name, shape, int(np.prod(shape[1:])) if len(shape) > 1
                                                      else 0)
        stored = 'float32' if name in kept else dtype
        raw = np.memmap(backing, dtype=np.uint8, mode='r+', offset=offsets[name], shape=(sizes[name],))
        raw[:] = np.ascontiguousarray(_cast(array, stored)).reshape(-1).view(np.uint8)
        tensor = torch.from_numpy(raw)  # its own storage, as every tensor of a saved state dict has
        state[name] = tensor.view(getattr(torch, stored)).view(shape)
    torch.save(state, path)
    del state
    backing.unlink()


def write_source(kind: str, work: Path, size: str, dtype: str) -> Path:
    """One source checkpoint of ``kind``, as its framework writes it, in ``dtype``."""
    if kind in ('big_vision .npz', 'vit_jax .npz'):
        path = work / f'{kind.split()[0]}.npz'
        write_npz(path, size, 'bigvision' if kind.startswith('big') else 'vitjax', dtype)
    elif kind == 'timm .safetensors':
        path = work / 'timm.safetensors'
        write_safetensors(path, timm_shapes(size), dtype)
    elif kind == 'timm .pth':
        path = work / 'timm.pth'
        write_pth(path, timm_shapes(size), dtype, work)
    elif kind == 'timm folder':  # what timm's save_for_hf writes: config.json (architecture, model_args) + weights
        path = work / 'timm_folder'
        path.mkdir()
        write_safetensors(path / 'model.safetensors', timm_shapes(size), dtype)
        kwargs = _timm_kwargs(size)
        config = {'architecture': 'vit_base_patch16_224', 'num_classes': kwargs.pop('num_classes'),
                  'num_features': kwargs['embed_dim'], 'global_pool': 'token', 'model_args': kwargs,
                  'pretrained_cfg': {'input_size': [3, kwargs['img_size'], kwargs['img_size']], 'mean': [0.5] * 3,
                                     'std': [0.5] * 3, 'interpolation': 'bicubic', 'crop_pct': 0.9}}
        (path / 'config.json').write_text(json.dumps(config, indent=2))
    elif kind == 'transformers folder':  # ViTForImageClassification.save_pretrained's files
        path = work / 'hf_folder'
        path.mkdir()
        write_safetensors(path / 'model.safetensors', hf_shapes(size), dtype)
        config = hf_config(size)
        config.architectures = ['ViTForImageClassification']
        config.dtype = dtype
        config.save_pretrained(str(path))
    elif kind == 'dinov2 .pth':
        path = work / 'dinov2.pth'
        write_pth(path, dinov2_shapes(size), dtype, work)
    elif kind == 'dinov3 .pth':
        path = work / 'dinov3.pth'
        write_dinov3_pth(path, size, dtype, work)
    else:
        raise ValueError(f'unknown source {kind!r}')
    return path


def _hints(kind: str, size: str) -> Dict[str, object]:
    """What a bare state dict cannot say: the head count."""
    return {'num_heads': SIZES[size][3]} if kind in ('timm .safetensors', 'timm .pth', 'dinov2 .pth',
                                                     'dinov3 .pth') else {}


def _nbytes(path: Path) -> int:
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob('*') if p.is_file())


def _rm(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def run_child(kind: str, src: Path, out: Path, env: Dict[str, str], options: Dict[str, object]) -> Dict[str, float]:
    if kind == 'copy' and src.is_dir():  # a folder's floor: its weight file
        src = max((p for p in src.iterdir() if p.is_file()), key=lambda p: p.stat().st_size)
    proc = subprocess.run([sys.executable, '-c', _CHILD, kind, str(src), str(out), json.dumps(options)], env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f'{kind} {src.name} failed:\n{proc.stderr[-3000:]}')
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_cli(src: Path, out: Path, env: Dict[str, str], options: Dict[str, object]) -> float:
    extra = [a for k, v in options.items() for a in (f'--{k.replace("_", "-")}', str(v))]
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, '-m', 'porting', 'convert', str(src), str(out), '--no-verify', *extra],
                          env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f'CLI {src.name} failed:\n{proc.stderr[-3000:]}')
    return time.perf_counter() - start


def _fmt(values: List[float], digits: int = 2) -> str:
    if len(values) == 1:
        return f'{values[0]:.{digits}f}'
    return f'{statistics.median(values):.{digits}f} ({min(values):.{digits}f}–{max(values):.{digits}f})'


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--size', choices=sorted(SIZES), default='large')
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--sources', nargs='+', choices=SOURCES, default=list(SOURCES[:4]))
    parser.add_argument('--kinds', nargs='+', choices=KINDS, default=list(KINDS),
                        help='what to time against the copy (default: all)')
    parser.add_argument('--dtype', choices=DTYPES, default='float32', help='the dtype the sources are stored in')
    parser.add_argument('--workdir', help='where to write the checkpoints and outputs (default: a temp dir)')
    parser.add_argument('--json', help='also write the raw figures here')
    args = parser.parse_args()

    work = Path(args.workdir or tempfile.mkdtemp(prefix='bench-convert-'))
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get('PYTHONPATH', ''))
    env.setdefault('OMP_NUM_THREADS', '1')
    kinds = [k for k in KINDS if k in args.kinds]
    figures: Dict[str, Dict[str, List[float]]] = {}
    try:
        for name in args.sources:  # one source on disk at a time: the large sizes need the room
            src = write_source(name, work, args.size, args.dtype)
            size, options = _nbytes(src), _hints(name, args.size)
            rows = figures.setdefault(name, {'bytes': [size]})
            for round_ in range(args.rounds):
                copy = run_child('copy', src, work / 'copy.bin', env, {})
                _rm(work / 'copy.bin')
                rows.setdefault('copy s', []).append(copy['seconds'])
                line = [f'copy {copy["seconds"]:.2f}s']
                for kind in kinds:
                    if kind == 'cli':
                        seconds = run_cli(src, work / 'out_cli', env, options)
                        r = {'seconds': seconds}
                    else:
                        r = run_child(kind, src, work / f'out_{kind}', env, options)
                        rows.setdefault(f'{kind} extra RSS x ckpt', []).append(r['extra_rss'] / size)
                        rows.setdefault(f'{kind} peak RSS x ckpt', []).append(r['peak_rss'] / size)
                        rows.setdefault(f'{kind} peak RSS GB', []).append(r['peak_rss'] / 1e9)
                        if r['max_abs'] is not None:
                            rows.setdefault(f'{kind} max abs', []).append(r['max_abs'])
                            rows[f'{kind} note'] = [r['note']]
                    _rm(work / f'out_{kind}')
                    rows.setdefault(f'{kind} x copy', []).append(r['seconds'] / copy['seconds'])
                    rows.setdefault(f'{kind} s', []).append(r['seconds'])
                    line.append(f'{kind} {r["seconds"]:.2f}s' + (f' peak {r["peak_rss"] / 1e9:.2f} GB'
                                                                 if 'peak_rss' in r else ''))
                print(f'{name} round {round_ + 1}: ' + ', '.join(line), flush=True)
                if args.json:  # after every round: a long run stopped early keeps what it measured
                    Path(args.json).write_text(json.dumps(dict(size=args.size, dtype=args.dtype, figures=figures),
                                                          indent=2))
            _rm(src)
        print(f'\nViT size {args.size}, sources in {args.dtype}, {args.rounds} round(s), median (range); ratios are to '
              'an fsync\'d shutil.copyfile of the same file in the same round; peak RSS is the whole process\'s\n')
        cols = ['copy s'] + [c for k in kinds for c in (
            (f'{k} x copy',) if k == 'cli' else
            (f'{k} x copy', f'{k} peak RSS GB', f'{k} peak RSS x ckpt') + ((f'{k} max abs',) if k != 'convert' else ()))]
        print('| source | size | ' + ' | '.join(cols) + ' |')
        print('|---|---|' + '---|' * len(cols))
        for name, rows in figures.items():
            cells = [f'{max(rows[c]):.2e}' if 'max abs' in c else _fmt(rows[c]) for c in cols]
            print(f'| {name} | {rows["bytes"][0] / 1e9:.3f} GB | ' + ' | '.join(cells) + ' |')
        for name, rows in figures.items():
            for kind in ('verified', 'streamed'):
                if f'{kind} note' in rows:
                    print(f'{name} {kind}: {rows[f"{kind} note"][0]}')
        if args.json:
            Path(args.json).write_text(json.dumps(dict(size=args.size, dtype=args.dtype, figures=figures), indent=2))
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == '__main__':
    main()
