"""The DINOv2 reference: the hub ``.pth`` through timm's own DINOv2 loading (``checkpoint_filter_fn``) into
timm's ``VisionTransformer``, with the position table of each grid computed as DINOv2's
``interpolate_pos_encoding`` computes it.

timm's own run-time resize matches DINOv2 only for the register models (antialiased, no offset); for the
others the hub samples at the scale (n + 0.1) / N without antialias, so the table for a grid other than the
stored one is computed here, from that expression, and handed to timm.
"""
from functools import partial
from typing import Dict, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from timm_vit_variants.checkpoints.pickle_store import read_weights
from timm_vit_variants.config import SimpleViTConfig
from timm_vit_variants.errors import ViTVariantsError
from timm_vit_variants.memory import release_after_use
from timm_vit_variants.parts import Learned

from .hf_ref import hf_config, hf_model_type, load, transformers_at
from .result import Check, NoReference, Outputs
from .streamed import as_float32, trace_blocks

__all__ = ['dinov2_outputs', 'dinov2_table', 'is_hf_dinov2', 'hf_dinov2_outputs']

_OFFSET = 0.1  # the hub's interpolate_offset for the models without registers


def dinov2_table(table: torch.Tensor, rows: int, cols: int, registers: bool) -> torch.Tensor:
    """DINOv2's ``interpolate_pos_encoding`` of a (1, 1 + M*M, D) table for a rows x cols grid, in float32: the
    stored table at its own grid, else bicubic at scale (n + 0.1) / M without antialias (no registers) or at
    size (rows, cols) with antialias (registers); the [CLS] row is kept."""
    count = table.shape[1] - 1
    side = int(count ** 0.5)
    if side * side != count:
        raise NoReference(f'DINOv2 resizes only a square table; this one has {count} rows')
    if rows * cols == count and rows == cols:
        return table
    patches = table[:, 1:].float().reshape(1, side, side, -1).permute(0, 3, 1, 2)
    if registers:
        patches = F.interpolate(patches, size=(rows, cols), mode='bicubic', antialias=True)
    else:
        patches = F.interpolate(patches, scale_factor=(float(rows + _OFFSET) / side, float(cols + _OFFSET) / side),
                                mode='bicubic', antialias=False)
    if tuple(patches.shape[-2:]) != (rows, cols):
        raise NoReference(f"DINOv2's resize gives a {tuple(patches.shape[-2:])} grid, not {(rows, cols)}")
    patches = patches.permute(0, 2, 3, 1).reshape(1, rows * cols, -1)
    return torch.cat([table[:, :1].float(), patches], dim=1).to(table.dtype)


def _timm_dinov2(config: SimpleViTConfig, rows: int, cols: int) -> nn.Module:
    """timm's VisionTransformer as its ``vit_*_dinov2`` entries build it, at a rows x cols grid, on the meta device."""
    from timm.layers import Mlp, SwiGLUPacked
    from timm.models.vision_transformer import VisionTransformer

    dim, mlp = config.embed_dim, config.block.mlp_dim
    swiglu = config.block.mlp == 'swiglu_packed'
    hidden = 2 * mlp if swiglu else mlp
    registers, patch = config.tokens.registers, config.patch_size
    with torch.device('meta'):
        model = VisionTransformer(
            img_size=(rows * patch[0], cols * patch[1]), patch_size=patch, in_chans=config.in_chans,
            num_classes=0, global_pool='token', embed_dim=dim, depth=config.depth,
            num_heads=config.num_heads, mlp_ratio=(hidden + 0.5) / dim, qkv_bias=config.block.qkv_bias,
            init_values=config.block.init_values or 1.0, reg_tokens=registers, no_embed_class=bool(registers),
            mlp_layer=SwiGLUPacked if swiglu else Mlp,
            act_layer=nn.SiLU if swiglu else nn.GELU,
            norm_layer=partial(nn.LayerNorm, eps=config.block.norm_eps))
    if model.blocks[0].mlp.fc1.out_features != hidden:
        raise ViTVariantsError(f'timm cannot express an MLP width of {mlp} for width {dim}')
    return model


def dinov2_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """The hub file run by timm at the source geometry, or at the target one with DINOv2's own table resize (a
    DINOv2 model takes no NaFlex batch: ``mixed`` is not run)."""
    from timm.models.vision_transformer import checkpoint_filter_fn

    source, runs_at = check.source, check.runs_at
    check.require_own_resize('DINOv2', getattr(source.position(Learned), 'resample', None))
    registers = bool(source.tokens.registers)
    rows, cols = runs_at.grid_size
    state = dict(read_weights(check.path, check.weights_key))
    state['pos_embed'] = dinov2_table(state['pos_embed'], rows, cols, registers)
    model = _timm_dinov2(source, rows, cols)
    state = checkpoint_filter_fn(state, model)  # timm's DINOv2 key map: w12/w3, registers, mask_token dropped
    model.load_state_dict(state, strict=True, assign=True)
    model = as_float32(model.eval())  # half-precision weights run upcast, as ours do
    release_after_use(model.blocks)  # the mapped file's pages go back block by block
    trace_blocks(model)  # streamed: each block's output compared as ours runs
    x = x[..., :rows * runs_at.patch_size[0], :cols * runs_at.patch_size[1]]
    with torch.no_grad():
        feats = model.forward_features(x)
        pooled = model.forward_head(feats)
    resize = ('bicubic with antialias' if registers else 'bicubic at scale (n + 0.1) / N, no antialias')
    name = (f"timm VisionTransformer + timm's DINOv2 checkpoint_filter_fn, the table resized as DINOv2's "
            f'interpolate_pos_encoding ({resize}, transcribed in the reference)')
    return Outputs(feats, pooled, name)


# Each transformers DINOv2 model's own table resize, as our rule: without antialias ('hf'), with it ('timm').
_HF_RULES = {'dinov2': 'hf', 'dinov2_with_registers': 'timm'}


def is_hf_dinov2(check: Check) -> bool:
    """Whether the source is a transformers DINOv2 folder (with registers or without)."""
    return hf_model_type(check) in _HF_RULES


def hf_dinov2_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """A DINOv2 folder's class: its model resizes the table itself at every input size; the pooler is the normed
    [CLS]; a classifier class gives its logits (the probe on [CLS] and the patch mean) and its model's tokens."""
    folder, cfg = hf_config(check)
    transformers = transformers_at(check, _HF_RULES[cfg['model_type']])
    model, name = load(transformers, folder, cfg, 'Dinov2WithRegistersModel' if
                       cfg['model_type'] == 'dinov2_with_registers' else 'Dinov2Model')
    with torch.no_grad():
        if type(model).__name__.endswith('ForImageClassification'):
            base = getattr(model, cfg['model_type'])  # the class's own model, under its model_type
            return Outputs(base(pixel_values=x).last_hidden_state, model(pixel_values=x).logits, name)
        out = model(pixel_values=x)
    return Outputs(out.last_hidden_state, out.pooler_output, name)
