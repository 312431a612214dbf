"""Probes of a model's public modules for tests: what the embedding step hands to the blocks, whether a list of
images gives each image's tokens as it gives alone, a source read straight into a model, and a converted folder
loaded the way the README tells users."""
import os
from typing import Sequence, Tuple, Union

import timm
import torch

import timm_vit_variants  # noqa: F401  registers simple_vit_* with timm


def read_into_model(path: Union[str, os.PathLike], **hints) -> torch.nn.Module:
    """A source read by our reader straight into a model of its inferred config (no conversion, no folder)."""
    from timm_vit_variants import SimpleVisionTransformer
    from timm_vit_variants.checkpoints import open_checkpoint

    with open_checkpoint(path, layout=SimpleVisionTransformer.state_layout, **hints) as src:
        model = SimpleVisionTransformer(src.config.replace(weight_init='skip')).eval()
        model.load_state_dict(src.state_dict())
    return model


def load_like_user(folder: Union[str, os.PathLike]) -> torch.nn.Module:
    """A converted folder as a user gets it: ``timm.create_model('local-dir:FOLDER', pretrained=True)``, no kwargs."""
    return timm.create_model(f'local-dir:{os.fspath(folder)}', pretrained=True).eval()


def embedded(model: torch.nn.Module, x: torch.Tensor) -> Tuple[torch.Tensor, int, int]:
    """The tokens the first block receives (the output of ``norm_pre``) and the token grid, for an NCHW batch."""
    seen = []
    handle = model.norm_pre.register_forward_hook(lambda module, args, out: seen.append(out))
    try:
        model.forward_intermediates(x, indices=[0], stop_early=True, intermediates_only=True)
    finally:
        handle.remove()
    grid_h, grid_w = model.patch_embed(x).shape[1:3]
    return seen[0], grid_h, grid_w


def assert_list_equals_each_alone(model: torch.nn.Module, images: Sequence[torch.Tensor], prefix: int) -> None:
    """Packing: ``forward_features`` of a list of (C, H, W) images of different sizes gives each image's tokens
    (``prefix`` of them before the patches: [CLS] and registers) as it gives alone, to 1e-5."""
    with torch.no_grad():
        laid = model.forward_features(list(images))
        for i, image in enumerate(images):
            alone = model.forward_features(image[None])[0]
            count = alone.shape[0] - prefix
            assert laid['patch_valid'][i].sum() == count
            torch.testing.assert_close(laid['patches'][i, :prefix + count], alone, rtol=0, atol=1e-5)


def weight_decay_of(model: torch.nn.Module, parameter: torch.nn.Parameter) -> float:
    """The weight decay timm's optimizer factory (``create_optimizer_v2``, which reads ``no_weight_decay``) gives
    ``parameter`` of ``model`` at a decay of 0.05."""
    from timm.optim import create_optimizer_v2
    optimizer = create_optimizer_v2(model, 'adamw', lr=1e-3, weight_decay=0.05)
    return next(g['weight_decay'] for g in optimizer.param_groups for p in g['params'] if p is parameter)
