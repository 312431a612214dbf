"""AIMv2's three layouts (``families/aimv2_layouts.py``) against the sources' own code: Apple's (its outputs kept
in ``tests/data/aimv2``), timm's ``aimv2_*`` and transformers' ``Aimv2VisionModel`` (built here at tiny sizes)."""
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from porting.families.aimv2_ref import hf_aimv2_outputs, timm_aimv2, timm_aimv2_outputs
from timm_vit_variants.families.aimv2_layouts import fill_state, layout_of

DATA = Path(__file__).parent / 'data' / 'aimv2'
OUTPUTS = load_file(DATA / 'apple_outputs.safetensors')
# Apple's fixture towers: D 16, 2 blocks, 2 heads, SwiGLU width 24, 7-pixel patches, nominal 28x28.
TINY = dict(embed_dim=16, depth=2, num_heads=2, mlp_dim=24, patch_size=7)


def _apple(name: str):
    return load_file(DATA / f'apple_{name}.safetensors')


def test_timm_reads_apple_layout_as_apple_runs_it(max_delta):
    """The timm reference (timm's own loader of Apple's files) reproduces Apple's own outputs."""
    ours = timm_aimv2_outputs(_apple('absolute'), 2, (28, 28), OUTPUTS['x28x28'])
    max_delta('aimv2 apple absolute: timm reference vs Apple', ours, OUTPUTS['absolute.x28x28.out'], 2e-5)


@pytest.mark.parametrize('name', ['absolute', 'lit'])
def test_apple_layout_fills_timm_network(name, max_delta):
    """Our Apple table fills timm's aimv2 network with Apple's trunk: the tokens Apple computes."""
    state = _apple(name)
    assert layout_of(state) == 'apple'
    model = timm_aimv2(img_size=(28, 28), **TINY)
    missing = fill_state(dict(model.state_dict(keep_vars=True)), state, 'apple')
    assert missing == ()
    with torch.no_grad():
        tokens = model.forward_features(OUTPUTS['x28x28'])
    if name == 'absolute':
        max_delta('aimv2 apple absolute: apple table vs Apple', tokens, OUTPUTS['absolute.x28x28.out'], 2e-5)
    else:  # the LiT tower's trunk is the same network: its tokens feed the head (checked with the pool)
        assert tokens.shape == (2, 16, 16)


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


def test_hf_layout_fills_timm_network(tmp_path, max_delta):
    """Our transformers table fills timm's aimv2 network: the tokens transformers computes."""
    folder = _hf_folder(tmp_path, use_head=True)
    state = load_file(folder / 'model.safetensors')
    assert layout_of(state) == 'hf'
    model = timm_aimv2(img_size=(28, 28), **TINY)
    assert fill_state(dict(model.state_dict(keep_vars=True)), state, 'hf') == ()
    x = OUTPUTS['x28x28']
    with torch.no_grad():
        tokens = model.forward_features(x)
    max_delta('aimv2 hf: hf table vs transformers', tokens, hf_aimv2_outputs(folder, x)['tokens'], 2e-5)
