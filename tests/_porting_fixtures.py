"""Tiny source checkpoints for the porting tests, written the way each ecosystem writes them.

* timm: a timm ``VisionTransformer`` state dict (``torch.save`` / safetensors) or ``save_for_hf`` folder;
* transformers: ``ViTForImageClassification.save_pretrained``;
* big_vision / vit_jax: ``.npz`` archives with flax names and layouts (HWIO patch kernel, per-head
  (D, H, hd) attention kernels, (in, out) Dense kernels), filled with random values scaled so
  activations are O(1) and numerical differences would show.
"""
from pathlib import Path
from typing import Dict, Optional

import numpy as np
import torch

WIDTH, DEPTH, HEADS, MLP, PATCH, IMG, CLASSES = 32, 2, 2, 64, 8, 32, 5
LABELS = [f'class_{i}' for i in range(CLASSES)]


def _randomize(module: torch.nn.Module, seed: int = 0) -> None:
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
