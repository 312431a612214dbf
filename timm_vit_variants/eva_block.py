"""The blocks of a ``block_type='eva'`` model: timm's ``EvaBlock``, as EVA-02 (and timm's ``eva02_*``) builds them.

EVA-02's block differs from a plain ViT's in three ways, all of which timm's ``EvaBlock`` (``timm.models.eva``)
already has under EVA's own tensor names: a q/v-only bias (``attn.q_bias``/``attn.v_bias`` beside a fused
``attn.qkv``, or ``q_proj``/``k_proj``/``v_proj`` with no k bias), LayerScale as ``gamma_1``/``gamma_2``, and a
SwiGLU MLP, packed (``mlp.fc1`` holding gate then value: EVA-02 Ti/S, xformers' ``w12``) or split (``fc1_g``,
``fc1_x``) with the sub-LN ``mlp.norm`` (EVA-02 B/L's ``ffn_ln``). The block is built with no prefix tokens: the
model's rotation tensor covers every slot, the identity on [CLS], so one path serves NCHW batches and packed rows.
"""
from typing import Any, Dict, List, Optional

import torch
import torch.nn as nn
from timm.models.eva import EvaBlock

from .config import SimpleViTConfig

__all__ = ['Eva02Block', 'eva_blocks']


class Eva02Block(EvaBlock):
    """timm's ``EvaBlock`` (same code, same state-dict names) whose fixed zero k bias, a non-persistent buffer, is
    rebuilt on the CPU after a meta-device build (timm's own ``init_non_persistent_buffers`` zeroes it in place,
    which leaves it on the meta device)."""

    def init_non_persistent_buffers(self) -> None:
        k_bias = getattr(self.attn, 'k_bias', None)
        if k_bias is not None and k_bias.is_meta:
            self.attn.k_bias = torch.zeros(k_bias.shape, dtype=k_bias.dtype)


def eva_blocks(cfg: SimpleViTConfig, act_layer: Any, norm_layer: Any, dpr: List[float], dd: Dict[str, Any],
               rotate_half: Optional[bool]) -> nn.Sequential:
    """``cfg.depth`` timm ``EvaBlock``s (``Eva02Block``) with the config's exact MLP width, attention and drop-path
    rates; ``rotate_half`` is the rotary scheme's pair layout (None without rotations)."""
    swiglu = cfg.mlp_layer in ('swiglu', 'swiglu_packed')
    return nn.Sequential(*[
        Eva02Block(
            dim=cfg.embed_dim,
            num_heads=cfg.num_heads,
            qkv_bias=cfg.qkv_bias,
            qkv_fused=cfg.qkv_fused,
            # EvaBlock sizes the MLP as int(D * ratio): half a unit more lands on the exact width
            mlp_ratio=(cfg.mlp_dim + 0.5) / cfg.embed_dim,
            swiglu_mlp=swiglu,
            # EvaBlock packs a SwiGLU without a norm unless aligned; aligning to 1 keeps the width and splits it
            swiglu_align_to=1 if cfg.mlp_layer == 'swiglu' else 0,
            scale_mlp=cfg.mlp_norm,
            num_prefix_tokens=0,
            rotate_half=bool(rotate_half),
            proj_drop=cfg.proj_drop_rate,
            attn_drop=cfg.attn_drop_rate,
            drop_path=dpr[i],
            init_values=cfg.init_values,
            act_layer=act_layer,
            norm_layer=norm_layer,
            **dd,
        )
        for i in range(cfg.depth)])
