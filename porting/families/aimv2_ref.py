"""AIMv2 references: the sources' own libraries run on a checkpoint, for the converter's check.

- timm: its ``aimv2_*`` entry (``timm.create_model``, sized to the file) loads the file through timm's own
  ``checkpoint_filter_fn`` (which reads Apple's layout itself, ``_convert_aimv2``), and runs at any grid with
  ``dynamic_img_size`` (timm resamples the learned table bicubically). timm keeps no attention-pool head: its
  outputs are the final-normed tokens.
- transformers: ``Aimv2VisionModel.from_pretrained`` on the folder; its learned table covers the nominal grid only
  (transformers adds it as is), the native towers' sin-cos any grid. Outputs: ``last_hidden_state`` and, with the
  head, ``pooler_output``.

Each function imports torch and its library when called: the families registry imports this module to discover
families, which must stay free of torch (the CLI's ``--help``).
"""
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Tuple, Union

if TYPE_CHECKING:
    import torch

__all__ = ['timm_aimv2', 'timm_aimv2_outputs', 'hf_aimv2_outputs', 'aimv2_outputs', 'TIMM_AIMV2_ENTRY']

# The timm entry every AIMv2 reference is built from; sizes come from the file, so one entry serves all.
TIMM_AIMV2_ENTRY = 'aimv2_large_patch14_224'


def timm_aimv2(embed_dim: int, depth: int, num_heads: int, mlp_dim: int, patch_size: int,
               img_size: Tuple[int, int], in_chans: int = 3) -> 'torch.nn.Module':
    """timm's ``aimv2_*`` network at these sizes (its entry's RMSNorm, SwiGLU, biases and table), at nominal
    ``img_size``, taking any other whole-patch size; random weights, eval mode."""
    import timm

    # timm sizes the MLP as int(D * ratio): half a unit more lands on the exact width
    return timm.create_model(
        TIMM_AIMV2_ENTRY, pretrained=False, num_classes=0, embed_dim=embed_dim, depth=depth, num_heads=num_heads,
        mlp_ratio=(mlp_dim + 0.5) / embed_dim, patch_size=patch_size, img_size=img_size, in_chans=in_chans,
        dynamic_img_size=True).eval()


def timm_aimv2_outputs(state: Mapping[str, 'torch.Tensor'], num_heads: int, img_size: Tuple[int, int],
                       x: 'torch.Tensor') -> 'torch.Tensor':
    """timm's final-normed tokens [B, N, D] for ``x``, the model at nominal ``img_size`` loading ``state`` (Apple's
    or timm's layout) through timm's ``checkpoint_filter_fn``."""
    import torch
    from timm.models.vision_transformer import checkpoint_filter_fn

    state = {k: v for k, v in state.items() if not k.startswith('head.')}  # timm keeps no attention pool
    weight = state.get('preprocessor.patchifier.proj.weight', state.get('patch_embed.proj.weight'))
    mlp = state.get('trunk.blocks.0.mlp.fc1.weight', state.get('blocks.0.mlp.fc1_g.weight'))
    depth = sum(k.endswith(('norm_1.weight', 'norm1.weight')) for k in state)
    model = timm_aimv2(weight.shape[0], depth, num_heads, mlp.shape[0], weight.shape[-1], img_size, weight.shape[1])
    model.load_state_dict(checkpoint_filter_fn(dict(state), model), strict=True)
    with torch.no_grad():
        return model.forward_features(x)


def hf_aimv2_outputs(folder: Union[str, Path], x: 'torch.Tensor') -> Dict[str, Any]:
    """transformers' AIMv2 image output from ``folder`` on ``x``: an ``Aimv2VisionModel``'s, or an ``Aimv2Model``'s
    ``get_image_features``: ``tokens`` (``last_hidden_state``), ``pooled`` (``pooler_output``, projected by an
    ``Aimv2Model``; None without the head) and ``name``, what ran."""
    import torch
    from transformers import Aimv2Model, Aimv2VisionModel

    from timm_vit_variants.checkpoints.files import read_json

    with torch.no_grad():
        if read_json(str(Path(folder) / 'config.json')).get('model_type') == 'aimv2':
            model = Aimv2Model.from_pretrained(str(folder), attn_implementation='eager').eval()
            out, name = model.get_image_features(pixel_values=x), 'Aimv2Model.from_pretrained.get_image_features'
        else:
            model = Aimv2VisionModel.from_pretrained(str(folder), attn_implementation='eager').eval()
            out, name = model(pixel_values=x), 'Aimv2VisionModel.from_pretrained'
    return {'tokens': out.last_hidden_state, 'pooled': out.pooler_output, 'name': 'transformers ' + name}


def aimv2_outputs(check: Any, x: 'torch.Tensor', mixed: Optional[Dict[str, 'torch.Tensor']]) -> Any:
    """The 'aimv2' reference for a ``Check``: transformers for its folders, timm (its ``aimv2_*`` entry and loader)
    for Apple's and timm's files, at the source geometry or at a target one by the source's own rule (timm's
    bicubic resize; transformers' native sin-cos at any grid, its learned table at its own grid only)."""
    from porting.extras import require
    from porting.verification.hf_ref import hf_model_type
    from porting.verification.result import NoReference, Outputs
    from porting.verification.timm_ref import single_weight_file, timm_weights
    from timm_vit_variants.families.aimv2_layouts import find_layout
    from timm_vit_variants.parts import Learned

    path = Path(check.path)
    if path.is_dir() and hf_model_type(check) is not None:  # a transformers folder (timm's names no model_type)
        require('hf', 'verifying a transformers AIMv2 folder', 'pass --no-verify to convert without the check')
        native = check.source.position(Learned) is None
        if check.target is not None and not native:
            raise NoReference("transformers adds AIMv2's learned table as it is: it runs the tower at its own "
                              'grid only')
        check.require_own_resize('transformers', None)
        out = hf_aimv2_outputs(path, x)
        return Outputs(out['tokens'], out['pooled'] if out['pooled'] is not None else out['tokens'].mean(dim=1),
                       out['name'], note=None if out['pooled'] is not None else
                       'no head: the mean of its tokens')
    path = single_weight_file(path) if path.is_dir() else path  # a timm folder: its one weight file
    state = dict(timm_weights(path, check.weights_key))
    found = find_layout(state)
    if found is None:
        raise NoReference('no AIMv2 tower in the file')
    _, prefix = found
    state = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    if 'preprocessor.pos_embed' not in state and 'pos_embed' not in state:
        raise NoReference("timm's aimv2_* have a learned table: the native tower's sin-cos runs in Apple's code only "
                          '(tests/test_aimv2*.py checks it against outputs Apple wrote)')
    check.require_own_resize('timm', 'timm')
    grid = check.source.grid_size
    patch = check.source.patch_size
    tokens = timm_aimv2_outputs(state, check.source.num_heads, (grid[0] * patch[0], grid[1] * patch[1]), x)
    pooled = 'head.cls_token' in state
    return Outputs(tokens, None if pooled else tokens.mean(dim=1), f'timm {TIMM_AIMV2_ENTRY}',
                   note="timm keeps no attention-pool head: the pooled output is not checked" if pooled else None)
