"""The reference at the target geometry: its kernel and table resized by the source framework's own rule.

The kernel's is the independent numpy transcription of big_vision's PI-resize (``rules``); the table's is the rule's
own, as the family defining the rule names it (``TableRule`` in ``porting.families.registry``: an independent
transcription or the framework's own function); never ours.
"""
import torch

from timm_vit_variants.parts import Learned, SinCos

from ..families.registry import TABLE_RULES
from .result import Check, NoReference
from .rules import bigvision_posemb_sincos_2d, flexi_pi_resize
from .timm_ref import PreLogitsHead, TimmReference, timm_equivalent

__all__ = ['at_target']


def at_target(ref: TimmReference, check: Check) -> TimmReference:
    """``ref`` rebuilt as a timm ``VisionTransformer`` at ``check``'s target geometry, its learned table resized by
    ``check.rule`` (a pre-logits layer kept explicit)."""
    source, target, rule = check.source, check.target, check.rule
    state = ref.vit_state()
    head = ref.head
    if head is None and 'pre_logits.fc.weight' in state:  # our own folder, loaded through timm's local-dir:
        head = PreLogitsHead.pop_from(state)
    source_patch, target_patch = source.patch_size, target.patch_size
    if source_patch != target_patch:
        kernel = state['patch_embed.proj.weight'].detach().numpy()
        state['patch_embed.proj.weight'] = torch.from_numpy(flexi_pi_resize(kernel, *target_patch))
    source_grid, target_grid = source.grid_size, target.grid_size
    pos = source.flat_pos_embed
    if pos == 'sincos':
        state['pos_embed'] = torch.from_numpy(bigvision_posemb_sincos_2d(
            *target_grid, source.embed_dim, source.position(SinCos).temperature))
    elif pos == 'learn' and source_grid != target_grid:
        resize = getattr(TABLE_RULES.get(rule), 'resize', None)
        if resize is None:
            raise NoReference(f"the {rule!r} table resize has no reference outside transformers' own model")
        table, prefix = state['pos_embed'].detach(), source.num_prefix_slots
        if getattr(target.position(Learned), 'ar_preserving', False):  # the longer side's square, its top-left kept
            side = max(target_grid)
            square = resize(table, source_grid, (side, side), prefix)
            kept = square[:, prefix:].reshape(1, side, side, -1)[:, :target_grid[0], :target_grid[1]]
            state['pos_embed'] = torch.cat([square[:, :prefix], kept.reshape(1, -1, square.shape[-1])], dim=1)
        else:
            state['pos_embed'] = resize(table, source_grid, target_grid, prefix)
    padded = target.replace(img_size=(target_grid[0] * target_patch[0], target_grid[1] * target_patch[1]))
    model = timm_equivalent(padded, num_classes=0 if head is not None else ref.model.num_classes)
    model.load_state_dict(state, strict=True, assign=True)
    patch = '' if source_patch == target_patch else "big_vision's PI-resize, "
    table = 'numpy big_vision sin-cos' if pos == 'sincos' else \
        getattr(TABLE_RULES.get(rule), 'what', f'the {rule!r} rule')
    name = f'{ref.name} at the target geometry ({patch}{table}, independent numpy/timm code)'
    return TimmReference(model.eval(), name, head)

