"""AIMv2's own layers: its native towers' sin-cos table and its attention-pool head.

``aimv2_sincos``: MAE's 2D sin-cos as Apple's ``SinCosPosEmbed`` computes it for the native-resolution towers:
frequencies ``T ** -(k / q)``, q = D / 4 (big_vision's table divides by q - 1 instead), channels
``[sin x | cos x | sin y | cos y]`` (x the column), row-major tokens; transformers' ``is_native`` computes the same.

``Aimv2SinCosEmbed`` is that scheme's module (registered in ``positions.SCHEMES``), ``Aimv2PoolModule`` the
model's 'aimv2' pool (a ``heads.PoolModule``).

``AttentionPoolingHead``: Apple's ``AttentionPoolingClassifier`` without batch norm, as the LiT image tower uses it
(transformers' ``Aimv2AttentionPoolingHead``). Learned queries attend over k and v projections of every token, with
the trunk's head count, the default 1/sqrt(head width) scale and no q projection (the query is used as stored); the
queries' outputs are averaged and mapped D -> D by ``proj`` (with a bias). Keys: ``query`` [1, Q, D], ``k.weight``, ``v.weight`` (k and v biases only
where the source has them), ``proj.weight``, ``proj.bias``.
"""
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.layers import register_notrace_module

from ..config import SimpleViTConfig
from ..heads import PoolModule
from ..positions import SCHEMES
from ..posemb import grid_coords
from ..scheme import SchemeModule
from .aimv2_parts import Aimv2SinCos

__all__ = ['aimv2_sincos', 'aimv2_sincos_at', 'Aimv2SinCosEmbed', 'AttentionPoolingHead', 'Aimv2PoolModule']


def aimv2_sincos_at(coords: torch.Tensor, dim: int, temperature: float = 10000.) -> torch.Tensor:
    """AIMv2's native sin-cos rows for (y, x) grid coordinates, (N, 2) -> (N, dim) float32 (module docstring)."""
    if dim % 4:
        raise ValueError(f'a 2D sin-cos table needs a width divisible by 4, got {dim}')
    q = dim // 4
    omega = 1.0 / temperature ** (torch.arange(q, dtype=torch.float32, device=coords.device) / q)
    y = coords[:, 0].to(torch.float32).reshape(-1, 1) * omega
    x = coords[:, 1].to(torch.float32).reshape(-1, 1) * omega
    return torch.cat([x.sin(), x.cos(), y.sin(), y.cos()], dim=1)


def aimv2_sincos(grid_h: int, grid_w: int, dim: int, temperature: float = 10000.,
                 device: Optional[torch.device] = None) -> torch.Tensor:
    """AIMv2's native sin-cos table of a grid, (grid_h * grid_w, dim) float32, row-major."""
    return aimv2_sincos_at(grid_coords(grid_h, grid_w, device), dim, temperature)


@register_notrace_module
class Aimv2SinCosEmbed(SchemeModule):
    """The native towers' positions (the 'aimv2_sincos' scheme): each token's row computed from its (y, x), for
    whole images and NaFlex tokens alike; nothing stored."""

    def __init__(self, dim: int, temperature: float = 10000.) -> None:
        super().__init__()
        self.dim = dim
        self.temperature = temperature

    def add_to(self, tokens: torch.Tensor, coords: torch.Tensor, counts: List[int], grids: List[Tuple[int, int]],
               indexed: bool, table: Optional[torch.Tensor], nominal_h: int, nominal_w: int
               ) -> Tuple[torch.Tensor, List[Optional[torch.Tensor]]]:
        """The tokens plus their rows; no prefix slots."""
        slots: List[Optional[torch.Tensor]] = [None for _ in grids]
        return tokens + aimv2_sincos_at(coords, self.dim, self.temperature).to(tokens.dtype), slots


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


class Aimv2PoolModule(PoolModule, AttentionPoolingHead, kind='aimv2'):
    """The model's 'aimv2' pool (``families.aimv2.Aimv2Pool``): the head in timm's slot ``attn_pool``, over every
    token (padding left out of its keys), the trunk's head count."""
    weighted = True

    @classmethod
    def create(cls, cfg: SimpleViTConfig, norm_layer: Callable[..., nn.Module], act_layer: Any,
               dd: Dict[str, Any]) -> PoolModule:
        pool = cls(cfg.embed_dim, cfg.num_heads, queries=cfg.head.pool.queries, **dd)
        return pool.with_prefix(cfg.num_prefix_tokens)

    def init_pool(self) -> None:
        self.reset_query()

    def pool_tokens(self, x: torch.Tensor, patch_valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        if patch_valid is None:
            return self(x)
        prefix = patch_valid.new_ones(x.shape[0], self.num_prefix_tokens)
        return self(x, torch.cat([prefix, patch_valid], dim=1))


def _build_sincos(cfg: SimpleViTConfig, part: Aimv2SinCos, grid: Tuple[int, int], dd: Dict[str, Any]
                  ) -> SchemeModule:
    return Aimv2SinCosEmbed(cfg.embed_dim, part.temperature)


SCHEMES[Aimv2SinCos.scheme] = _build_sincos  # the 'aimv2_sincos' part's module, in the one registry of schemes
