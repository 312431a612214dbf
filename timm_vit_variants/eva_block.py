"""The blocks of a ``block_type='eva'`` model: timm's ``EvaBlock``, as EVA-02 (and timm's ``eva02_*``) builds them.

EVA-02's block differs from a plain ViT's in three ways, all of which timm's ``EvaBlock`` (``timm.models.eva``)
already has under EVA's own tensor names: a q/v-only bias (``attn.q_bias``/``attn.v_bias`` beside a fused
``attn.qkv``, or ``q_proj``/``k_proj``/``v_proj`` with no k bias), LayerScale as ``gamma_1``/``gamma_2``, and a
SwiGLU MLP, packed (``mlp.fc1`` holding gate then value: EVA-02 Ti/S, xformers' ``w12``) or split (``fc1_g``,
``fc1_x``) with the sub-LN ``mlp.norm`` (EVA-02 B/L's ``ffn_ln``). The block is built with no prefix tokens: the
model's rotation tensor covers every slot, the identity on [CLS], so one path serves NCHW batches and packed rows.
"""
from typing import Any, List, Optional

import torch
from timm.models.eva import EvaBlock

from .errors import ViTVariantsError

__all__ = ['Eva02Block']


class Eva02Block(EvaBlock):
    """timm's ``EvaBlock`` (same code, same state-dict names) built from ``layers.build_blocks``' options.

    Its fixed zero k bias, a non-persistent buffer, is rebuilt on the CPU after a meta-device build (timm's own
    ``init_non_persistent_buffers`` zeroes it in place, which leaves it on the meta device).
    """

    def __init__(self, dim: int, num_heads: int, *, mlp: Any, mlp_width: int, mlp_bias: bool = True,
                 mlp_norm: bool = False, attn_norm: bool = False, proj_bias: bool = True,
                 rotate_half: Optional[bool] = None, depth: int = 0, **kwargs: Any) -> None:
        """``mlp`` is a ``layers.MlpLayer``; ``depth`` (the block's index) is timm's Block's and unused here."""
        if not (mlp_bias and proj_bias):
            raise ViTVariantsError("timm's EvaBlock has biases on its MLP and attention projections",
                                   key='mlp_bias' if not mlp_bias else 'proj_bias')
        super().__init__(
            dim, num_heads,
            # EvaBlock sizes the MLP as int(D * ratio): half a unit more lands on the exact width
            mlp_ratio=(mlp_width + 0.5) / dim,
            swiglu_mlp=mlp.gated,
            # EvaBlock packs a SwiGLU without a norm unless aligned; aligning to 1 keeps the width and splits it
            swiglu_align_to=1 if mlp.gated and not mlp.packed else 0,
            scale_mlp=mlp_norm,
            scale_attn_inner=attn_norm,
            num_prefix_tokens=0,
            rotate_half=bool(rotate_half),
            **kwargs)

    def init_non_persistent_buffers(self) -> None:
        k_bias = getattr(self.attn, 'k_bias', None)
        if k_bias is not None and k_bias.is_meta:
            self.attn.k_bias = torch.zeros(k_bias.shape, dtype=k_bias.dtype)

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
