"""The DeiT-III reference: the ``{'model': ...}`` file through timm's port of DeiT-III (timm 1.0.31 ``deit.py``: a
``deit3_*`` entry, timm's ``VisionTransformer`` with ``no_embed_class=True`` and LayerScale) and the checkpoint filter
timm's ``_create_deit`` loads it with (``checkpoint_filter_fn(..., adapt_layer_scale=True)``: ``gamma_1`` becomes
``ls1.gamma``), built at the grid checked.

At another grid the table is resized as DeiT's own ``main.py`` does on ``--finetune`` (transcribed in ``deit_table``:
bicubic, ``align_corners=False``, no antialias, the prefix rows kept) and handed to timm at that size, since timm's
filter would resize it by timm's rule (antialiased). DeiT's rule knows square grids only (``new_size =
int(num_patches ** 0.5)``), so another target has no reference. The check shares with the converter the reading of
the architecture (DeiT-III rather than RoPE-ViT, named in the pass line) and the table resize.
"""
from functools import partial
from pathlib import Path
from typing import Dict, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from .hf_ref import forward_seen, hf_config, hf_model_type, load, transformers_at
from .result import Check, NoReference, Outputs
from .timm_ref import timm_weights

__all__ = ['deit_table', 'deit_resize', 'deit3_outputs', 'is_hf_deit', 'hf_deit_outputs']

_ENTRY = 'deit3_base_patch16_224'  # every deit3_* entry is the same network but for the dimensions passed here


def deit_table(table: torch.Tensor, side: int, prefix: int = 0) -> torch.Tensor:
    """DeiT ``main.py``'s resize of a (1, prefix + M*M, D) table to side x side, in float32: the ``prefix`` rows kept,
    the grid bicubic with ``align_corners=False`` and no antialias (it runs even at the same size)."""
    count, dim = table.shape[1] - prefix, table.shape[2]
    old = int(count ** 0.5)
    if old * old != count:
        raise NoReference(f"DeiT's main.py resizes only a square table; this one has {count} grid rows")
    grid = table[:, prefix:].float().reshape(-1, old, old, dim).permute(0, 3, 1, 2)
    grid = F.interpolate(grid, size=(side, side), mode='bicubic', align_corners=False)
    return torch.cat((table[:, :prefix].float(), grid.permute(0, 2, 3, 1).flatten(1, 2)), dim=1).to(table.dtype)


def deit_resize(table: torch.Tensor, source_grid: Tuple[int, int], target_grid: Tuple[int, int],
                prefix: int) -> torch.Tensor:
    """DeiT ``main.py``'s table resize (``deit_table``) to a square ``target_grid``, the only kind it knows."""
    if target_grid[0] != target_grid[1]:
        raise NoReference(f"DeiT's main.py resizes the table to square grids only, and "
                          f'{target_grid[0]}x{target_grid[1]} is not one')
    return deit_table(table, target_grid[0], prefix)


def deit3_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """The DeiT-III file run by timm's port at the source geometry, or at a square target one with DeiT's own table
    resize (DeiT-III takes no NaFlex batch: ``mixed`` is not run)."""
    import timm
    from timm.models.deit import checkpoint_filter_fn

    source, runs_at = check.source, check.runs_at
    check.require_own_resize('DeiT', 'deit', owner="DeiT's main.py")
    rows, cols = runs_at.grid_size
    if check.target is not None and rows != cols:
        raise NoReference(f"DeiT's main.py resizes the table to square grids only, and {rows}x{cols} is not one")
    path = Path(check.path)
    if path.is_dir():
        raise NoReference('a DeiT-III checkpoint is one file; this is a folder')
    state = dict(timm_weights(path, check.weights_key))  # {'model': ...}'s entry, as the converter read it
    if 'pos_embed' not in state:
        raise NoReference('the file has no pos_embed')
    table = state['pos_embed'] if check.target is None else deit_table(state['pos_embed'], rows)
    (ph, pw), dim = runs_at.patch_size, source.embed_dim
    with torch.device('meta'):
        model = timm.create_model(
            _ENTRY, pretrained=False, img_size=(rows * ph, cols * pw), patch_size=(ph, pw), in_chans=source.in_chans,
            num_classes=source.num_classes, embed_dim=dim, depth=source.depth, num_heads=source.num_heads,
            mlp_ratio=(source.block.mlp_dim + 0.5) / dim, qkv_bias=source.block.qkv_bias, act_layer=source.block.act,
            norm_layer=partial(nn.LayerNorm, eps=source.block.norm_eps))
    state = checkpoint_filter_fn(state, model, adapt_layer_scale=True)
    state['pos_embed'] = table
    model.load_state_dict(state, strict=True, assign=True)
    if any(p.dtype != torch.float32 for p in model.parameters()):
        model = model.float()
    model.eval()
    x = x[..., :rows * ph, :cols * pw]
    with torch.no_grad():
        feats = model.forward_features(x)
        logits = model.forward_head(feats)
    name = (f"timm's port of DeiT-III ({_ENTRY}-style VisionTransformer, no_embed_class) + timm's deit "
            'checkpoint_filter_fn(adapt_layer_scale=True)')
    if check.target is not None:
        name += (", the table resized as DeiT's main.py (bicubic, no antialias, transcribed; shared with the "
                 'converter: the table resize)')
    return Outputs(feats, logits, name)


def is_hf_deit(check: Check) -> bool:
    """Whether the source is a transformers DeiT folder."""
    return hf_model_type(check) == 'deit'


def hf_deit_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """A DeiT folder's class: the normed tokens, and ``DeiTForImageClassificationWithTeacher``'s logits (the mean of
    its two classifiers), ``DeiTForImageClassification``'s (its classifier on [CLS]) or a ``DeiTModel``'s pooler
    output (Linear + tanh on [CLS])."""
    transformers = transformers_at(check, 'hf')
    folder, cfg = hf_config(check)
    resize = check.target is not None
    model, name = load(transformers, folder, cfg, 'DeiTModel')
    name += ' with interpolate_pos_encoding' if resize else ''
    if type(model).__name__ == 'DeiTModel':
        with torch.no_grad():
            out = model(pixel_values=x, interpolate_pos_encoding=resize)
        # transformers builds a pooler even for a folder saved without one (random weights): compared only when
        # the folder holds it, read as our pre-logits layer
        pooled = out.pooler_output if check.source.head.rep_size else None
        return Outputs(out.last_hidden_state, pooled,
                       name + (' (pooler_output: Linear + tanh on [CLS])' if pooled is not None else ''))
    out, seen = forward_seen(lambda: model(pixel_values=x, interpolate_pos_encoding=resize), {'tower': model.deit})
    return Outputs(seen['tower'][1].last_hidden_state, out.logits, name)
