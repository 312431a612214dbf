"""The RoPE-ViT reference: the naver ``{'model': ...}`` file through timm's own loading (``eva.checkpoint_filter_fn``)
into timm's ``Eva`` built as its ``vit_*_patch16_rope*_224`` entries build it, at the grid checked.

Two things are done by hand, because timm does not: the mixed files' learned ``freqs`` (2, depth, heads * hd / 2)
become timm's ``rope.freqs`` (2, depth, heads, hd / 2), and their ``freqs_t_x``/``freqs_t_y`` (the training grid)
are dropped; an ``_ape`` table is resized to the grid checked with RoPE-ViT's own ``forward_features`` expression
(bicubic, no antialias; timm antialiases) and handed to timm at that size. The check shares with the converter
the reading of the ``freqs`` layout (heads contiguous along the last axis) and of the table's resize.
"""
from typing import Dict, Optional

import torch
import torch.nn.functional as F

from timm_vit_variants.checkpoints.pickle_store import read_weights
from timm_vit_variants.parts import Rope

from .dinov3_ref import eva_model, load_eva
from .result import Check, NoReference, Outputs

__all__ = ['ropevit_outputs', 'ropevit_table']


def ropevit_table(table: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """RoPE-ViT's resize of a (1, M*M, D) table with no [CLS] slot to rows x cols, in float32 (bicubic,
    ``align_corners=False``, no antialias), as its ``forward_features`` writes it; the stored table at its own grid."""
    count, dim = table.shape[1], table.shape[2]
    side = int(count ** 0.5)
    if side * side != count:
        raise NoReference(f'RoPE-ViT resizes only a square table; this one has {count} rows')
    if (rows, cols) == (side, side):
        return table
    grid_ = table.float().view(1, side, side, dim).permute(0, 3, 1, 2)
    grid_ = F.interpolate(grid_, size=(rows, cols), mode='bicubic', align_corners=False)
    return grid_.permute(0, 2, 3, 1).reshape(1, rows * cols, dim).to(table.dtype)


def ropevit_outputs(check: Check, x: torch.Tensor, mixed: Optional[Dict[str, torch.Tensor]] = None) -> Outputs:
    """The naver file run by timm at the source geometry, or at the target one with RoPE-ViT's own table resize (a
    RoPE-ViT model takes no NaFlex batch: ``mixed`` is not run)."""
    from timm.models.eva import checkpoint_filter_fn

    source, runs_at = check.source, check.runs_at
    check.require_own_resize('RoPE-ViT', 'ropevit' if source.flat_pos_embed == 'learn+rope' else None)
    rows, cols = runs_at.grid_size
    state = dict(read_weights(check.path, check.weights_key))  # RoPE-ViT's {'model': ...}, as the converter read it
    learned, ape = source.position(Rope).kind == 'mixed', 'pos_embed' in state
    table = ropevit_table(state.pop('pos_embed'), rows, cols) if ape else None
    freqs = state.pop('freqs', None)
    for name in ('freqs_t_x', 'freqs_t_y'):
        state.pop(name, None)
    model = eva_model(source, rows, cols, attn_type='rope', class_token=True, no_embed_class=True,
                      use_abs_pos_emb=ape)
    state = checkpoint_filter_fn(state, model)
    if table is not None:
        state['pos_embed'] = table
    if learned:
        if freqs is None:
            raise NoReference('a mixed RoPE-ViT file without freqs')
        state['rope.freqs'] = freqs.reshape(model.rope.freqs.shape)
    model = load_eva(model, state)
    x = x[..., :rows * runs_at.patch_size[0], :cols * runs_at.patch_size[1]]
    with torch.no_grad():
        feats = model.forward_features(x)
        logits = model.forward_head(feats)
    name = ("timm Eva (vit_*_patch16_rope*_224 blocks) + timm's eva checkpoint_filter_fn" +
            (', freqs reshaped to rope.freqs by hand' if learned else '') +
            (", the table resized as RoPE-ViT's forward_features (bicubic, no antialias, transcribed)" if ape else '') +
            (' (shared with the converter: ' + ', '.join(
                (['the freqs layout'] if learned else []) + (["RoPE-ViT's table resize"] if ape else [])) + ')'
             if learned or ape else ''))
    return Outputs(feats, logits, name)
