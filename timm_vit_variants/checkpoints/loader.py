"""Stream a checkpoint into an existing SimpleVisionTransformer, adapting what timm would adapt.

Adaptations: the patch kernel is PI-resized to the model's patch size (FlexiViT), a learned
table is resampled to the model's grid with the *source* ecosystem's rule (cls slot kept),
and the classifier is left as initialised when the class count differs (timm semantics).
Everything else must match; all checks run on shapes before any weight is copied.
"""
import os
import warnings
from typing import Any, Callable, Dict, Optional

import torch
import torch.nn as nn

from ..errors import ViTVariantsError
from ..patch_embed import pi_resize_patch_kernel
from ..posemb import resample_pos_embed
from .source import SourceCheckpoint, as_is
from .timm_format import activation_name

__all__ = ['load_into_model']

_HEAD_KEYS = ('head.weight', 'head.bias')
Adapter = Optional[Callable[[torch.Tensor], torch.Tensor]]


def _plan_fit(model: nn.Module, ckpt: SourceCheckpoint) -> Dict[str, Adapter]:
    """For every checkpoint tensor: how to adapt it, or None to skip it. Raises on any mismatch."""
    args = ckpt.model_args
    shapes = ckpt.tensor_shapes
    targets = {k: tuple(v.shape) for k, v in model.state_dict().items()}

    def mismatch(reason: str, key: str, src=None, dst=None) -> ViTVariantsError:
        return ViTVariantsError(reason, path=ckpt.path, key=key,
                                shapes=(src, dst) if src is not None and dst is not None else None)

    if args['pos_embed'] != model.pos_embed_type:
        raise mismatch(f"the checkpoint's position embedding is {args['pos_embed']!r}, the model's is "
                       f'{model.pos_embed_type!r}', 'pos_embed', shapes.get('pos_embed'), targets.get('pos_embed'))
    model_heads = model.blocks[0].attn.num_heads if len(model.blocks) else args['num_heads']
    if model_heads != args['num_heads']:
        raise mismatch(f"the checkpoint has {args['num_heads']} attention heads, the model {model_heads}",
                       'blocks.0.attn.qkv.weight', shapes.get('blocks.0.attn.qkv.weight'),
                       targets.get('blocks.0.attn.qkv.weight'))
    skip_head = not isinstance(model.head, nn.Linear) or model.num_classes != args['num_classes']

    plan: Dict[str, Adapter] = {}
    for key, src in shapes.items():
        if key in _HEAD_KEYS and skip_head:
            plan[key] = None
            continue
        if key not in targets:
            raise mismatch('the checkpoint has this tensor but the model does not', key, src, ())
        dst = targets[key]
        adapter: Adapter = None
        if key == 'patch_embed.proj.weight':
            if src[:2] != dst[:2]:
                raise mismatch('patch embedding width or input channels differ', key, src, dst)
            if src[2:] != dst[2:]:
                patch = tuple(dst[2:])
                adapter = lambda t, patch=patch: pi_resize_patch_kernel(t, patch)  # noqa: E731
                src = dst
        elif key == 'pos_embed' and src != dst:
            slot = 1 if args['pos_embed_cls_slot'] else 0
            if bool(slot) != bool(model.pos_embed_cls_slot) or src[-1] != dst[-1] or ckpt.grid is None:
                raise mismatch(f"position table does not fit (checkpoint cls slot: {bool(slot)}, model: "
                               f'{bool(model.pos_embed_cls_slot)})', key, src, dst)
            new_grid, old_grid = tuple(model.patch_embed.grid_size), tuple(ckpt.grid)
            rule = args['pos_embed_resample']
            adapter = lambda t, g=new_grid, o=old_grid, s=slot, r=rule: resample_pos_embed(t, g, o, s, r)  # noqa: E731
            src = (1, slot + new_grid[0] * new_grid[1], src[-1])
        if tuple(src) != dst:
            raise mismatch('shape differs between checkpoint and model', key, src, dst)
        plan[key] = adapter if adapter is not None else as_is
    missing = [k for k in targets if k not in shapes and not (skip_head and k in _HEAD_KEYS)]
    if missing:
        raise mismatch(f'the model needs {len(missing)} tensor(s) the checkpoint does not have', missing[0],
                       None, None)

    # Settings without tensors: the caller chose the model, so differences are reported, not fatal.
    notes = []
    if abs(model.norm.eps - args['norm_eps']) > 1e-15 * max(1.0, args['norm_eps']):
        notes.append(f"LayerNorm eps {args['norm_eps']} (model: {model.norm.eps})")
    if len(model.blocks):
        try:
            act = activation_name(model.blocks[0].mlp.act)
        except ValueError:
            act = type(model.blocks[0].mlp.act).__name__
        if act != args['act_layer']:
            notes.append(f"activation {args['act_layer']!r} (model: {act!r})")
    if model.global_pool != args['global_pool']:
        notes.append(f"pooling {args['global_pool']!r} (model: {model.global_pool!r})")
    if notes:
        warnings.warn(f'{ckpt.path}: the checkpoint was trained with ' + ', '.join(notes)
                      + '; outputs will differ from the source network', stacklevel=3)
    return plan


def load_into_model(
        model: nn.Module,
        path: 'str | os.PathLike',
        prefix: str = '',
        fmt: Optional[str] = None,
        **hints: Any,
) -> None:
    """Load a big_vision/vit_jax/timm/transformers checkpoint (or our own Hub folder) into ``model``.

    ``hints`` describe the *source* (see ``checkpoints.HINTS``), e.g. ``img_size`` for a
    non-square learned table. Tensors are streamed one at a time; nothing is copied
    unless the whole checkpoint fits.
    """
    from . import detect_format, open_checkpoint  # the package entry points; imported late to avoid a cycle

    fmt = fmt or detect_format(path)
    if fmt == 'timm' and len(model.blocks) and 'num_heads' not in hints:
        hints['num_heads'] = model.blocks[0].attn.num_heads  # bare timm state dicts do not record it
    with open_checkpoint(path, fmt, prefix=prefix or None, **hints) as ckpt:
        plan = _plan_fit(model, ckpt)
        targets = model.state_dict()
        with torch.no_grad():
            for key, tensor in ckpt.iter_tensors():
                adapter = plan[key]
                if adapter is None:
                    continue
                targets[key].copy_(adapter(tensor))
