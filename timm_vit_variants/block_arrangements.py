"""timm's other block arrangements, as block kinds (``layers.BLOCKS``): its post-norm ``ResPostBlock``, its
``ParallelThingsBlock`` and its ``ParallelScalingBlock`` (``DiffParallelScalingBlock`` with differential attention).

Each is timm's own class, built from ``layers.build_blocks``' options, so its state-dict names and forward are timm's
and a converted model computes what timm's does by construction. None applies rotations: a rotary position scheme is
refused for them (``no_rotations``), and the model calls them as timm does, ``block(x, attn_mask=mask)``, which
serves NCHW batches and packed NaFlex rows alike (every one of them takes an additive mask).
"""
from typing import Any, Optional, Type

import torch.nn as nn
from timm.layers import DiffAttention
from timm.models.vision_transformer import (DiffParallelScalingBlock, ParallelScalingBlock, ParallelThingsBlock,
                                            ResPostBlock)

from .errors import ViTVariantsError

__all__ = ['NO_ROTATIONS', 'no_rotations', 'post_norm_block', 'parallel_block', 'parallel_scaling_block']

# The attribute the model's block loop tests (``hasattr(blk, 'no_rotations')``: TorchScript decides it when it compiles,
# given the name as a literal): set on a block whose forward is timm's ``(x, attn_mask)``, without the rotations
# argument of the rotary blocks.
NO_ROTATIONS = 'no_rotations'


def no_rotations(block: nn.Module) -> nn.Module:
    """Mark ``block`` as called without rotations (``NO_ROTATIONS``); returns it."""
    setattr(block, NO_ROTATIONS, True)
    return block


def _refuse_rotations(kind: str, rotate_half: Optional[bool]) -> None:
    if rotate_half is not None:
        raise ViTVariantsError(f"timm's {kind} applies no rotary positions: use block_type 'vit' or 'eva' with "
                               "a rotary scheme", key='block_type')


def _mlp_block(cls: Type[nn.Module], dim: int, num_heads: int, *, mlp: Any, mlp_width: int, mlp_bias: bool = True,
               mlp_norm: bool = False, attn_norm: bool = False, qkv_fused: bool = True,
               rotate_half: Optional[bool] = None, **kwargs: Any) -> nn.Module:
    """timm's ``cls`` taking ``mlp_layer``/``attn_layer`` as timm's ``Block`` does, with the exact MLP width."""
    _refuse_rotations(cls.__name__, rotate_half)
    return no_rotations(cls(dim=dim, num_heads=num_heads, mlp_ratio=mlp_width / dim,
                            mlp_layer=mlp.exact(mlp_width, mlp_bias), scale_mlp_norm=mlp_norm,
                            scale_attn_norm=attn_norm, **kwargs))


def post_norm_block(dim: int, num_heads: int, **options: Any) -> nn.Module:
    """'res_post': timm's ``ResPostBlock``, ``x + norm1(attn(x))`` then ``x + norm2(mlp(x))`` (timm's
    ``vit_*_rpn``); ``init_values`` only initialises those norms' weights, as in timm."""
    return _mlp_block(ResPostBlock, dim, num_heads, **options)


def parallel_block(dim: int, num_heads: int, **options: Any) -> nn.Module:
    """'parallel': timm's ``ParallelThingsBlock`` with its two branches (``attns.0``/``attns.1``, then
    ``ffns.0``/``ffns.1``; Touvron et al. 2022, timm's ``vit_*_18x2``)."""
    return _mlp_block(ParallelThingsBlock, dim, num_heads, **options)


def parallel_scaling_block(dim: int, num_heads: int, *, mlp: Any, mlp_width: int, attn_layer: Type[nn.Module],
                           mlp_bias: bool = True, mlp_norm: bool = False, attn_norm: bool = False,
                           qkv_fused: bool = True, rotate_half: Optional[bool] = None, **kwargs: Any) -> nn.Module:
    """'parallel_scaling': timm's ``ParallelScalingBlock`` (Dehghani et al. 2023; ``DiffParallelScalingBlock`` when
    ``attn_layer`` is differential attention), its MLP exactly ``mlp_width`` wide; the options it has no place for
    (a gated MLP, sub-LNs, an MLP without bias) are refused by the config's ``BlockPart``."""
    cls = DiffParallelScalingBlock if attn_layer is DiffAttention else ParallelScalingBlock
    _refuse_rotations(cls.__name__, rotate_half)
    # timm sizes the MLP as int(ratio * dim): half a unit more lands on the exact width
    return no_rotations(cls(dim=dim, num_heads=num_heads, mlp_ratio=(mlp_width + 0.5) / dim, **kwargs))
