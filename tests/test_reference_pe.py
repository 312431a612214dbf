"""Perception Encoder against Meta's own code (tests/data/reference_pe, see its README.md): tiny random towers in
Meta's layout, loaded by timm's own ``checkpoint_filter_fn`` into its ``vit_pe_*`` entry, saved with ``save_for_hf``
and converted, give what Meta's ``VisionTransformer`` gave at the pretraining grid; they follow the [CLS] RoPE
ordering of Meta's fixed code (61dd423: [CLS] unrotated, patches from position 1), not the ordering before it, which
moved every token of a tower with a [CLS]; at other grids timm's rule (the RoPE scaled to the reference grid, the
table resized bicubically with antialias), which the converted model follows, is not what Meta's code does."""
from pathlib import Path

import numpy as np
import pytest
import torch

from model_probes import load_like_user
from porting.cli import main

DATA = Path(__file__).parent / 'data' / 'reference_pe'
BOUND = 2e-5
# fixture -> (timm entry, its tiny model_args): Meta's towers at patch 16, 64 px (a 4x4 pretraining grid), width 32,
# 2 heads, 2 blocks; timm's reference grid is the pretraining grid, as in every published tower
KINDS = {
    'core': ('vit_pe_core_tiny_patch16_384', dict(embed_dim=32, depth=2, num_heads=2, img_size=64, num_classes=16,
                                                  ref_feat_shape=(4, 4))),
    'lang_g': ('vit_pe_lang_gigantic_patch14_448', dict(patch_size=16, embed_dim=32, depth=2, num_heads=2,
                                                        mlp_ratio=4.0, img_size=64, ref_feat_shape=(4, 4))),
}


@pytest.fixture(scope='module', params=list(KINDS))
def converted(request, tmp_path_factory):
    """(kind, the converted folder loaded as a user does, Meta's outputs, Meta's outputs before the RoPE fix)."""
    import timm
    from safetensors.torch import load_file
    from timm.models import save_for_hf
    from timm.models.eva import checkpoint_filter_fn

    kind = request.param
    arch, args = KINDS[kind]
    model = timm.create_model(arch, pretrained=False, **args).eval()
    model.load_state_dict(checkpoint_filter_fn(load_file(str(DATA / f'pe_{kind}.safetensors')), model))
    root = tmp_path_factory.mktemp(kind)
    save_for_hf(model, str(root / 'src'), model_args=args)
    assert main(['convert', str(root / 'src'), str(root / 'out')]) == 0
    io = np.load(DATA / f'pe_{kind}_io.npz', allow_pickle=False)
    before_fix = np.load(DATA / f'pe_{kind}_prefix_c8e57d8_io.npz', allow_pickle=False)
    return kind, load_like_user(root / 'out'), io, before_fix


def _run(model: torch.nn.Module, io, grid: str):
    x = torch.from_numpy(io[f'x_{grid}']).float()
    with torch.no_grad():
        feats = model.forward_features(x)
        return feats.numpy(), model.forward_head(feats).numpy()


def test_the_pretraining_grid_gives_metas_outputs(converted, max_delta):
    kind, ours, io, _ = converted
    tokens, pooled = _run(ours, io, '4x4')
    max_delta(f'{kind} 4x4 tokens vs Meta pe.py', tokens, io['tokens_4x4'], BOUND)
    if 'pooled_4x4' in io.files:  # the attention pooler and the projection
        max_delta(f'{kind} 4x4 pooled vs Meta pe.py', pooled, io['pooled_4x4'], BOUND)


def test_the_cls_rope_ordering_is_metas_fixed_one(converted, max_delta):
    """Before 61dd423, Meta's ``Rope2D`` appended the [CLS] row of no rotation after the patches: token k got patch
    k's rotation, every one of them one place off. A tower without [CLS] has nothing to misplace."""
    kind, ours, io, before_fix = converted
    tokens, _ = _run(ours, io, '4x4')
    moved = float(np.abs(tokens - before_fix['tokens_4x4']).max())
    if kind == 'core':
        assert moved > 0.1, f'{kind}: the pre-fix ordering should move the tokens, moved {moved:.2e}'
    else:
        max_delta(f'{kind} 4x4 tokens vs Meta pe.py before the fix', tokens, before_fix['tokens_4x4'], BOUND)


@pytest.mark.parametrize('grid', ['6x6', '3x5'])
def test_other_grids_follow_timms_rule_not_metas(converted, grid):
    """Meta's code at another grid rotates by integer positions (not scaled to the pretraining grid) and resizes
    the table bilinearly without antialias; timm's entries, and the converted model, scale and resize their way
    (checked against timm in test_perception_encoder.py)."""
    kind, ours, io, _ = converted
    tokens, _ = _run(ours, io, grid)
    assert float(np.abs(tokens - io[f'tokens_{grid}']).max()) > 0.1
