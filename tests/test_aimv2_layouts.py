"""AIMv2's three layouts (``families/aimv2_layouts.py``) against the sources' own code: Apple's (its outputs kept
in ``tests/data/aimv2``), timm's ``aimv2_*`` and transformers' ``Aimv2VisionModel`` (built here at tiny sizes)."""
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from porting.families.aimv2_ref import hf_aimv2_outputs, timm_aimv2, timm_aimv2_outputs
from timm_vit_variants.families.aimv2_layouts import fill_state, find_layout, layout_of, tower_facts
from timm_vit_variants.families.aimv2_layers import AttentionPoolingHead, aimv2_sincos

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


def _pool(state, layout: str) -> AttentionPoolingHead:
    pool = AttentionPoolingHead(16, 2).eval()
    targets = {f'attn_pool.{k}': v for k, v in pool.state_dict(keep_vars=True).items()}
    assert fill_state(targets, state, layout) == ()
    return pool


def test_attention_pool_is_apples(max_delta):
    """Apple's LiT tower: our pool on the trunk's tokens gives Apple's pooled output."""
    state = _apple('lit')
    model = timm_aimv2(img_size=(28, 28), **TINY)
    fill_state(dict(model.state_dict(keep_vars=True)), state, 'apple')
    with torch.no_grad():
        pooled = _pool(state, 'apple')(model.forward_features(OUTPUTS['x28x28']))
    max_delta('aimv2 apple lit: attention pool vs Apple', pooled, OUTPUTS['lit.x28x28.out'], 2e-5)


def test_attention_pool_is_transformers(tmp_path, max_delta):
    """transformers' head: our pool on its tokens gives its ``pooler_output``; padding left out of the keys is
    the same as the shorter sequence."""
    folder = _hf_folder(tmp_path, use_head=True)
    expected = hf_aimv2_outputs(folder, OUTPUTS['x28x28'])
    pool = _pool(load_file(folder / 'model.safetensors'), 'hf')
    with torch.no_grad():
        max_delta('aimv2 hf: attention pool vs transformers', pool(expected['tokens']), expected['pooled'], 2e-5)
        tokens = expected['tokens']
        padded = torch.cat([tokens, torch.randn(2, 3, 16)], dim=1)
        valid = torch.cat([torch.ones(2, 16), torch.zeros(2, 3)], dim=1).bool()
        max_delta('aimv2 pool: masked padding', pool(padded, valid), pool(tokens), 1e-6)


@pytest.mark.parametrize('grid', [(4, 4), (3, 5), (6, 4)])
def test_native_sincos_is_apples_and_transformers(grid, tmp_path, max_delta):
    """The native towers' computed table at three grids (one non-square): timm's network with ``aimv2_sincos`` as
    its table gives Apple's tokens and transformers' ``is_native`` tokens."""
    h, w = grid
    x = OUTPUTS[f'x{7 * h}x{7 * w}']
    model = timm_aimv2(img_size=(7 * h, 7 * w), **TINY)
    with torch.no_grad():
        model.pos_embed.copy_(aimv2_sincos(h, w, 16)[None])
        assert fill_state(dict(model.state_dict(keep_vars=True)), _apple('native'), 'apple') == ('pos_embed',)
        tokens = model.forward_features(x)
    max_delta(f'aimv2 apple native {h}x{w}: sin-cos vs Apple', tokens, OUTPUTS[f'native.x{7 * h}x{7 * w}.out'], 2e-5)
    folder = _hf_folder(tmp_path, is_native=True, use_head=False)
    assert fill_state(dict(model.state_dict(keep_vars=True)), load_file(folder / 'model.safetensors'), 'hf') == \
        ('pos_embed',)
    with torch.no_grad():
        tokens = model.forward_features(x)
    max_delta(f'aimv2 hf native {h}x{w}: sin-cos vs transformers', tokens, hf_aimv2_outputs(folder, x)['tokens'], 2e-5)


