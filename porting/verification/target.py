"""The reference at the target geometry: its kernel and table resized by the source framework's own rule.

The resizes are the independent numpy transcriptions of ``rules`` (big_vision's PI-resize, scipy zoom,
FlexiViT's jax resize), timm's own ``resample_abs_pos_embed`` or DeiT's ``main.py`` one (``deit3_ref.deit_table``);
never ours.
"""
import torch

from timm_vit_variants.parts import SinCos

from .deit3_ref import deit_table
from .naflex_ref import classic_state
from .result import Check, NoReference
from .rules import bigvision_posemb_sincos_2d, flexi_pi_resize, resize_grid_table
from .timm_ref import PreLogitsHead, TimmReference, timm_equivalent

__all__ = ['RULE_NAMES', 'at_target']

RULE_NAMES = {'bigvision': "big_vision's scipy zoom", 'flexi': "FlexiViT's jax.image.resize",
              'timm': "timm's resample_abs_pos_embed", 'hf': "transformers' interpolate_pos_encoding",
              'deit': "DeiT's main.py table resize"}


def at_target(ref: TimmReference, check: Check) -> TimmReference:
    """``ref`` rebuilt as a timm ``VisionTransformer`` at ``check``'s target geometry, its learned table resized by
    ``check.rule`` (a pre-logits layer kept explicit)."""
    source, target, rule = check.source, check.target, check.rule
    state = classic_state(ref.model) if ref.naflex else dict(ref.model.state_dict())
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
        prefix = source.num_prefix_slots
        table = state['pos_embed'].detach()
        if rule in ('bigvision', 'flexi'):
            state['pos_embed'] = torch.from_numpy(resize_grid_table(table.numpy(), source_grid, target_grid, prefix,
                                                                    rule))
        elif rule == 'timm':
            from timm.layers import resample_abs_pos_embed

            state['pos_embed'] = resample_abs_pos_embed(table, list(target_grid), list(source_grid),
                                                        num_prefix_tokens=prefix)
        elif rule == 'deit':
            if target_grid[0] != target_grid[1]:
                raise NoReference(f"DeiT's main.py resizes the table to square grids only, and "
                                  f'{target_grid[0]}x{target_grid[1]} is not one')
            state['pos_embed'] = deit_table(table, target_grid[0], prefix)
        else:
            raise NoReference(f"the {rule!r} table resize has no reference outside transformers' own model")
    padded = target.replace(img_size=(target_grid[0] * target_patch[0], target_grid[1] * target_patch[1]))
    model = timm_equivalent(padded, num_classes=0 if head is not None else ref.model.num_classes)
    model.load_state_dict(state, strict=True, assign=True)
    patch = '' if source_patch == target_patch else "big_vision's PI-resize, "
    table = 'numpy big_vision sin-cos' if pos == 'sincos' else RULE_NAMES[rule]
    name = f'{ref.name} at the target geometry ({patch}{table}, independent numpy/timm code)'
    return TimmReference(model.eval(), name, head)

