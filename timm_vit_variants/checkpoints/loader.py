"""Stream a checkpoint into an existing SimpleVisionTransformer, adapting what timm would adapt.

Adaptations go through ``geometry.fit_stream``: the patch kernel is PI-resized to the model's patch
size and its input channels adapted as timm's ``adapt_input_conv`` does, a learned table is
resampled to the model's grid with the *source* ecosystem's rule (cls slot added or folded), and
the classifier is left as initialised when the class count differs (timm semantics). Everything
else must match; every shape is checked before any weight is copied, and tensors that need no
adapting are filled straight into the model's parameters.
"""
import os
import warnings
from dataclasses import replace
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.nn as nn

from ..config import HEAD_KEYS
from ..errors import ViTVariantsError
from ..geometry import Geometry, check_fit, fit_stream
from ..relpos_resize import table_rows
from ..limits import DEFAULT_LIMITS, Limits
from .detect import open_checkpoint
from .files import CONFIG_FILE
from .source import LayoutFn, SourceCheckpoint

__all__ = ['load_into_model', 'check_folder']


def _fitted_shape(key: str, shape: Tuple[int, ...], src: Geometry, dst: Geometry) -> Tuple[int, ...]:
    if key == dst.kernel_key:
        return (shape[0], dst.in_chans, *(dst.patch if src.patch != dst.patch else shape[2:]))
    if key == 'pos_embed':
        return (1, dst.prefix + dst.grid[0] * dst.grid[1], shape[-1])
    if key == 'rel_pos.tables':
        return (shape[0], table_rows(dst.grid), shape[-1])
    return shape


def _check(model: nn.Module, ckpt: SourceCheckpoint, dst: Geometry, skip_head: bool) -> None:
    """Every shape and setting checked before anything is copied."""
    targets = {k: tuple(v.shape) for k, v in model.state_dict().items()}

    def mismatch(reason: str, key: str, src=None, want=None) -> ViTVariantsError:
        return ViTVariantsError(reason, path=ckpt.path, key=key,
                                shapes=(src, want) if src is not None and want is not None else None)

    cfg = ckpt.config
    check_fit(ckpt.geometry, dst)
    if cfg.flat_pos_embed != model.config.flat_pos_embed:
        raise mismatch(f"the checkpoint's position embedding is {cfg.flat_pos_embed!r}, the model's is "
                       f'{model.config.flat_pos_embed!r}', 'pos_embed', ckpt.tensor_shapes.get('pos_embed'),
                       targets.get('pos_embed'))
    for key, shape in ckpt.tensor_shapes.items():
        if skip_head and key in HEAD_KEYS:
            continue
        if key not in targets:
            raise mismatch('the checkpoint has this tensor but the model does not', key, shape, ())
        fitted = _fitted_shape(key, shape, ckpt.geometry, dst) if ckpt.geometry.changes(dst) else shape
        if fitted != targets[key]:
            raise mismatch('shape differs between checkpoint and model', key, fitted, targets[key])
    missing = [k for k in targets if k not in ckpt.tensor_shapes and not (skip_head and k in HEAD_KEYS)]
    if missing:
        raise mismatch(f'the model needs {len(missing)} tensor(s) the checkpoint does not have', missing[0])
    # Settings without tensors: the caller chose the model, so differences are reported, not fatal; one the
    # source does not record (only assumed, e.g. a lone OpenCLIP file's activation) is the model's to decide.
    notes = [f'{label} {theirs!r} (model: {ours!r})' for label, field, theirs, ours in (
        ('LayerNorm eps', 'norm_eps', cfg.block.norm_eps, model.config.block.norm_eps),
        ('activation', 'act_layer', cfg.block.act, model.config.block.act),
        ('pooling', 'global_pool', cfg.head.pool.kind, model.config.head.pool.kind))
        if theirs != ours and field not in ckpt.assumed]
    if notes:
        warnings.warn(f'{ckpt.path}: the checkpoint was trained with ' + ', '.join(notes)
                      + '; outputs will differ from the source network', stacklevel=3)


def load_into_model(
        model: nn.Module,
        path: 'str | os.PathLike',
        prefix: str = '',
        fmt: Optional[str] = None,
        resample_like: Optional[str] = None,
        limits: Limits = DEFAULT_LIMITS,
        **hints: Any,
) -> None:
    """Load a big_vision/vit_jax/timm/transformers checkpoint (or our own Hub folder) into ``model``.

    ``limits`` bound what the file may claim. ``hints`` describe the *source* (see ``checkpoints.HINTS``), e.g. ``img_size`` for a
    non-square learned table. A learned table that needs another grid is resampled with
    ``resample_like`` (a rule of ``geometry.RESAMPLE_RULES``), by default the source ecosystem's.
    Tensors are streamed one at a time; nothing is copied unless the whole checkpoint fits.
    """
    hints.setdefault('num_heads', model.config.num_heads)  # bare timm state dicts do not record it
    with open_checkpoint(path, fmt, layout=type(model).state_layout, limits=limits, prefix=prefix or None,
                         **hints) as ckpt:
        src = ckpt.geometry
        dst = replace(Geometry.of(model.config), rule=resample_like or src.rule)
        skip_head = not isinstance(model.head, nn.Linear) or model.num_classes != ckpt.config.num_classes
        _check(model, ckpt, dst, skip_head)
        targets: Dict[str, torch.Tensor] = model.state_dict()
        fitted = set(dst.fitted_keys) if src.changes(dst) else set()
        pending: List[Tuple[str, torch.Tensor]] = []
        with torch.no_grad():
            for item, keep in ckpt.walk():
                if skip_head and item.key in HEAD_KEYS:
                    continue
                if item.key in fitted:
                    pending.append((item.key, ckpt.fill(item, torch.empty(item.shape), keep)))
                else:
                    ckpt.fill(item, targets[item.key], keep)
            for key, tensor in fit_stream(pending, src, dst):
                targets[key].copy_(tensor)


def check_folder(folder: str, layout: LayoutFn, limits: Limits = DEFAULT_LIMITS) -> None:
    """Refuse a folder whose ``config.json`` does not describe its own tensors, before a model is built from it.

    Opening the folder reads ``config.json`` (bounded), builds its config (unknown fields and bad values refused)
    and lays that config's tensors out against the weight files' headers (shapes only, no tensor is read). A
    contradiction (depth, width, class count) is one error naming ``config.json`` and the first key that differs.
    """
    try:
        open_checkpoint(folder, layout=layout, limits=limits).close()
    except ViTVariantsError as e:
        config = os.path.join(folder, CONFIG_FILE)
        if not (e.key and e.path) or e.needs or e.path == config:  # a config.json error, a limit, a file unreadable as such
            raise
        weights = os.path.relpath(e.path, folder) if e.path != folder else 'the folder'
        raise ViTVariantsError(f'model_args do not describe the weights ({weights}): {e.reason}',
                               path=config, key=e.key, shapes=e.shapes) from None
