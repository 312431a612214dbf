"""timm's ``Eva`` models (``timm/models/eva.py``): timm's ports of EVA-02's relatives, DINOv3 and RoPE-ViT, and
timm's own RoPE ViTs, read from timm folders (any ``architecture`` timm's ``Eva`` builds) and from bare state dicts of
timm's DINOv3 and RoPE-ViT ports (by their keys). The reader is ``checkpoints.timm_eva``; EVA-02's own entries
are the ``eva02`` family's, whose routes come first.
"""
from ..checkpoints.routes import Probe, Route
from ..checkpoints.timm_eva import TimmEvaCheckpoint, is_eva_architecture, is_timm_eva
from .registry import Family

__all__ = ['FAMILY']


def _timm_eva(p: Probe) -> bool:
    arch = p.config.get('architecture')
    return is_eva_architecture(arch) or arch is None and is_timm_eva(p.local)


FAMILY = Family(
    'eva',
    # timm folders before timm's other readers (row 1100); bare state dicts before the key-told families' rows
    routes=(Route(900., lambda p: 'architecture' in p.config and _timm_eva(p), TimmEvaCheckpoint),
            Route(2600., _timm_eva, TimmEvaCheckpoint)),
)
