"""timm plugin: the ``simple_vit_*`` plain-ViT family. Importing registers the models with timm."""
from .config import SimpleViTConfig
from .model_table import MODELS, VARIANTS, architecture_for
from .errors import ViTVariantsError
from .geometry import Geometry, fit_stream, fit_tensor, pi_resize, resample_table
from .limits import DEFAULT_LIMITS, Limits
from .patch_embed import AdaptivePatchEmbed
from .posemb import sincos_2d
from .simple_vit import checkpoint_filter_fn
from .vision_transformer import SimpleVisionTransformer

__version__ = '0.2.0'

__all__ = [
    'ViTVariantsError', 'SimpleVisionTransformer', 'SimpleViTConfig', 'MODELS', 'VARIANTS', 'architecture_for',
    'AdaptivePatchEmbed', 'Geometry', 'fit_tensor', 'fit_stream', 'pi_resize', 'resample_table', 'sincos_2d',
    'Limits', 'DEFAULT_LIMITS', 'checkpoint_filter_fn', '__version__',
]
