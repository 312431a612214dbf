"""big_vision plain-ViT ``.npz`` (``big_vision/models/vit.py``, params only).

Blocks use ``LayerNorm_0``, ``MultiHeadDotProductAttention_0``, ``LayerNorm_1``, ``MlpBlock_0``.
A learned table is the top-level ``pos_embedding`` without a cls slot; without it the
model uses the fixed 2D sin-cos table, which is never stored.
"""
from .jax_npz import JaxNpzCheckpoint

__all__ = ['BigVisionCheckpoint']


class BigVisionCheckpoint(JaxNpzCheckpoint):
    format = 'bigvision'
    NORM1 = 'LayerNorm_0'
    ATTN = 'MultiHeadDotProductAttention_0'
    NORM2 = 'LayerNorm_1'
    MLP = 'MlpBlock_0'
    POS_KEY = 'pos_embedding'
    POS_CLS_SLOT = False

    def _default_pos_embed(self, prefix: str) -> str:
        # big_vision's posemb='sincos2d' stores nothing: an absent table means sin-cos.
        return 'sincos'
