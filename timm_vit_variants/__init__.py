"""timm plugin: the ``simple_vit_*`` plain-ViT family. Importing registers the models with timm."""
from .errors import ViTVariantsError
from .posemb import resample_pos_embed, sincos_2d
from .patch_embed import AdaptivePatchEmbed, pi_resize_patch_kernel
from .vision_transformer import SimpleVisionTransformer
from . import simple_vit as _registry  # noqa: F401  (registers the entrypoints)
from .simple_vit import VARIANT_DIMS, checkpoint_filter_fn

__version__ = '0.1.0'

__all__ = [
    'ViTVariantsError', 'SimpleVisionTransformer', 'AdaptivePatchEmbed', 'sincos_2d', 'resample_pos_embed',
    'pi_resize_patch_kernel', 'checkpoint_filter_fn', 'VARIANT_DIMS', '__version__',
]
