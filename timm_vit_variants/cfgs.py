"""The timm ``pretrained_cfg`` defaults of this package's models (big_vision's preprocessing: pixels in [-1, 1],
bilinear, crop 0.875), which a family's published tags and every untrained tag start from."""
from typing import Any, Dict

__all__ = ['pretrained_cfg']


def pretrained_cfg(url: str = '', **kwargs: Any) -> Dict[str, Any]:
    """A pretrained cfg: these defaults with ``kwargs`` on top."""
    return {
        'url': url,
        'num_classes': 1000,
        'input_size': (3, 224, 224),
        'pool_size': None,
        'crop_pct': 0.875,
        'interpolation': 'bilinear',
        'fixed_input_size': False,
        'mean': (0.5, 0.5, 0.5),
        'std': (0.5, 0.5, 0.5),
        'first_conv': 'patch_embed.proj',
        'classifier': 'head',
        'license': 'apache-2.0',
        **kwargs,
    }
