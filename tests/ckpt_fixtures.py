"""Independent fixture writers for the checkpoint-reader tests.

The .npz exporter is written from the published flax names and is the inverse of timm's
``_load_weights`` (timm's loader is then run on every fixture to prove it is valid); it
shares no code with the package's readers. Reference models come from timm itself.
"""
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


def write_npz(path, params: Dict[str, np.ndarray], prefix: str = '', bf16: bool = False,
              extra: Optional[Dict[str, np.ndarray]] = None) -> str:
    arrays = {prefix + k: (to_bf16_bits(v) if bf16 else v) for k, v in params.items()}
    arrays.update(extra or {})
    np.savez(path, **arrays)
    return str(path)
