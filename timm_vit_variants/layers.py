"""The layers a model is built from, passed by class as timm's ``VisionTransformer`` takes them.

Four registries, keyed by the config's names: ``NORM_LAYERS`` (the model's every norm, timm's ``norm_layer``),
``MLP_LAYERS`` (each MLP kind with its exact-width builder, timm's ``mlp_layer``), ``ATTN_LAYERS`` (timm's
``attn_layer``) and ``BLOCKS`` (each block kind, timm's ``block_fn``; the arrangements other than the pre-norm
block in ``block_arrangements.py`` and ``eva_block.py``). Every block builder takes the same keyword options (``build_blocks``), and refuses one its
layers cannot express; so the model picks a row of each table and names no kind.
"""
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Dict, List, Optional

import torch
import torch.nn as nn
from timm.layers import Attention, DiffAttention, LayerNorm, Mlp, RmsNorm, SwiGLU, SwiGLUPacked
from timm.models.vision_transformer import Block

from .errors import ViTVariantsError
from .block_arrangements import parallel_block, parallel_scaling_block, post_norm_block
from .eva_block import Eva02Block, Eva02PostNormBlock
from .rope import RopeBlock

__all__ = ['NORM_LAYERS', 'MLP_LAYERS', 'ATTN_LAYERS', 'BLOCKS', 'MlpLayer', 'PlainBlock', 'build_blocks', 'norm_layer', 'vit_block']

# timm's norms by name: LayerNorm (ViT, CLIP, ...) or RmsNorm (no mean, no bias).
NORM_LAYERS: Dict[str, Callable[..., nn.Module]] = {'layernorm': LayerNorm, 'rmsnorm': RmsNorm}


def norm_layer(kind: str, eps: float) -> Callable[..., nn.Module]:
    """timm's ``norm_layer`` of a model: the norm ``kind`` (``NORM_LAYERS``) with its epsilon."""
    return partial(NORM_LAYERS[kind], eps=eps)


def _exact_width(layer: Callable[..., nn.Module], width: int, mlp_bias: bool, in_features: int,
                 hidden_features: Optional[int] = None, *, bias: bool = True, **kwargs: Any) -> nn.Module:
    # timm's Block sizes the MLP as int(dim * ratio) and gives it the attention's proj_bias; a checkpoint needs an
    # exact width and the MLP's own bias pattern.
    return layer(in_features, width, bias=mlp_bias, **kwargs)


@dataclass(frozen=True)
class MlpLayer:
    """An MLP kind: timm's layer, and how the config's exact width (the gated width of a SwiGLU) maps onto it.

    Attributes:
        layer: timm's class (or partial).
        gated: A SwiGLU, silu(gate) * value (timm's ``EvaBlock`` ``swiglu_mlp``).
        packed: One ``fc1`` holds gate and value, twice the gated width (``SwiGLUPacked``); else ``fc1_g``, ``fc1_x``.
    """
    layer: Callable[..., nn.Module]
    gated: bool = False
    packed: bool = False

    def exact(self, width: int, bias: bool = True) -> Callable[..., nn.Module]:
        """timm's ``mlp_layer`` for a block: this kind at exactly ``width`` (gated), with or without biases."""
        return partial(_exact_width, self.layer, 2 * width if self.packed else width, bias)


# timm's Mlp; its SwiGLUPacked (DINOv2 ViT-g, EVA-02 Ti/S); its SwiGLU with separate gate and value (DINOv3 H+).
MLP_LAYERS: Dict[str, MlpLayer] = {
    'mlp': MlpLayer(Mlp),
    'swiglu_packed': MlpLayer(SwiGLUPacked, gated=True, packed=True),
    'swiglu': MlpLayer(SwiGLU, gated=True),
}


# timm's attention layers by name: its ``Attention``, or its ``DiffAttention`` (two softmax maps, one subtracted).
ATTN_LAYERS: Dict[str, Callable[..., nn.Module]] = {'attention': Attention, 'diff': DiffAttention}


class PlainBlock(Block):
    """timm's pre-norm ``Block``, callable as every block of the loop is, ``(x, attn_mask, rope, grid)``: it has no
    rotations, so ``rope`` is None (the position schemes hand one only to rotary blocks), and attends over every
    token whatever the ``grid`` (NCHW's token grid, which a windowed block partitions; None for packed rows)."""

    def forward(self, x: torch.Tensor, attn_mask: Optional[torch.Tensor] = None,
                rope: Optional[torch.Tensor] = None, grid: Optional[List[int]] = None) -> torch.Tensor:
        x = x + self.drop_path1(self.ls1(self.attn(self.norm1(x), attn_mask=attn_mask)))
        x = x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))
        return x


def vit_block(dim: int, num_heads: int, *, mlp: MlpLayer, mlp_width: int, mlp_bias: bool = True,
              mlp_norm: bool = False, attn_norm: bool = False, qkv_fused: bool = True,
              rotate_half: Optional[bool] = None, attn_layer: Callable[..., nn.Module] = Attention,
              **kwargs: Any) -> nn.Module:
    """'vit': timm's pre-norm ``Block`` with ``attn_layer`` (``RopeBlock``, its attention taking rotations, under a
    rotary scheme whose pair layout is ``rotate_half``), with the exact MLP ``mlp_width``; its qkv is always one
    fused projection."""
    if not qkv_fused:
        raise ViTVariantsError("split q/k/v projections are EvaBlock's: use the 'eva' block", key='qkv_fused')
    if rotate_half is not None and attn_layer is not Attention:
        raise ViTVariantsError(f"timm's {attn_layer.__name__} applies no rotary positions: use attn_layer "
                               "'attention' with a rotary scheme", key='attn_layer')
    block = PlainBlock if rotate_half is None else partial(RopeBlock, rotate_half=rotate_half)
    return block(dim=dim, num_heads=num_heads, mlp_ratio=mlp_width / dim, mlp_layer=mlp.exact(mlp_width, mlp_bias),
                 scale_mlp_norm=mlp_norm, scale_attn_norm=attn_norm, attn_layer=attn_layer, **kwargs)


# Each block kind's builder, all taking ``build_blocks``' options: timm's Block, its EvaBlock (EVA-02), their
# post-norm forms, and its two parallel arrangements.
BLOCKS: Dict[str, Callable[..., nn.Module]] = {
    'vit': vit_block, 'eva': Eva02Block, 'res_post': post_norm_block, 'eva_post': Eva02PostNormBlock,
    'parallel': parallel_block, 'parallel_scaling': parallel_scaling_block}


def build_blocks(block_fn: Callable[..., nn.Module], depth: int, drop_path_rate: float, **options: Any
                 ) -> nn.Sequential:
    """``depth`` blocks of ``block_fn`` with a linear drop-path schedule up to ``drop_path_rate``.

    ``options``, the same for every block kind: ``dim``, ``num_heads``, ``mlp`` (an ``MlpLayer``), ``mlp_width``,
    ``mlp_bias``, ``mlp_norm``, ``attn_norm``, ``attn_layer`` (an ``ATTN_LAYERS`` class), ``qkv_bias``, ``qkv_fused``,
    ``qk_norm``, ``proj_bias``, ``init_values``,
    ``act_layer``, ``norm_layer``, ``proj_drop``, ``attn_drop``, ``rotate_half`` (None without rotations) and
    ``device``/``dtype``.
    """
    dpr = [x.item() for x in torch.linspace(0, drop_path_rate, depth, device='cpu')]
    return nn.Sequential(*[block_fn(drop_path=dpr[i], depth=i, **options) for i in range(depth)])
