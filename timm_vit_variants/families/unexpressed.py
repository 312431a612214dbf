"""transformers image towers whose architecture needs a part this model does not have yet: each is refused by its
``model_type`` naming that part, rather than as "not a ViT". A family that learns the part claims its model types
with an earlier route and this row no longer meets them."""
from typing import Dict

from ..checkpoints.routes import Probe, Refuse, Route
from ..errors import ViTVariantsError
from .registry import Family

__all__ = ['UNEXPRESSED', 'FAMILY']

_SAM = "SAM's image encoder: windowed attention with decomposed relative positions, and its convolutional neck"
# model_type -> the part the tower needs that this model does not express
UNEXPRESSED: Dict[str, str] = {
    'pixtral': "Pixtral's 2D RoPE (its own frequency layout) with RMSNorm and a gated MLP",
    'mlcd_vision_model': "MLCD's 2D RoPE on the patch tokens beside its [CLS]",
    **dict.fromkeys(('gemma4', 'gemma4_vision'), "Gemma 4's tower: 2D RoPE, q/k/v RMSNorm, four norms per block and "
                                                 'clamped linears'),
    **dict.fromkeys(('sam', 'sam_vision_model', 'vitdet'), _SAM),
    'yolos': "YOLOS's detection tokens, appended after the patch tokens with their own table rows",
    **dict.fromkeys(('bridgetower', 'bridgetower_vision_model'), "BridgeTower's output of every layer's tokens (each "
                                                                 'normed again) for its cross-modal layers'),
}


def _refusal(probe: Probe) -> ViTVariantsError:
    return ViTVariantsError(f'model_type {probe.model_type!r} needs {UNEXPRESSED[probe.model_type]}, which '
                            'SimpleVisionTransformer does not express', path=probe.config_path, key='model_type')


FAMILY = Family(
    'unexpressed',
    # just before the refusal of any other transformers model type (2000)
    routes=(Route(1990., lambda p: p.model_type in UNEXPRESSED, Refuse(_refusal)),),
)
