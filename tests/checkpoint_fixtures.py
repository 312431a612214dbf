"""The one fixture factory: tiny source checkpoints for the tests, written the way each ecosystem writes them.

Nothing here shares code with the package's readers.

* Reference models from timm itself (``tiny_timm_vit``, ``timm_vit``), filled with seeded noise so no mapping
  error can hide; ``open_checkpoint`` opens a file as every caller in the package does (against the layout).
* big_vision / vit_jax ``.npz``: either exported from a timm model (``jax_params``, written from the published
  flax names as the inverse of timm's ``_load_weights``, whose loader is run on every fixture to prove it valid)
  or drawn directly (``bigvision_arrays``, ``vitjax_arrays``: HWIO patch kernel, per-head (D, H, hd) attention
  kernels, (in, out) Dense kernels, scaled so activations are O(1) and numerical differences would show).
* timm files and folders (``torch.save`` / safetensors / ``save_for_hf``), a transformers
  ``ViTForImageClassification.save_pretrained`` folder, a timm NaFlex folder; ``write_sources`` writes one of
  every kind the porting tests convert.
"""
from pathlib import Path
from typing import Dict, Optional

import numpy as np
import torch
from timm.models.vision_transformer import VisionTransformer

from timm_vit_variants import SimpleVisionTransformer
from timm_vit_variants.checkpoints import open_checkpoint as open_with_layout

# Block module names of the two flax codebases.
BLOCK_NAMES = {
    'bigvision': dict(ln1='LayerNorm_0', attn='MultiHeadDotProductAttention_0', ln2='LayerNorm_1', mlp='MlpBlock_0'),
    'vitjax': dict(ln1='LayerNorm_0', attn='MultiHeadDotProductAttention_1', ln2='LayerNorm_2', mlp='MlpBlock_3'),
}


def open_checkpoint(path, *args, **kwargs):
    """The readers planned against the model's layout, as every caller in the package opens them."""
    return open_with_layout(path, *args, layout=SimpleVisionTransformer.state_layout, **kwargs)


def randomize(model: torch.nn.Module, seed: int = 0, scale: float = 0.1) -> torch.nn.Module:
    """Fill every parameter with seeded noise (norm weights around 1) so no mapping error can hide."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=gen) * scale
            if 'norm' in name and name.endswith('weight'):
                noise += 1.0
            param.copy_(noise)
    return model.eval()


def tiny_timm_vit(seed: int = 0, **kwargs) -> VisionTransformer:
    """A tiny timm VisionTransformer with random weights (width 32, 2 blocks, 4 heads, MLP 64)."""
    args = dict(img_size=16, patch_size=4, embed_dim=32, depth=2, num_heads=4, mlp_ratio=2.0, num_classes=5)
    args.update(kwargs)
    return randomize(VisionTransformer(**args), seed=seed)


def np_posemb_sincos_2d(h: int, w: int, width: int, temperature: float = 10_000.) -> np.ndarray:
    """big_vision's posemb_sincos_2d in numpy float64: (1, h*w, width), [sin x | cos x | sin y | cos y]."""
    y, x = np.mgrid[:h, :w]
    quarter = width // 4
    omega = 1. / (temperature ** (np.arange(quarter) / (quarter - 1)))
    y = y.reshape(-1)[:, None] * omega[None]
    x = x.reshape(-1)[:, None] * omega[None]
    return np.concatenate([np.sin(x), np.cos(x), np.sin(y), np.cos(y)], axis=1)[None].astype(np.float32)


