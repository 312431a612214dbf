"""DeiT and DeiT-III (facebookresearch/deit): rows and tags from ``deit_models``; the readers stay in
``checkpoints.deit`` (DeiT-III's LayerScale files) and ``checkpoints.hf_deit`` (transformers folders), the 'cls_alone'
pool of transformers' classifier in ``deit_heads``.
"""
from ..checkpoints.deit import Deit3Checkpoint
from ..checkpoints.hf_deit import DEIT_MODEL_TYPES, HFDeitCheckpoint
from ..checkpoints.layerscale_blocks import is_layerscale_ape, layerscale_ape_format
from ..checkpoints.routes import Route
from ..deit_models import DEIT3_CFGS, DEIT3_ROWS, DEIT_CFGS, DEIT_ROWS
from ..model_table import ModelEntry
from .registry import Family

__all__ = ['FAMILY']

FAMILY = Family(
    'deit',
    rows={name: ModelEntry(*row) for rows in (DEIT_ROWS, DEIT3_ROWS) for name, row in rows.items()},
    cfgs={**DEIT_CFGS, **DEIT3_CFGS},
    # transformers' DeiT folders by model_type; DeiT-III and RoPE-ViT rope_axial_ape have the same keys: told apart
    # by the source's name (RoPE-ViT's row: 2800)
    routes=(Route(1800., lambda p: p.model_type in DEIT_MODEL_TYPES, HFDeitCheckpoint),
            Route(2700., lambda p: is_layerscale_ape(p.names) and layerscale_ape_format(p.path) == 'deit3',
                  Deit3Checkpoint)),
    untrained=True,
)