def _shapes(state, prefix: str = ''):
    return {prefix + k: tuple(v.shape) for k, v in state.items()}


def test_tower_facts_of_each_layout(tmp_path):
    """Each layout's tensors give the same network facts; a LiT file's tower is found under its prefix."""
    expected = dict(embed_dim=16, in_chans=3, patch_size=(7, 7), depth=2, mlp_dim=24, grid=(4, 4),
                    attention_pool=False)
    absolute = _shapes(_apple('absolute'))
    assert find_layout(absolute) == ('apple', '')
    assert tower_facts(absolute, 'apple') == expected
    assert tower_facts(_shapes(_apple('native')), 'apple') == dict(expected, grid=None)
    lit = dict(_shapes(_apple('lit'), 'image_encoder.'), **{'image_projector.weight': (8, 16)})
    assert find_layout(lit) == ('apple', 'image_encoder.')
    assert tower_facts(lit, 'apple', 'image_encoder.') == dict(expected, attention_pool=True)
    hf = _shapes(load_file(_hf_folder(tmp_path, use_head=True) / 'model.safetensors'))
    assert find_layout(hf) == ('hf', '')
    assert tower_facts(hf, 'hf') == dict(expected, attention_pool=True)
    timm = _shapes(timm_aimv2(img_size=(28, 28), **TINY).state_dict())
    assert find_layout(timm) == ('timm', '')
    assert tower_facts(timm, 'timm') == expected


def test_tower_facts_refuse_what_no_tower_has():
    """A table that is no square grid, or a gate of the wrong width, is named."""
    shapes = _shapes(_apple('absolute'))
    with pytest.raises(ValueError, match='preprocessor.pos_embed'):
        tower_facts(dict(shapes, **{'preprocessor.pos_embed': (1, 15, 16)}), 'apple')
    with pytest.raises(ValueError, match=r'trunk\.blocks\.0\.mlp\.fc1\.weight'):
        tower_facts(dict(shapes, **{'trunk.blocks.0.mlp.fc1.weight': (24, 8)}), 'apple')


def test_two_tower_folder_tower_is_found(tmp_path, max_delta):
    """transformers' ``Aimv2Model`` folder: the image tower under ``vision_model.`` fills timm's network with the
    tokens its ``vision_model`` computes."""
    from transformers import Aimv2Config, Aimv2Model

    torch.manual_seed(0)
    config = Aimv2Config(
        vision_config=dict(hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=2,
                           image_size=28, patch_size=7, use_head=True),
        text_config=dict(hidden_size=16, intermediate_size=24, num_hidden_layers=1, num_attention_heads=2,
                         vocab_size=50, max_position_embeddings=8), projection_dim=8)
    Aimv2Model(config).eval().save_pretrained(tmp_path)
    state = load_file(tmp_path / 'model.safetensors')
    assert find_layout(state) == ('hf', 'vision_model.')
    model = timm_aimv2(img_size=(28, 28), **TINY)
    assert fill_state(dict(model.state_dict(keep_vars=True)), state, 'hf', 'vision_model.') == ()
    x = OUTPUTS['x28x28']
    with torch.no_grad():
        tokens = model.forward_features(x)
    max_delta('aimv2 hf two-tower: hf table vs transformers', tokens, hf_aimv2_outputs(tmp_path, x)['tokens'], 2e-5)


def test_timm_layout_needs_aimv2_blocks():
    """A timm ViT with a LayerNorm patch norm (its bias), or without a SwiGLU gate, is no AIMv2 tower."""
    timm = _shapes(timm_aimv2(img_size=(28, 28), **TINY).state_dict())
    assert find_layout(dict(timm, **{'patch_embed.norm.bias': (16,)})) is None
    assert find_layout({k: v for k, v in timm.items() if 'fc1_g' not in k}) is None
    assert find_layout(dict(timm, cls_token=(1, 1, 16))) is None
