"""EVA-02 (BAAI, baaivision/EVA): [CLS], a learned table with 2-D RoPE on top, SwiGLU MLPs, sub-LN. Rows and tags
come from ``eva02_models``; the reader stays in ``checkpoints.eva02`` (BAAI's files, timm's Eva layout of them).
"""
from ..checkpoints.eva02 import Eva02Checkpoint, is_eva02, is_eva02_architecture
from ..checkpoints.routes import Route
from ..eva02_models import EVA02_CFGS, EVA02_ROWS
from ..model_table import ModelEntry
from .registry import Family

__all__ = ['FAMILY']

FAMILY = Family(
    'eva02',
    rows={name: ModelEntry(*row) for name, row in EVA02_ROWS.items()},
    cfgs=EVA02_CFGS,
    # timm eva02_* folders before timm's other folders; bare state dicts (BAAI's or timm's layout) before timm's
    # other Eva ports: with LayerScale it has their gamma_1 and q_bias
    routes=(Route(700., lambda p: is_eva02_architecture(p.config.get('architecture')), Eva02Checkpoint),
            Route(2500., lambda p: is_eva02(p.names), Eva02Checkpoint)),
    untrained=True,
)
