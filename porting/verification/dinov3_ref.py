"""The DINOv3 reference: the hub ``.pth`` through timm's own DINOv3 loading (``eva.checkpoint_filter_fn``) into timm's
``Eva`` built as its ``vit_*_patch16_dinov3*`` entries build it, at the grid checked.

Two things are set from the file by hand, because timm does not read them: the RoPE ``periods`` (timm recomputes
them in fp32; the published files store bf16 values, which DINOv3's own fp32 model uses as stored), and, for a file
with untied norms, DINOv3's ``cls_norm`` over [CLS, storage] and ``norm`` over the patches (timm has one final norm).
The check shares those two readings of the file with the converter: that the stored periods are the ones to use,
and which tokens each untied norm covers.
"""
from functools import partial
from pathlib import Path
from typing import Any, Dict, Optional

import torch
import torch.nn as nn

from timm_vit_variants.checkpoints.pickle_store import read_weights
from timm_vit_variants.config import SimpleViTConfig
from timm_vit_variants.dino_models import EVA_ROPE, eva_rope_args
from timm_vit_variants.memory import release_after_use
from timm_vit_variants.parts import Rope

from .hf_ref import hf_config, hf_model_type, load, transformers_at
from .result import Check, NoReference, Outputs
from .streamed import as_float32, trace_blocks

__all__ = ['bare_eva', 'dinov3_outputs', 'eva_model', 'load_eva', 'has_rope', 'timm_eva_outputs', 'is_hf_dinov3',
           'hf_dinov3_outputs']


def eva_model(config: SimpleViTConfig, rows: int, cols: int, **extra: Any) -> nn.Module:
    """timm's ``Eva`` with DINOv3/RoPE-ViT blocks for ``config`` at a rows x cols grid, on the meta device; its
    RoPE is ``config.position(Rope).kind`` as timm's port builds it (``dino_models.EVA_ROPE``)."""
    from timm.layers import LayerNorm
    from timm.models.eva import Eva

    dim, mlp = config.embed_dim, config.block.mlp_dim
    swiglu = config.block.mlp == 'swiglu'
    patch = config.patch_size
    with torch.device('meta'):
        return Eva(
            img_size=(rows * patch[0], cols * patch[1]), patch_size=patch, in_chans=config.in_chans,
            num_classes=config.num_classes, global_pool=config.head.pool.kind, embed_dim=dim,
            depth=config.depth, num_heads=config.num_heads, qkv_bias=config.block.qkv_bias,
            # EvaBlock sizes the MLP as int(D * ratio): half a unit more lands on the exact width
            mlp_ratio=(mlp + 0.5) / dim, swiglu_mlp=swiglu,
            swiglu_align_to=1 if swiglu else 0, init_values=config.block.init_values or 1.0,
            num_reg_tokens=config.tokens.registers, use_rot_pos_emb=True, use_fc_norm=False,
            norm_layer=partial(LayerNorm, eps=config.block.norm_eps),
            **eva_rope_args(config.position(Rope).kind, config.position(Rope).theta), **extra)


def load_eva(model: nn.Module, state: Dict[str, torch.Tensor]) -> nn.Module:
    """Load a timm-filtered state dict into a meta-built ``Eva``: its rope module's computed buffers are made on the
    CPU first (the state dict does not hold them; an EVA-01 has none), then every stored tensor is assigned."""
    if model.rope is not None:
        model.rope.to_empty(device='cpu')
        model.rope.reset_parameters()
    model.load_state_dict(state, strict=True, assign=True)
    for module in model.modules():  # EvaAttention's fixed zero k bias is a computed buffer too
        if getattr(module, 'k_bias', None) is not None and module.k_bias.is_meta:
            module.k_bias = torch.zeros(module.k_bias.shape, dtype=module.k_bias.dtype)
    left = [name for name, b in model.named_buffers() if b.is_meta]
    if left:
        raise NoReference(f'timm Eva holds computed buffers this reference does not rebuild: {left[:3]}')
    model = as_float32(model.eval())  # half-precision weights run upcast, as ours do
    release_after_use(model.blocks)  # the mapped file's pages go back block by block
    trace_blocks(model)  # streamed: each block's output compared as ours runs
    return model


