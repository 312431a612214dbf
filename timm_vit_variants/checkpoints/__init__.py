"""Checkpoint readers: big_vision and vit_jax ``.npz``, timm files/Hub folders, transformers ViT folders.

``open_checkpoint`` gives a ``SourceCheckpoint``: the ``SimpleViTConfig`` the source describes
plus its tensors in our layout, filled one at a time; ``load_into_model`` fits one into an
existing SimpleVisionTransformer.
"""
from .detect import FORMATS, detect_format, open_checkpoint
from .options import HINTS, ReaderOptions
from .loader import check_folder, load_into_model
from .source import PlanItem, SourceCheckpoint

__all__ = ['FORMATS', 'HINTS', 'ReaderOptions', 'SourceCheckpoint', 'PlanItem', 'detect_format', 'open_checkpoint', 'load_into_model',
           'check_folder']
