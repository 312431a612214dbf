"""BEiT, BEiT v2 and data2vec-vision (microsoft/unilm): relative-position bias per block, LayerScale, mean pooling
with fc_norm. Rows and tags come from ``beit_models``; the readers stay in ``checkpoints.beit`` (unilm files, timm
Beit state dicts and folders) and ``checkpoints.hf_beit`` (transformers folders).
"""
from ..beit_models import BEIT_CFGS, BEIT_ROWS
from ..checkpoints.beit import BeitCheckpoint, TimmBeitCheckpoint, is_beit
from ..checkpoints.hf_beit import BEIT_MODEL_TYPES, HFBeitCheckpoint
from ..checkpoints.routes import Route
from ..model_table import ModelEntry
from .registry import Family

__all__ = ['FAMILY']

FAMILY = Family(
    'beit',
    rows={name: ModelEntry(*row) for name, row in BEIT_ROWS.items()},
    cfgs=BEIT_CFGS,
    # timm Beit folders before timm's other folders; transformers' BEiT folders by model_type; unilm BEiT files and
    # timm Beit state dicts before DINOv2's and the EVA rows
    routes=(Route(800., lambda p: 'architecture' in p.config and is_beit(p.local), TimmBeitCheckpoint),
            Route(1900., lambda p: p.model_type in BEIT_MODEL_TYPES, HFBeitCheckpoint),
            Route(2200., lambda p: is_beit(p.local), BeitCheckpoint)),
    untrained=True,
)
