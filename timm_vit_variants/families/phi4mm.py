"""Phi-4-multimodal's image tower (Microsoft 2025, *Phi-4-Mini Technical Report*): transformers'
``Phi4MultimodalVisionModel`` folders (model_type ``phi4_multimodal_vision``).

The tower is SigLIP's vision layout under SigLIP's names (``SiglipVisionModel``'s tensors, MAP head included), read by
the SigLIP rules: ``post_layernorm`` on every token, the MAP head's pooled output. One difference is not expressed:
at a grid other than the stored one the class does not interpolate its table but looks each patch's row up by
bucketing its fractional coordinate (NaViT-style, as Idefics2 does); the converted model resizes by transformers'
SigLIP rule (bicubic), so only the stored grid is the class's output, and a conversion to another grid is refused by
the reference with that reason.
"""
from typing import Dict, Optional

from ..checkpoints.hf_siglip import HFSiglipCheckpoint
from ..checkpoints.preprocessing import assumed_preprocessing
from ..checkpoints.routes import Route
from .registry import Family

__all__ = ['PHI4MM_MODEL_TYPE', 'Phi4MultimodalVisionCheckpoint', 'FAMILY']

PHI4MM_MODEL_TYPE = 'phi4_multimodal_vision'


class Phi4MultimodalVisionCheckpoint(HFSiglipCheckpoint):
    """A transformers ``Phi4MultimodalVisionModel`` folder: SigLIP's image tower under another model_type."""
    format = 'phi4mm'
    CLASSES: Dict[str, Optional[str]] = {'Phi4MultimodalVisionModel': None}
    # Phi4MultimodalImageProcessor: bicubic, mean = std = 0.5
    PREPROCESSING_DEFAULTS = assumed_preprocessing(
        'bicubic', 1.0, 'squash', "not recorded by the folder; transformers' Phi4MultimodalImageProcessor defaults")


FAMILY = Family(
    name='phi4mm',
    # before the refusal of other transformers model types (2000)
    routes=(Route(1964., lambda p: p.model_type == PHI4MM_MODEL_TYPE, Phi4MultimodalVisionCheckpoint),),
)
