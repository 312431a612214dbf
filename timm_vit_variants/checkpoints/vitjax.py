"""Original ViT / AugReg ``.npz`` (``vit_jax/models_vit.py``).

Blocks use ``LayerNorm_0``, ``MultiHeadDotProductAttention_1``, ``LayerNorm_2``, ``MlpBlock_3``;
the learned table ``Transformer/posembed_input/pos_embedding`` is added after the class
token is prepended, so it carries a cls slot whenever ``cls`` exists.
"""
from .jax_npz import JaxNpzCheckpoint

__all__ = ['VitJaxCheckpoint']


class VitJaxCheckpoint(JaxNpzCheckpoint):
    format = 'vitjax'
    NORM1 = 'LayerNorm_0'
    ATTN = 'MultiHeadDotProductAttention_1'
    NORM2 = 'LayerNorm_2'
    MLP = 'MlpBlock_3'
    POS_KEY = 'Transformer/posembed_input/pos_embedding'
    POS_CLS_SLOT = True
