"""Fill a model from a tensor stream, and rebuild a model from a converted Hub folder.

Both copy tensor by tensor into an already-allocated model (a folder is read straight into the
parameters' storage), so loading never holds a second copy of the weights. Unlike timm's ``local-dir:`` loader (which only reads
``model.safetensors``), ``load_folder`` also reads sharded folders.
"""
from pathlib import Path
from typing import Any, Dict, Iterable, Optional, Tuple, Union

import torch

import timm_vit_variants  # noqa: F401  (registers simple_vit_* with timm)
from timm_vit_variants import SimpleVisionTransformer
from timm_vit_variants.errors import ViTVariantsError

from .hub_config import read_config
from .shards import read_folder_into

__all__ = ['build_empty', 'fill_model', 'load_folder']


def build_empty(model_args: Dict[str, Any], architecture: Optional[str] = None) -> SimpleVisionTransformer:
    """An uninitialised model (``weight_init='skip'``) to be filled from a checkpoint."""
    import timm

    args = dict(model_args, weight_init='skip')
    try:
        if architecture:
            return timm.create_model(architecture, **args)
        return SimpleVisionTransformer(**args)
    except (TypeError, ValueError) as e:
        if isinstance(e, ViTVariantsError):
            raise
        raise ViTVariantsError(f'cannot build the model from its arguments: {e}') from None


def fill_model(
        model: torch.nn.Module,
        stream: Iterable[Tuple[str, torch.Tensor]],
        source_path: Union[str, Path],
) -> None:
    """Copy every (name, tensor) into the model's state; all keys must be covered exactly once."""
    targets = model.state_dict()
    missing = set(targets)
    for name, tensor in stream:
        target = targets.get(name)
        if target is None:
            raise ViTVariantsError('checkpoint tensor has no place in the model', path=str(source_path), key=name)
        if tuple(tensor.shape) != tuple(target.shape):
            raise ViTVariantsError('checkpoint tensor does not fit the model', path=str(source_path), key=name,
                                   shapes=(tensor.shape, target.shape))
        with torch.no_grad():
            target.copy_(tensor)
        missing.discard(name)
    if missing:
        raise ViTVariantsError(f'checkpoint lacks {len(missing)} tensor(s): {sorted(missing)[:5]}',
                               path=str(source_path))


def load_folder(folder: Union[str, Path]) -> SimpleVisionTransformer:
    """The model saved in a converted folder (single-file or sharded safetensors), in eval mode."""
    cfg = read_config(folder)
    model = build_empty(cfg.get('model_args', {}), cfg['architecture'])
    read_folder_into(folder, model.state_dict())
    return model.eval()
