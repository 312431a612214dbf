"""The blocks of a ``block_type='eva'`` or ``'eva_post'`` model: timm's ``EvaBlock`` and ``EvaBlockPostNorm``, as
EVA-02 (and timm's ``eva02_*``) builds them.

EVA-02's block differs from a plain ViT's in three ways, all of which timm's ``EvaBlock`` (``timm.models.eva``)
already has under EVA's own tensor names: a q/v-only bias (``attn.q_bias``/``attn.v_bias`` beside a fused
``attn.qkv``, or ``q_proj``/``k_proj``/``v_proj`` with no k bias), LayerScale as ``gamma_1``/``gamma_2``, and a
SwiGLU MLP, packed (``mlp.fc1`` holding gate then value: EVA-02 Ti/S, xformers' ``w12``) or split (``fc1_g``,
``fc1_x``) with the sub-LN ``mlp.norm`` (EVA-02 B/L's ``ffn_ln``). ``EvaBlockPostNorm`` (EVA-02-CLIP-E's) is the same
attention and MLP with each branch's output normalised before it is added (``norm1``, ``norm2``), and no LayerScale.
The blocks are built with no prefix tokens: the model's rotation tensor covers every slot, the identity on [CLS], so
one path serves NCHW batches and packed rows.
"""
from typing import Any, Dict, List, Optional

import torch
from timm.layers import Attention
from timm.models.eva import EvaBlock, EvaBlockPostNorm

from .errors import ViTVariantsError

__all__ = ['Eva02Block', 'Eva02PostNormBlock']


def _eva_options(dim: int, *, mlp: Any, mlp_width: int, mlp_bias: bool, mlp_norm: bool, attn_norm: bool,
                 proj_bias: bool, rotate_half: Optional[bool], attn_layer: Any) -> Dict[str, Any]:
    """timm's Eva block arguments for ``layers.build_blocks``' options; what the Eva blocks lack is refused."""
    if not (mlp_bias and proj_bias):
        raise ViTVariantsError("timm's EvaBlock has biases on its MLP and attention projections",
                               key='mlp_bias' if not mlp_bias else 'proj_bias')
    if attn_layer is not Attention:
        raise ViTVariantsError("timm's EvaBlock has EVA's own attention", key='attn_layer')
    return dict(
        # EvaBlock sizes the MLP as int(D * ratio): half a unit more lands on the exact width
        mlp_ratio=(mlp_width + 0.5) / dim,
        swiglu_mlp=mlp.gated,
        # EvaBlock packs a SwiGLU without a norm unless aligned; aligning to 1 keeps the width and splits it
        swiglu_align_to=1 if mlp.gated and not mlp.packed else 0,
        scale_mlp=mlp_norm,
        scale_attn_inner=attn_norm,
        num_prefix_tokens=0,
        rotate_half=bool(rotate_half))


class _MetaKBias:
    """Rebuilds the attention's fixed zero k bias, a non-persistent buffer, on the CPU after a meta-device build
    (timm's own ``init_non_persistent_buffers`` zeroes it in place, which leaves it on the meta device)."""

    def init_non_persistent_buffers(self) -> None:
        k_bias = getattr(self.attn, 'k_bias', None)
        if k_bias is not None and k_bias.is_meta:
            self.attn.k_bias = torch.zeros(k_bias.shape, dtype=k_bias.dtype)


class Eva02Block(_MetaKBias, EvaBlock):
    """timm's ``EvaBlock`` (same code, same state-dict names) built from ``layers.build_blocks``' options."""

    def __init__(self, dim: int, num_heads: int, *, mlp: Any, mlp_width: int, mlp_bias: bool = True,
                 mlp_norm: bool = False, attn_norm: bool = False, proj_bias: bool = True,
                 rotate_half: Optional[bool] = None, attn_layer: Any = Attention, depth: int = 0,
                 **kwargs: Any) -> None:
        """``mlp`` is a ``layers.MlpLayer``; ``depth`` (the block's index) is timm's Block's and unused here."""
        super().__init__(dim, num_heads, **_eva_options(
            dim, mlp=mlp, mlp_width=mlp_width, mlp_bias=mlp_bias, mlp_norm=mlp_norm, attn_norm=attn_norm,
            proj_bias=proj_bias, rotate_half=rotate_half, attn_layer=attn_layer), **kwargs)

    def forward(self, x: torch.Tensor, attn_mask: Optional[torch.Tensor] = None,
                rope: Optional[torch.Tensor] = None, grid: Optional[List[int]] = None) -> torch.Tensor:
        """timm's ``EvaBlock.forward`` (written out: TorchScript calls no ``super()``), called as every block of the
        loop is; ``grid`` is not needed (every token attends to every other)."""
        x_attn = self.attn(self.norm1(x), rope=rope, attn_mask=attn_mask)
        if self.gamma_1 is not None:
            x_attn = self.gamma_1 * x_attn
        x = x + self.drop_path1(x_attn)
        x_mlp = self.mlp(self.norm2(x))
        if self.gamma_2 is not None:
            x_mlp = self.gamma_2 * x_mlp
        return x + self.drop_path2(x_mlp)


class Eva02PostNormBlock(_MetaKBias, EvaBlockPostNorm):
    """timm's ``EvaBlockPostNorm`` (same code, same state-dict names) built from ``layers.build_blocks``' options;
    ``init_values`` is ignored, as timm's is (the block has no LayerScale)."""

    def __init__(self, dim: int, num_heads: int, *, mlp: Any, mlp_width: int, mlp_bias: bool = True,
                 mlp_norm: bool = False, attn_norm: bool = False, proj_bias: bool = True,
                 rotate_half: Optional[bool] = None, attn_layer: Any = Attention, qk_norm: bool = False,
                 depth: int = 0, **kwargs: Any) -> None:
        if qk_norm:  # EvaBlockPostNorm would take it silently (its **kwargs) and build none
            raise ViTVariantsError("timm's EvaBlockPostNorm has no q/k norm", key='qk_norm')
        super().__init__(dim, num_heads, **_eva_options(
            dim, mlp=mlp, mlp_width=mlp_width, mlp_bias=mlp_bias, mlp_norm=mlp_norm, attn_norm=attn_norm,
            proj_bias=proj_bias, rotate_half=rotate_half, attn_layer=attn_layer), **kwargs)

    def forward(self, x: torch.Tensor, attn_mask: Optional[torch.Tensor] = None,
                rope: Optional[torch.Tensor] = None, grid: Optional[List[int]] = None) -> torch.Tensor:
        """timm's ``EvaBlockPostNorm.forward`` (written out: TorchScript calls no ``super()``), called as every block
        of the loop is; ``grid`` is not needed."""
        x = x + self.drop_path1(self.norm1(self.attn(x, rope=rope, attn_mask=attn_mask)))
        return x + self.drop_path2(self.norm2(self.mlp(x)))
