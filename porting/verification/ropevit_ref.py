"""The RoPE-ViT reference: the naver ``{'model': ...}`` file through timm's own loading (``eva.checkpoint_filter_fn``)
into timm's ``Eva`` built as its ``vit_*_patch16_rope*_224`` entries build it, at the grid checked.

Two things are done by hand, because timm does not: the mixed files' learned ``freqs`` (2, depth, heads * hd / 2)
become timm's ``rope.freqs`` (2, depth, heads, hd / 2), and their ``freqs_t_x``/``freqs_t_y`` (the training grid)
are dropped; an ``_ape`` table is resized to the grid checked with RoPE-ViT's own ``forward_features`` expression
(bicubic, no antialias; timm antialiases) and handed to timm at that size. The check shares with the converter
the reading of the ``freqs`` layout (heads contiguous along the last axis) and of the table's resize.
"""
from typing import Any, Dict, Optional, Tuple

import torch
import torch.nn.functional as F

from .dinov3_ref import eva_model, load_eva
from .result import NoReference, Outputs
from .timm_ref import grid, pair

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


def ropevit_outputs(path: str, model_args: Dict[str, Any], x: torch.Tensor,
                    target: Optional[Tuple[Dict[str, Any], str]] = None) -> Outputs:
    """The naver file run by timm at the source geometry, or at the target one with RoPE-ViT's own table resize."""
    from timm.models.eva import checkpoint_filter_fn

    args = model_args
    if target is not None:
        args = target[0]
        if pair(args['patch_size']) != pair(model_args['patch_size']):
            raise NoReference('RoPE-ViT has no rule for a patch-size change')
        if model_args.get('pos_embed') == 'learn+rope' and target[1] != 'ropevit':
            raise NoReference(f"the table was resized with the {target[1]!r} rule, not RoPE-ViT's own")
    rows, cols = grid(args)
    state = torch.load(path, map_location='cpu', weights_only=True, mmap=True)
    state = state.get('model', state) if isinstance(state, dict) else state
    if not isinstance(state, dict):
        raise NoReference('the file is not a state dict')
    state = dict(state)
    mixed, ape = model_args.get('rope_type') == 'mixed', 'pos_embed' in state
    table = ropevit_table(state.pop('pos_embed'), rows, cols) if ape else None
    freqs = state.pop('freqs', None)
    for name in ('freqs_t_x', 'freqs_t_y'):
        state.pop(name, None)
    model = eva_model(model_args, rows, cols, attn_type='rope', class_token=True, no_embed_class=True,
                      use_abs_pos_emb=ape, rope=dict(rope_type='mixed' if mixed else 'cat', rope_grid_indexing='xy',
                                                     rope_temperature=model_args.get('rope_theta', 100.)))
    state = checkpoint_filter_fn(state, model)
    if table is not None:
        state['pos_embed'] = table
    if mixed:
        if freqs is None:
            raise NoReference('a mixed RoPE-ViT file without freqs')
        state['rope.freqs'] = freqs.reshape(model.rope.freqs.shape)
    model = load_eva(model, state)
    x = x[..., :rows * pair(args['patch_size'])[0], :cols * pair(args['patch_size'])[1]]
    with torch.no_grad():
        feats = model.forward_features(x)
        logits = model.forward_head(feats)
    name = ("timm Eva (vit_*_patch16_rope*_224 blocks) + timm's eva checkpoint_filter_fn" +
            (', freqs reshaped to rope.freqs by hand' if mixed else '') +
            (", the table resized as RoPE-ViT's forward_features (bicubic, no antialias, transcribed)" if ape else '') +
            (' (shared with the converter: ' + ', '.join(
                (['the freqs layout'] if mixed else []) + (["RoPE-ViT's table resize"] if ape else [])) + ')'
             if mixed or ape else ''))
    return Outputs(feats, logits, name)
