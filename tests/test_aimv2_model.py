"""Our model built from the AIMv2 parts against the sources' own code: Apple's (outputs it wrote,
``tests/data/aimv2``), timm's ``aimv2_*`` and transformers' ``Aimv2VisionModel``, at three grids (one non-square)."""
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from porting.families.aimv2_ref import hf_aimv2_outputs, timm_aimv2
from timm_vit_variants.families import aimv2_layers  # noqa: F401  (registers the pool and scheme modules)
from timm_vit_variants.families.aimv2 import aimv2_parts
from timm_vit_variants.families.aimv2_layouts import fill_state
from timm_vit_variants.vision_transformer import SimpleVisionTransformer

DATA = Path(__file__).parent / 'data' / 'aimv2'
OUTPUTS = load_file(DATA / 'apple_outputs.safetensors')
GRIDS = ['x28x28', 'x21x35', 'x42x28']


def _ours(state, layout: str, native: bool = False, pool: bool = False, prefix: str = '') -> SimpleVisionTransformer:
    model = SimpleVisionTransformer(img_size=28, patch_size=7, embed_dim=16, depth=2, num_heads=2, num_classes=0,
                                    **aimv2_parts(24, native=native, pool=pool)).eval()
    assert fill_state(dict(model.state_dict(keep_vars=True)), state, layout, prefix) == ()
    return model


@torch.no_grad()
@pytest.mark.parametrize('name,native,pool,grids', [
    ('absolute', False, False, GRIDS[:1]), ('native', True, False, GRIDS), ('lit', False, True, GRIDS[:1])])
def test_apple(name, native, pool, grids, max_delta):
    """Apple's towers: the tokens (the pooled output for the LiT tower) Apple's code computed; Apple runs a learned
    table at its own grid only, the native sin-cos at every grid."""
    model = _ours(load_file(DATA / f'apple_{name}.safetensors'), 'apple', native, pool)
    for grid in grids:
        x = OUTPUTS[grid]
        ours = model(x) if pool else model.forward_features(x)
        max_delta(f'aimv2 apple {name} {grid[1:]}: ours vs Apple', ours, OUTPUTS[f'{name}.{grid}.out'], 2e-5)


@torch.no_grad()
def test_timm_three_grids(max_delta):
    """timm's aimv2 network (its entry, random weights) at its own grid and two others (its bicubic resize of the
    table, ``dynamic_img_size``): our tokens and mean-pooled output."""
    torch.manual_seed(0)
    ref = timm_aimv2(16, 2, 2, 24, 7, (28, 28))
    for p in ref.parameters():
        p.add_(torch.randn_like(p) * 0.3)
    model = _ours(ref.state_dict(), 'timm')
    for grid in GRIDS:
        x = OUTPUTS[grid]
        max_delta(f'aimv2 timm {grid[1:]}: tokens', model.forward_features(x), ref.forward_features(x), 2e-5)
        max_delta(f'aimv2 timm {grid[1:]}: pooled', model(x), ref(x), 2e-5)


def _hf_folder(tmp_path: Path, **extra) -> Path:
    from transformers import Aimv2VisionConfig, Aimv2VisionModel

    torch.manual_seed(0)
    config = Aimv2VisionConfig(hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=2,
                               image_size=28, patch_size=7, **extra)
    model = Aimv2VisionModel(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    model.save_pretrained(tmp_path)
    return tmp_path


@torch.no_grad()
@pytest.mark.parametrize('native', [False, True])
def test_transformers(native, tmp_path, max_delta):
    """transformers' towers with the head: tokens and ``pooler_output``; its learned table runs at its own grid
    only, the native sin-cos at three grids."""
    folder = _hf_folder(tmp_path, use_head=True, is_native=native)
    model = _ours(load_file(folder / 'model.safetensors'), 'hf', native=native, pool=True)
    for grid in GRIDS if native else GRIDS[:1]:
        x = OUTPUTS[grid]
        ref = hf_aimv2_outputs(folder, x)
        what = f"aimv2 hf {'native' if native else 'table'} {grid[1:]}"
        max_delta(f'{what}: tokens', model.forward_features(x), ref['tokens'], 2e-5)
        max_delta(f'{what}: pooled', model(x), ref['pooled'], 2e-5)


@torch.no_grad()
@pytest.mark.parametrize('native', [False, True])
def test_naflex_mixed_batch(native, max_delta):
    """A NaFlex batch of images of three grids (padded to one length): each image's pooled output (the attention
    pool, padding left out of its keys) is the one it gets alone."""
    from timm_vit_variants.naflex_transforms import naflex_batch

    model = _ours(load_file(DATA / 'apple_lit.safetensors'), 'apple', native=native, pool=True)
    images = [OUTPUTS[grid][0] for grid in GRIDS]
    mixed = model(naflex_batch(images, 7))
    for i, image in enumerate(images):
        max_delta(f"aimv2 naflex {'native' if native else 'table'} {GRIDS[i][1:]}: pooled", mixed[i],
                  model(image[None])[0], 2e-5)
