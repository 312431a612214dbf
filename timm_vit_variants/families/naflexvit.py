"""timm's ``NaFlexVit`` (``timm/models/naflexvit.py``): folders and state dicts with its ``embeds.proj`` patch
embedding, read by ``checkpoints.timm_naflex`` before timm's plain-ViT reader (rows 1100 and 3300) would meet them.
"""
from ..checkpoints.routes import Probe, Route
from ..checkpoints.timm_naflex import TimmNaFlexCheckpoint
from .registry import Family

__all__ = ['FAMILY']


def _naflexvit(p: Probe) -> bool:
    """timm NaFlexVit weights: ``embeds.proj.weight`` under the prefix."""
    return p.prefix + 'embeds.proj.weight' in p.store


FAMILY = Family(
    'naflexvit',
    routes=(Route(1000., lambda p: 'architecture' in p.config and _naflexvit(p), TimmNaFlexCheckpoint),
            Route(3200., lambda p: p.ends('patch_embed.proj.weight', 'embeds.proj.weight') and _naflexvit(p),
                  TimmNaFlexCheckpoint)),
)
