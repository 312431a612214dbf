"""CoCa's attentional pooler: learned queries attend over every token, then one LayerNorm over the outputs."""
from typing import Any, Callable, Optional

import torch
import torch.nn as nn

__all__ = ['QueryAttentionPool']


class QueryAttentionPool(nn.Module):
    """open_clip's ``AttentionalPooler`` followed by its ``ln_post``: ``norm(attn(ln_q(query), ln_k(x), ln_k(x)))``.

    timm's ``AttentionPoolLatent`` differs (no LayerNorm on queries or keys, an MLP and its own norm), so this is
    torch's ``nn.MultiheadAttention`` as CoCa uses it, with keys and values of another width than the queries;
    the state dict is CoCa's (``query``, ``ln_q``, ``ln_k``, ``attn.*``) plus ``norm`` for its ``ln_post``.
    """

    def __init__(self, dim: int, context_dim: int, num_heads: int, num_queries: int,
                 norm_layer: Callable[..., nn.Module], device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        dd = {'device': device, 'dtype': dtype}
        self.query = nn.Parameter(torch.zeros(num_queries, dim, **dd))
        self.attn = nn.MultiheadAttention(dim, num_heads, kdim=context_dim, vdim=context_dim, batch_first=True, **dd)
        self.ln_q = norm_layer(dim, **dd)
        self.ln_k = norm_layer(context_dim, **dd)
        self.norm = norm_layer(dim, **dd)

    def forward(self, x: torch.Tensor, key_valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        """(B, queries, dim) normalised outputs; ``key_valid`` (B, T) leaves padded tokens out of the keys."""
        keys = self.ln_k(x)
        query = self.ln_q(self.query).unsqueeze(0).expand(x.shape[0], -1, -1)
        mask = None if key_valid is None else ~key_valid.to(torch.bool)
        out = self.attn(query, keys, keys, key_padding_mask=mask, need_weights=False)[0]
        return self.norm(out)
