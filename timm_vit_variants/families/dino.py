"""DINOv2, DINOv3 and RoPE-ViT (facebookresearch/dinov2, dinov3; naver-ai/rope-vit): one family this round, since
their rows and tags are one table in ``dino_models`` (``DINO_ROWS``, ``DINO_CFGS``). The readers stay in
``checkpoints.dinov2``, ``dinov3``, ``rope_vit`` and the transformers ``hf_dinov2`` / ``hf_dinov3`` modules.
"""
from ..checkpoints.dinov2 import Dinov2Checkpoint, is_dinov2
from ..checkpoints.dinov3 import Dinov3Checkpoint, is_dinov3
from ..checkpoints.hf_dinov2 import DINOV2_MODEL_TYPES, HFDinov2Checkpoint
from ..checkpoints.hf_dinov3 import DINOV3_MODEL_TYPES, HFDinov3Checkpoint
from ..checkpoints.layerscale_blocks import is_layerscale_ape
from ..checkpoints.rope_vit import RopeVitCheckpoint, is_rope_vit
from ..checkpoints.routes import Route
from ..dino_models import DINO_CFGS, DINO_ROWS
from ..model_table import ModelEntry
from .registry import Family

__all__ = ['FAMILY']

FAMILY = Family(
    'dino',
    rows={name: ModelEntry(*row) for name, row in DINO_ROWS.items()},
    cfgs=DINO_CFGS,
    # transformers' Dinov2 / DINOv3 folders by model_type; bare state dicts by their keys; RoPE-ViT after DeiT-III's
    # row (2700), which takes the rope_axial_ape keys of a source named as DeiT-III
    routes=(Route(1400., lambda p: p.model_type in DINOV2_MODEL_TYPES, HFDinov2Checkpoint),
            Route(1500., lambda p: p.model_type in DINOV3_MODEL_TYPES, HFDinov3Checkpoint),
            Route(2300., lambda p: is_dinov2(p.names), Dinov2Checkpoint),
            Route(2400., lambda p: is_dinov3(p.names), Dinov3Checkpoint),
            Route(2800., lambda p: is_layerscale_ape(p.names) or is_rope_vit(p.names), RopeVitCheckpoint)),
    untrained=True,
)