def dinov3_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """The hub file run by timm at the source geometry, or at the target one (RoPE is computed for any grid; a
    DINOv3 model takes no NaFlex batch: ``mixed`` is not run)."""
    from timm.models.eva import checkpoint_filter_fn

    source, runs_at = check.source, check.runs_at
    check.require_own_resize('DINOv3', None)  # RoPE only: no table to resize
    rows, cols = runs_at.grid_size
    state = read_weights(check.path, check.weights_key)
    if 'rope_embed.periods' not in state:
        raise NoReference('the file is not a DINOv3 state dict')
    state = dict(state)
    periods = state['rope_embed.periods'].float()
    untied = {k[len('cls_norm.'):]: state.pop(k) for k in list(state) if k.startswith('cls_norm.')}
    model = eva_model(source, rows, cols, dynamic_img_size=True, use_abs_pos_emb=False, attn_type='eva')
    model = load_eva(model, checkpoint_filter_fn(state, model))
    model.rope.periods.copy_(periods)  # timm's non-persistent buffer, recomputed in fp32: the stored values instead
    x = x[..., :rows * runs_at.patch_size[0], :cols * runs_at.patch_size[1]]
    with torch.no_grad():
        if untied:
            cls_norm = nn.LayerNorm(untied['weight'].shape[0], eps=source.block.norm_eps)
            cls_norm.load_state_dict(untied)
            final, model.norm = model.norm, nn.Identity()
            tokens = model.forward_features(x)
            prefix = model.num_prefix_tokens
            feats = torch.cat([cls_norm(tokens[:, :prefix]), final(tokens[:, prefix:])], dim=1)
        else:
            feats = model.forward_features(x)
        pooled = model.forward_head(feats)
    name = ("timm Eva (vit_*_patch16_dinov3* blocks) + timm's eva checkpoint_filter_fn, with the file's stored RoPE "
            'periods' + (" and DINOv3's untied cls_norm/norm applied by hand" if untied else '') +
            ' (shared with the converter: the periods used as stored' +
            (', the tokens each untied norm covers)' if untied else ')'))
    return Outputs(feats, pooled, name)


def timm_eva_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """A timm Eva folder with RoPE (any architecture of timm's ``eva`` module: the DINOv3 and RoPE-ViT ports, the
    ``vit_*_rope_reg*_gap`` and lingbot towers) run by timm itself (``local-dir:``, ``dynamic_img_size=True``), or a
    bare state dict of a DINOv3 or RoPE-ViT port in timm's ``Eva`` built as those entries build it; at the source
    geometry or at the target one, where timm resizes an absolute table with its own rule (bicubic with
    antialias)."""
    import timm

    from timm_vit_variants.checkpoints.files import SINGLE_WEIGHT_FILES, read_json
    from timm_vit_variants.checkpoints.timm_eva import is_eva_architecture

    from .timm_ref import timm_weights

    folder = Path(check.path)
    source, runs_at = check.source, check.runs_at
    check.require_own_resize('timm', 'timm' if source.flat_pos_embed == 'learn+rope' else None)
    if folder.is_dir():
        config = read_json(str(folder / 'config.json')) if (folder / 'config.json').is_file() else {}
        if not is_eva_architecture(config.get('architecture')):
            raise NoReference(f"timm's VisionTransformer has no equivalent of pos_embed={source.flat_pos_embed!r}")
        files = [folder / name for name in SINGLE_WEIGHT_FILES if (folder / name).is_file()]
        if not files:
            raise NoReference('timm can only load an unsharded Hub folder (config.json + model.safetensors)')
        with torch.device('meta'):
            model = timm.create_model(f'local-dir:{folder}', pretrained=False, dynamic_img_size=True)
        model = load_eva(model, timm_weights(files[0], check.weights_key))
        name = f"timm.create_model('local-dir:...', dynamic_img_size=True) ({config['architecture']})"
    else:
        model = load_eva(bare_eva(source), timm_weights(folder, check.weights_key))
        kind = source.position(Rope).kind
        name = (f"timm Eva ({EVA_ROPE[kind][2]} blocks) + the state dict loaded strictly (shared with "
                'the converter: the head count, LayerNorm eps and pooling a bare state dict does not record)')
    rows, cols = runs_at.grid_size
    x = x[..., :rows * runs_at.patch_size[0], :cols * runs_at.patch_size[1]]
    with torch.no_grad():
        feats = model.forward_features(x)
        pooled = model.forward_head(feats)
    return Outputs(feats, pooled, name)


def bare_eva(config: SimpleViTConfig) -> nn.Module:
    """timm's ``Eva`` as its DINOv3 or RoPE-ViT entries build it, for a bare state dict's ``config``, at the source
    grid with ``dynamic_img_size`` (timm then resizes an absolute table with its own rule)."""
    rows, cols = config.grid_size
    if config.position(Rope).kind == 'dinov3':
        return eva_model(config, rows, cols, dynamic_img_size=True, use_abs_pos_emb=False, attn_type='eva')
    return eva_model(config, rows, cols, dynamic_img_size=True, attn_type='rope', class_token=config.tokens.cls,
                     no_embed_class=True, use_abs_pos_emb=config.flat_pos_embed == 'learn+rope')


def has_rope(check: Check) -> bool:
    """Whether the timm source has rotary positions: a port timm's ``VisionTransformer`` cannot express, run in its
    ``Eva`` (``timm_eva_outputs``)."""
    return check.source.position(Rope) is not None


def is_hf_dinov3(check: Check) -> bool:
    """Whether the source is a transformers DINOv3 ViT folder."""
    return hf_model_type(check) == 'dinov3_vit'


def hf_dinov3_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """A DINOv3 folder's class: RoPE, so no table to resize; its tokens and pooled output."""
    transformers = transformers_at(check, None)
    folder, cfg = hf_config(check)
    model, name = load(transformers, folder, cfg, 'DINOv3ViTModel')
    with torch.no_grad():
        out = model(pixel_values=x)
    return Outputs(out.last_hidden_state, out.pooler_output, name)
