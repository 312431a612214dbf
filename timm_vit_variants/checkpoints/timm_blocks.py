"""How a built timm block of each arrangement reads as the config's block settings, and where the tensors that show
them sit in its state dict.

A timm reader rebuilds the recorded architecture on the meta device (``timm_build``); ``BLOCK_LAYOUTS`` says, for each
timm block class our ``layers.BLOCKS`` reuses, which ``block_type`` it is and where its attention, first norm, MLP and
LayerScale sit (timm's ``ParallelThingsBlock`` nests them under its first branch, ``ParallelScalingBlock`` fuses
attention and MLP input into one projection). ``block_settings`` reads the settings off the block; the tensor names
(``BlockLayout.key``) let the reader hold them against the weights.
"""
from dataclasses import dataclass
from typing import Any, Dict, Optional

import torch.nn as nn
from timm.layers import DiffAttention, GluMlp, RmsNorm
from timm.models.vision_transformer import (Block, DiffParallelScalingBlock, ParallelScalingBlock,
                                            ParallelThingsBlock, ResPostBlock)

from ..config import activation_name

__all__ = ['BlockLayout', 'BLOCK_LAYOUTS', 'PLAIN', 'layout_of', 'block_settings']


@dataclass(frozen=True)
class BlockLayout:
    """Where a timm block class keeps its parts, as paths under the block ('' is the block itself).

    Attributes:
        block_type: The config's ``block_type`` of the class.
        attn: The attention (``num_heads``, ``q_norm``; ``qkv`` unless ``fused``).
        norm: The block's first norm (the model's norm layer and its epsilon).
        mlp: The MLP (``fc1``, ``act``, ``norm``), None where its first layer sits in the fused input projection.
        layer_scale: The first LayerScale, None where the block has none.
        fused: The attention's q, k, v and the MLP's first layer are one projection, ``in_proj``, MLP rows first.
    """
    block_type: str
    attn: str = 'attn'
    norm: str = 'norm1'
    mlp: Optional[str] = 'mlp'
    layer_scale: Optional[str] = 'ls1'
    fused: bool = False

    def key(self, part: str, name: str) -> str:
        """The state-dict name of tensor ``name`` of ``part`` ('attn', 'mlp', ...), under the block."""
        where = getattr(self, part)
        return f'{where}.{name}' if where else name


PLAIN = BlockLayout('vit')
_SCALING = BlockLayout('parallel_scaling', attn='', norm='in_norm', mlp=None, layer_scale='ls', fused=True)
BLOCK_LAYOUTS: Dict[type, BlockLayout] = {
    Block: PLAIN,
    ResPostBlock: BlockLayout('res_post', layer_scale=None),
    ParallelThingsBlock: BlockLayout('parallel', attn='attns.0.attn', norm='attns.0.norm', mlp='ffns.0.mlp',
                                     layer_scale='attns.0.ls'),
    ParallelScalingBlock: _SCALING,
    DiffParallelScalingBlock: _SCALING,
}


def layout_of(block: nn.Module) -> BlockLayout:
    """The layout of a built block of one of ``BLOCK_LAYOUTS``' classes (``timm_parts`` lets no other through)."""
    return BLOCK_LAYOUTS[type(block)]


def _at(block: nn.Module, path: Optional[str]) -> Any:
    return block.get_submodule(path) if path else block if path == '' else None


def block_settings(block: nn.Module) -> Dict[str, Any]:
    """The config's settings a built timm block records (flat names): its kind, attention, heads, norm layer and
    epsilon, q/k norm, MLP width and activation, qkv bias, LayerScale and a packed SwiGLU."""
    layout = layout_of(block)
    attn, norm, mlp = _at(block, layout.attn), _at(block, layout.norm), _at(block, layout.mlp)
    diff = isinstance(attn, (DiffAttention, DiffParallelScalingBlock))
    settings: Dict[str, Any] = dict(
        block_type=layout.block_type, num_heads=attn.num_heads, norm_eps=norm.eps,
        norm_layer='rmsnorm' if isinstance(norm, RmsNorm) else 'layernorm',
        qk_norm=not isinstance(attn.q_norm, nn.Identity),
        act_layer=activation_name(block.mlp_act if mlp is None else mlp.act),
        qkv_bias=(block.in_proj if layout.fused else attn.qkv).bias is not None,
        fc1_width=block.in_split[0] if mlp is None else mlp.fc1.out_features,
        embed_dim=norm.normalized_shape[0])
    if diff:
        settings['attn_layer'] = 'diff'
    scale = _at(block, layout.layer_scale)
    if hasattr(scale, 'gamma'):
        settings['init_values'] = 1.0  # only the initialiser: the stored gamma is loaded
    if isinstance(mlp, GluMlp):
        settings['mlp_layer'] = 'swiglu_packed'
    return settings