def to_bf16_bits(array: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 stored as a 2-byte void array, as flax checkpoints without ml_dtypes appear."""
    bits = torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32)).to(torch.bfloat16).view(torch.int16)
    return bits.numpy().view(np.uint16).view('V2')


def round_to_bf16(model: torch.nn.Module) -> torch.nn.Module:
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(param.to(torch.bfloat16).to(torch.float32))
    return model


def jax_params(
        model: VisionTransformer,
        flavour: str,
        with_pos: bool = True,
        scan: bool = False,
) -> Dict[str, np.ndarray]:
    """Flax-named parameters of a timm VisionTransformer (inverse of timm's _load_weights transposes)."""
    names = BLOCK_NAMES[flavour]
    dim = model.embed_dim
    heads = model.blocks[0].attn.num_heads
    head_dim = dim // heads

    def n(t: torch.Tensor) -> np.ndarray:
        return t.detach().numpy().astype(np.float32)

    out: Dict[str, np.ndarray] = {
        'embedding/kernel': n(model.patch_embed.proj.weight.permute(2, 3, 1, 0)),  # OIHW -> HWIO
        'embedding/bias': n(model.patch_embed.proj.bias),
        'Transformer/encoder_norm/scale': n(model.norm.weight),
        'Transformer/encoder_norm/bias': n(model.norm.bias),
    }
    if model.cls_token is not None:
        out['cls'] = n(model.cls_token)
    if with_pos:
        key = 'pos_embedding' if flavour == 'bigvision' else 'Transformer/posembed_input/pos_embedding'
        out[key] = n(model.pos_embed)
    if isinstance(model.head, torch.nn.Linear):
        out['head/kernel'] = n(model.head.weight.T)
        out['head/bias'] = n(model.head.bias)

    per_block = []
    for block in model.blocks:
        p: Dict[str, np.ndarray] = {}
        p[f"{names['ln1']}/scale"] = n(block.norm1.weight)
        p[f"{names['ln1']}/bias"] = n(block.norm1.bias)
        p[f"{names['ln2']}/scale"] = n(block.norm2.weight)
        p[f"{names['ln2']}/bias"] = n(block.norm2.bias)
        qkv_w = block.attn.qkv.weight.chunk(3, dim=0)
        qkv_b = block.attn.qkv.bias.chunk(3, dim=0)
        for which, w, b in zip(('query', 'key', 'value'), qkv_w, qkv_b):
            p[f"{names['attn']}/{which}/kernel"] = n(w.T.reshape(dim, heads, head_dim))
            p[f"{names['attn']}/{which}/bias"] = n(b.reshape(heads, head_dim))
        p[f"{names['attn']}/out/kernel"] = n(block.attn.proj.weight.reshape(dim, heads, head_dim).permute(1, 2, 0))
        p[f"{names['attn']}/out/bias"] = n(block.attn.proj.bias)
        p[f"{names['mlp']}/Dense_0/kernel"] = n(block.mlp.fc1.weight.T)
        p[f"{names['mlp']}/Dense_0/bias"] = n(block.mlp.fc1.bias)
        p[f"{names['mlp']}/Dense_1/kernel"] = n(block.mlp.fc2.weight.T)
        p[f"{names['mlp']}/Dense_1/bias"] = n(block.mlp.fc2.bias)
        per_block.append(p)
    if scan:
        for name in per_block[0]:
            out[f'Transformer/encoderblock/{name}'] = np.stack([p[name] for p in per_block])
    else:
        for i, p in enumerate(per_block):
            for name, value in p.items():
                out[f'Transformer/encoderblock_{i}/{name}'] = value
    return out


def write_npz_at(path, params: Dict[str, np.ndarray], prefix: str = '', bf16: bool = False,
                 extra: Optional[Dict[str, np.ndarray]] = None) -> str:
    """``params`` as an .npz at ``path`` (keys under ``prefix``; bf16 as 2-byte voids; ``extra`` arrays as they are)."""
    arrays = {prefix + k: (to_bf16_bits(v) if bf16 else v) for k, v in params.items()}
    arrays.update(extra or {})
    np.savez(path, **arrays)
    return str(path)


# -- the porting sources: a fixed tiny geometry ---------------------------------------------------------

WIDTH, DEPTH, HEADS, MLP, PATCH, IMG, CLASSES = 32, 2, 2, 64, 8, 32, 5
def perturb(model: torch.nn.Module, seed: int = 0, scale: float = 0.1) -> torch.nn.Module:
    """Add seeded noise to every parameter on top of its initialisation (a transformers model's own, so norms stay
    around their init): biases, tables and tokens that the init leaves at zero become non-trivial."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=gen) * scale)
    return model.eval()


LABELS = [f'class_{i}' for i in range(CLASSES)]


def _randomize(module: torch.nn.Module, seed: int = 0) -> None:
    """Fan-in scaled seeded noise (norm1 weights around 1): the fill of the porting sources below."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            fan_in = p.shape[1] if p.ndim > 1 else 1
            scale = 1.0 / max(fan_in, 1) ** 0.5 if p.ndim > 1 else 0.1
            p.copy_(torch.randn(p.shape, generator=gen) * scale + (1.0 if name.endswith('norm1.weight') else 0.0))


def timm_vit(global_pool: str = 'token', class_token: bool = True, seed: int = 0) -> torch.nn.Module:
    """A tiny timm vit (exact GELU, cls slot in the table, eps 1e-6) with random weights."""
    import timm

    model = timm.create_model(
        'vit_tiny_patch16_224', pretrained=False, img_size=IMG, patch_size=PATCH, embed_dim=WIDTH, depth=DEPTH,
        num_heads=HEADS, mlp_ratio=MLP / WIDTH, num_classes=CLASSES, global_pool=global_pool,
        class_token=class_token, fc_norm=False)
    _randomize(model, seed)
    return model.eval()


def write_timm_file(folder: Path, suffix: str = '.pth') -> Path:
    model = timm_vit()
    path = Path(folder) / f'vit_tiny{suffix}'
    if suffix == '.safetensors':
        from safetensors.torch import save_file
        save_file(model.state_dict(), str(path))
    else:
        torch.save(model.state_dict(), path)
    return path


def write_timm_folder(folder: Path) -> Path:
    from timm.models import save_for_hf

    model = timm_vit()
    path = Path(folder) / 'timm_vit_folder'
    save_for_hf(model, str(path), safe_serialization=True, model_config={'label_names': LABELS})
    return path


def write_hf_folder(folder: Path, seed: int = 0) -> Path:
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(
        hidden_size=WIDTH, num_hidden_layers=DEPTH, num_attention_heads=HEADS, intermediate_size=MLP,
        image_size=IMG, patch_size=PATCH, num_labels=CLASSES, id2label=dict(enumerate(LABELS)),
        label2id={n: i for i, n in enumerate(LABELS)})
    torch.manual_seed(seed)
    model = ViTForImageClassification(config)
    _randomize(model, seed)
    path = Path(folder) / 'hf_vit'
    model.save_pretrained(str(path))
    return path


def write_timm_naflex_folder(folder: Path, seed: int = 0) -> Path:
    """A timm naflexvit_*_siglip Hub folder (config.json + model.safetensors), as timm hosts the SigLIP 2 NaFlex towers."""
    import timm
    from timm.models import save_for_hf

    args = dict(embed_dim=64, depth=2, num_heads=4, mlp_ratio=239.5 / 64, pos_embed_grid_size=(4, 4))
    model = timm.create_model('naflexvit_so400m_patch16_siglip', **args)
    _randomize(model, seed)
    path = Path(folder) / 'timm_naflex'
    save_for_hf(model, str(path), model_args=args)
    return path


def _rand(gen: np.random.Generator, shape, fan_in: Optional[int] = None) -> np.ndarray:
    scale = 1.0 / np.sqrt(fan_in) if fan_in else 0.1
    return (gen.standard_normal(shape) * scale).astype(np.float32)


def _flax_block(gen, names: Dict[str, str], prefix: str) -> Dict[str, np.ndarray]:
    hd = WIDTH // HEADS
    out = {}
    for ln in (names['ln1'], names['ln2']):
        out[f'{prefix}{ln}/scale'] = (1 + _rand(gen, (WIDTH,))).astype(np.float32)
        out[f'{prefix}{ln}/bias'] = _rand(gen, (WIDTH,))
    attn = f'{prefix}{names["attn"]}/'
    for part in ('query', 'key', 'value'):
        out[f'{attn}{part}/kernel'] = _rand(gen, (WIDTH, HEADS, hd), WIDTH)
        out[f'{attn}{part}/bias'] = _rand(gen, (HEADS, hd))
    out[f'{attn}out/kernel'] = _rand(gen, (HEADS, hd, WIDTH), WIDTH)
    out[f'{attn}out/bias'] = _rand(gen, (WIDTH,))
    mlp = f'{prefix}{names["mlp"]}/'
    out[f'{mlp}Dense_0/kernel'] = _rand(gen, (WIDTH, MLP), WIDTH)
    out[f'{mlp}Dense_0/bias'] = _rand(gen, (MLP,))
    out[f'{mlp}Dense_1/kernel'] = _rand(gen, (MLP, WIDTH), MLP)
    out[f'{mlp}Dense_1/bias'] = _rand(gen, (WIDTH,))
    return out


def bigvision_arrays(posemb: str = 'sincos', pool: str = 'gap', rep_size: Optional[int] = None,
                     seed: int = 0, grid: Optional[tuple] = None) -> Dict[str, np.ndarray]:
    """big_vision ``vit.py`` parameters: LayerNorm_0/1, MultiHeadDotProductAttention_0, MlpBlock_0."""
    gen = np.random.default_rng(seed)
    rows, cols = grid or (IMG // PATCH, IMG // PATCH)
    arrays = {
        'embedding/kernel': _rand(gen, (PATCH, PATCH, 3, WIDTH), PATCH * PATCH * 3),
        'embedding/bias': _rand(gen, (WIDTH,)),
        'Transformer/encoder_norm/scale': (1 + _rand(gen, (WIDTH,))).astype(np.float32),
        'Transformer/encoder_norm/bias': _rand(gen, (WIDTH,)),
    }
    if posemb == 'learn':
        arrays['pos_embedding'] = _rand(gen, (1, rows * cols, WIDTH), 1)
    if pool == 'tok':
        arrays['cls'] = _rand(gen, (1, 1, WIDTH), 1)
    names = {'ln1': 'LayerNorm_0', 'ln2': 'LayerNorm_1', 'attn': 'MultiHeadDotProductAttention_0', 'mlp': 'MlpBlock_0'}
    for i in range(DEPTH):
        arrays.update(_flax_block(gen, names, f'Transformer/encoderblock_{i}/'))
    head_in = WIDTH
    if rep_size:
        arrays['pre_logits/kernel'] = _rand(gen, (WIDTH, rep_size), WIDTH)
        arrays['pre_logits/bias'] = _rand(gen, (rep_size,))
        head_in = rep_size
    arrays['head/kernel'] = _rand(gen, (head_in, CLASSES), head_in)
    arrays['head/bias'] = _rand(gen, (CLASSES,))
    return arrays


def vitjax_arrays(seed: int = 0) -> Dict[str, np.ndarray]:
    """vit_jax / AugReg parameters: cls, posembed_input with a cls slot, LayerNorm_0/2, MHDPA_1, MlpBlock_3."""
    gen = np.random.default_rng(seed)
    grid = IMG // PATCH
    arrays = {
        'embedding/kernel': _rand(gen, (PATCH, PATCH, 3, WIDTH), PATCH * PATCH * 3),
        'embedding/bias': _rand(gen, (WIDTH,)),
        'cls': _rand(gen, (1, 1, WIDTH), 1),
        'Transformer/posembed_input/pos_embedding': _rand(gen, (1, 1 + grid * grid, WIDTH), 1),
        'Transformer/encoder_norm/scale': (1 + _rand(gen, (WIDTH,))).astype(np.float32),
        'Transformer/encoder_norm/bias': _rand(gen, (WIDTH,)),
        'head/kernel': _rand(gen, (WIDTH, CLASSES), WIDTH),
        'head/bias': _rand(gen, (CLASSES,)),
    }
    names = {'ln1': 'LayerNorm_0', 'ln2': 'LayerNorm_2', 'attn': 'MultiHeadDotProductAttention_1', 'mlp': 'MlpBlock_3'}
    for i in range(DEPTH):
        arrays.update(_flax_block(gen, names, f'Transformer/encoderblock_{i}/'))
    return arrays


def write_npz(folder: Path, name: str, arrays: Dict[str, np.ndarray]) -> Path:
    """``arrays`` as ``FOLDER/NAME`` (an .npz); ``write_npz_at`` writes a flax params dict at a path."""
    path = Path(folder) / name
    np.savez(path, **arrays)
    return path


def write_sources(folder: Path) -> Dict[str, Path]:
    """One tiny checkpoint of every source kind the porting tests convert."""
    return {
        'timm_pth': write_timm_file(folder, '.pth'),
        'timm_safetensors': write_timm_file(folder, '.safetensors'),
        'timm_folder': write_timm_folder(folder),
        'hf': write_hf_folder(folder),
        'bigvision_sincos_gap': write_npz(folder, 'bv_sincos.npz', bigvision_arrays('sincos', 'gap')),
        'bigvision_learn_tok': write_npz(folder, 'bv_learn.npz', bigvision_arrays('learn', 'tok')),
        'bigvision_rep_size': write_npz(folder, 'bv_rep.npz', bigvision_arrays('sincos', 'gap', rep_size=24)),
        'vitjax': write_npz(folder, 'vitjax.npz', vitjax_arrays()),
    }
