"""AIMv2's own layers: its native towers' sin-cos table and its attention-pool head.

``aimv2_sincos``: MAE's 2D sin-cos as Apple's ``SinCosPosEmbed`` computes it for the native-resolution towers:
frequencies ``T ** -(k / q)``, q = D / 4 (big_vision's table divides by q - 1 instead), channels
``[sin x | cos x | sin y | cos y]`` (x the column), row-major tokens; transformers' ``is_native`` computes the same.

``AttentionPoolingHead``: Apple's ``AttentionPoolingClassifier`` without batch norm, as the LiT image tower uses it
(transformers' ``Aimv2AttentionPoolingHead``). Learned queries attend over k and v projections of every token, with the trunk's head count, the default
1/sqrt(head width) scale and no q projection (the query is used as stored); the queries' outputs are averaged and
mapped D -> D by ``proj`` (with a bias). Keys: ``query`` [1, Q, D], ``k.weight``, ``v.weight`` (k and v biases only
where the source has them), ``proj.weight``, ``proj.bias``.
"""
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ['aimv2_sincos', 'AttentionPoolingHead']


def aimv2_sincos(grid_h: int, grid_w: int, dim: int, temperature: float = 10000.,
                 device: Optional[torch.device] = None) -> torch.Tensor:
    """AIMv2's native sin-cos table, (grid_h * grid_w, dim) float32 (see the module docstring)."""
    if dim % 4:
        raise ValueError(f'a 2D sin-cos table needs a width divisible by 4, got {dim}')
    q = dim // 4
    omega = 1.0 / temperature ** (torch.arange(q, dtype=torch.float32, device=device) / q)
    y, x = torch.meshgrid(torch.arange(grid_h, dtype=torch.float32, device=device),
                          torch.arange(grid_w, dtype=torch.float32, device=device), indexing='ij')
    x = x.reshape(-1, 1) * omega
    y = y.reshape(-1, 1) * omega
    return torch.cat([x.sin(), x.cos(), y.sin(), y.cos()], dim=1)


class AttentionPoolingHead(nn.Module):
    """Apple's attention pooling: ``proj(mean_q(softmax(q k^T / sqrt(d)) v))`` over the tokens."""

    def __init__(self, dim: int, num_heads: int, queries: int = 1, kv_bias: bool = False, proj_bias: bool = True,
                 device: Optional[torch.device] = None, dtype: Optional[torch.dtype] = None) -> None:
        super().__init__()
        if dim % num_heads:
            raise ValueError(f'the attention pool splits width {dim} over {num_heads} heads: not a whole width')
        dd = {'device': device, 'dtype': dtype}
        self.num_heads = num_heads
        self.query = nn.Parameter(torch.zeros(1, queries, dim, **dd))
        self.k = nn.Linear(dim, dim, bias=kv_bias, **dd)
        self.v = nn.Linear(dim, dim, bias=kv_bias, **dd)
        self.proj = nn.Linear(dim, dim, bias=proj_bias, **dd)

    def reset_query(self) -> None:
        """Apple's initialisation of the queries (``randn * 0.02``)."""
        nn.init.normal_(self.query, std=0.02)

    def forward(self, x: torch.Tensor, key_valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The pooled features [B, D] of the tokens ``x`` [B, N, D]; ``key_valid`` [B, N] leaves padding out."""
        b, n, d = x.shape
        heads = self.num_heads
        q = self.query.expand(b, -1, -1).reshape(b, -1, heads, d // heads).transpose(1, 2)
        k = self.k(x).reshape(b, n, heads, d // heads).transpose(1, 2)
        v = self.v(x).reshape(b, n, heads, d // heads).transpose(1, 2)
        mask = None if key_valid is None else key_valid[:, None, None, :].to(torch.bool)
        pooled = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.proj(pooled.transpose(1, 2).reshape(b, -1, d).mean(dim=1))
