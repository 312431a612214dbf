"""EVA-CLIP's reference: timm's ``Eva`` as its EVA-CLIP entries build it (``eva02_*_clip_*``: split q/k/v, the
attention's and SwiGLU's sub-LNs, EVA-02's RoPE scaled to 16x16; ``eva_giant_*_clip_*``: fused qkv, GELU MLP, no RoPE),
[CLS] pooling after the final norm and the projection as its head, loaded through timm's own
``eva.checkpoint_filter_fn``, which reads EVA-CLIP's ``visual.`` layout (its names, its q/v biases, the stored RoPE
tables dropped; EVA-CLIP's own ``load_state_dict`` drops them too, for RoPE models, and rebuilds them).

At another grid the table is resized as EVA-CLIP's ``resize_evaclip_pos_embed`` does (bicubic, ``align_corners=False``,
no antialias, the [CLS] row kept, square grids only: the transcription EVA-02's check uses, ``eva02_table``), since
timm's filter antialiases; timm computes the RoPE for the grid itself, as EVA-CLIP's constructor does. Shared with the
converter: that resize rule, the head count of an EVA01-CLIP width (no file records it) and the 16x16 RoPE grid. That
the whole matches EVA-CLIP's own code at three grids is shown by tests/test_reference_evaclip.py.
"""
from functools import partial
from typing import Dict, Optional

import torch

from timm_vit_variants.checkpoints.pickle_store import read_weights
from timm_vit_variants.config import SimpleViTConfig
from timm_vit_variants.dino_models import eva_rope_args
from timm_vit_variants.families.evaclip import EVACLIP_PREFIX
from timm_vit_variants.parts import Rope

from ..verification.dinov3_ref import load_eva
from ..verification.eva02_ref import eva02_table
from ..verification.result import Check, NoReference, Outputs

__all__ = ['evaclip_outputs']


def _timm_eva(config: SimpleViTConfig, rows: int, cols: int) -> torch.nn.Module:
    """timm's ``Eva`` with ``config``'s dimensions at rows x cols, on the meta device."""
    from timm.layers import LayerNorm
    from timm.models.eva import Eva

    rope = config.position(Rope)
    block, patch = config.block, config.patch_size
    rope_args = {} if rope is None else dict(use_rot_pos_emb=True, ref_feat_shape=(rope.ref_grid, rope.ref_grid),
                                             **eva_rope_args(rope.kind, rope.theta))
    with torch.device('meta'):
        return Eva(img_size=(rows * patch[0], cols * patch[1]), patch_size=patch, in_chans=config.in_chans,
                   num_classes=config.num_classes, global_pool='token', embed_dim=config.embed_dim,
                   depth=config.depth, num_heads=config.num_heads, qkv_bias=block.qkv_bias,
                   qkv_fused=block.qkv_fused, mlp_ratio=(block.mlp_dim + 0.5) / config.embed_dim,
                   swiglu_mlp=block.mlp == 'swiglu', swiglu_align_to=1 if block.mlp == 'swiglu' else 0,
                   scale_mlp=block.mlp_norm, scale_attn_inner=block.attn_norm, init_values=block.init_values,
                   use_fc_norm=False, norm_layer=partial(LayerNorm, eps=block.norm_eps), **rope_args)


def evaclip_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """timm's Eva holding the file's image tower at the check's grid: the final-norm tokens and the projection."""
    from timm.models.eva import checkpoint_filter_fn

    source, runs_at = check.source, check.runs_at
    if source.img_size[0] != source.img_size[1] or runs_at.img_size[0] != runs_at.img_size[1]:
        raise NoReference('EVA-CLIP takes one integer image size: it defines no non-square grid')
    check.require_own_resize('EVA-CLIP', 'deit', "EVA-CLIP's resize_evaclip_pos_embed")
    rows, cols = runs_at.grid_size
    stored = read_weights(check.path, check.weights_key)
    tower = {k: v for k, v in stored.items() if k.startswith(EVACLIP_PREFIX)}  # the filter reads them under visual.
    model = _timm_eva(source, rows, cols)
    state = checkpoint_filter_fn(tower, model)
    state['pos_embed'] = eva02_table(tower[EVACLIP_PREFIX + 'pos_embed'], rows, cols)
    model = load_eva(model, state)
    x = x[..., :rows * runs_at.patch_size[0], :cols * runs_at.patch_size[1]]
    with torch.no_grad():
        feats = model.forward_features(x)
        logits = model.forward_head(feats)
    resized = '' if check.target is None else (", the table resized as EVA-CLIP's resize_evaclip_pos_embed "
                                               '(transcribed)')
    return Outputs(feats, logits, f"timm Eva (EVA-CLIP's blocks) + timm's eva checkpoint_filter_fn{resized}")
