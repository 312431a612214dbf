"""The AIMv2 reader (``families/aimv2_reader.py``) on each layout: the config it infers and the weights it plans,
run in our model against the sources' own outputs; what it refuses, by name."""
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from timm_vit_variants.checkpoints.files import discover
from timm_vit_variants.checkpoints.options import ReaderOptions
from timm_vit_variants.checkpoints.stores import open_store
from timm_vit_variants.errors import ViTVariantsError
from timm_vit_variants.families import aimv2_layers  # noqa: F401  (registers the pool and scheme modules)
from timm_vit_variants.families.aimv2 import Aimv2Pool, Aimv2SinCos
from timm_vit_variants.families.aimv2_reader import Aimv2Checkpoint
from timm_vit_variants.limits import DEFAULT_LIMITS
from timm_vit_variants.vision_transformer import SimpleVisionTransformer

from porting.families.aimv2_ref import hf_aimv2_outputs

DATA = Path(__file__).parent / 'data' / 'aimv2'
OUTPUTS = load_file(DATA / 'apple_outputs.safetensors')


def _open(path: Path, **hints) -> Aimv2Checkpoint:
    files, config, config_path = discover(str(path), DEFAULT_LIMITS)
    store = open_store(files, DEFAULT_LIMITS)
    return Aimv2Checkpoint(str(path), store, config, config_path, ReaderOptions.of(**hints),
                           SimpleVisionTransformer.state_layout)


def _model(ckpt: Aimv2Checkpoint) -> SimpleVisionTransformer:
    model = SimpleVisionTransformer(**ckpt.config.to_dict()).eval()
    ckpt.fill_into(dict(model.state_dict(keep_vars=True)))
    return model


@torch.no_grad()
@pytest.mark.parametrize('name', ['absolute', 'native', 'lit'])
def test_apple_files(name, tmp_path, max_delta):
    """Apple's files (the LiT tower inside a two-tower file under ``image_encoder.``): the network Apple ran, its
    head count given (a width-16 tower has no published count)."""
    state = load_file(DATA / f'apple_{name}.safetensors')
    path = tmp_path / 'model.safetensors'
    if name == 'lit':
        state = {**{f'image_encoder.{k}': v for k, v in state.items()}, 'image_projector.weight': torch.ones(8, 16),
                 'text_encoder.trunk.post_trunk_norm.weight': torch.ones(16), 'log_logit_scale': torch.ones(())}
    save_file(state, path)
    with pytest.raises(ViTVariantsError, match='num-heads'):
        _open(path)
    ckpt = _open(path, num_heads=2)
    config = ckpt.config
    assert (config.position(Aimv2SinCos) is not None) == (name == 'native')
    assert isinstance(config.head.pool, Aimv2Pool) == (name == 'lit')
    assert ckpt.grid == (None if name == 'native' else (4, 4))
    model = _model(ckpt)
    for grid in ['x28x28', 'x21x35', 'x42x28'] if name == 'native' else ['x28x28']:
        x = OUTPUTS[grid]
        ours = model(x) if name == 'lit' else model.forward_features(x)
        max_delta(f'aimv2 reader apple {name} {grid[1:]}', ours, OUTPUTS[f'{name}.{grid}.out'], 2e-5)


@torch.no_grad()
def test_transformers_folder(tmp_path, max_delta):
    """A transformers folder: heads, eps and the head from its config.json; the tower transformers runs."""
    from transformers import Aimv2VisionConfig, Aimv2VisionModel

    torch.manual_seed(0)
    model = Aimv2VisionModel(Aimv2VisionConfig(hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                                               num_attention_heads=2, image_size=28, patch_size=7, use_head=True,
                                               rms_norm_eps=1e-6))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    model.save_pretrained(tmp_path)
    ckpt = _open(tmp_path)
    assert ckpt.config.num_heads == 2 and ckpt.config.block.norm_eps == 1e-6 and 'num_heads' not in ckpt.assumed
    ours = _model(ckpt)
    x = OUTPUTS['x28x28']
    ref = hf_aimv2_outputs(tmp_path, x)
    max_delta('aimv2 reader hf: tokens', ours.forward_features(x), ref['tokens'], 2e-5)
    max_delta('aimv2 reader hf: pooled', ours(x), ref['pooled'], 2e-5)
    config = json.loads((tmp_path / 'config.json').read_text())
    (tmp_path / 'config.json').write_text(json.dumps(dict(config, qkv_bias=True)))
    with pytest.raises(ViTVariantsError, match='qkv_bias'):
        _open(tmp_path)


@torch.no_grad()
def test_two_tower_folder_keeps_the_image_projection(tmp_path, max_delta):
    """An ``Aimv2Model`` folder gives its ``get_image_features``: ``visual_projection`` (no bias) on the pooled
    output is the head. Before, the projection was dropped and the folder gave the unprojected pooler output."""
    from transformers import Aimv2Config, Aimv2Model

    torch.manual_seed(0)
    config = Aimv2Config(
        vision_config=dict(hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=2,
                           image_size=28, patch_size=7, use_head=True),
        text_config=dict(hidden_size=16, intermediate_size=24, num_hidden_layers=1, num_attention_heads=2,
                         vocab_size=50, max_position_embeddings=8), projection_dim=8)
    source = Aimv2Model(config).eval()
    source.save_pretrained(tmp_path)
    ckpt = _open(tmp_path)
    assert ckpt.config.num_classes == 8 and not ckpt.config.head.bias
    ours = _model(ckpt)
    x = OUTPUTS['x28x28']
    expected = source.get_image_features(pixel_values=x)
    max_delta('aimv2 reader hf two-tower: tokens', ours.forward_features(x), expected.last_hidden_state, 2e-5)
    max_delta('aimv2 reader hf two-tower: image features', ours(x), expected.pooler_output, 2e-5)


def test_refusals(tmp_path):
    """A tensor no AIMv2 tower holds, and a table that is no square grid, are named."""
    state = load_file(DATA / 'apple_absolute.safetensors')
    path = tmp_path / 'model.safetensors'
    save_file(dict(state, **{'trunk.blocks.0.attn.q_norm.weight': torch.ones(8)}), path)
    with pytest.raises(ViTVariantsError, match=r'trunk\.blocks\.0\.attn\.q_norm\.weight'):
        _open(path, num_heads=2)
    save_file(dict(state, **{'preprocessor.pos_embed': torch.zeros(1, 15, 16)}), path)
    with pytest.raises(ViTVariantsError, match='preprocessor.pos_embed'):
        _open(path, num_heads=2)


@torch.no_grad()
def test_check_reference(tmp_path, max_delta):
    """The converter's reference (``aimv2_outputs``) on an Apple file: timm's own loader and network, at the
    source grid and, by timm's own resize, at a non-square target; a native Apple file has none (named)."""
    from porting.families.aimv2_ref import aimv2_outputs
    from porting.verification.result import Check, NoReference

    path = tmp_path / 'model.safetensors'
    save_file(load_file(DATA / 'apple_absolute.safetensors'), path)
    ckpt = _open(path, num_heads=2)
    model = _model(ckpt)
    x = OUTPUTS['x28x28']
    ref = aimv2_outputs(Check(str(path), 'aimv2', ckpt.config), x, None)
    max_delta('aimv2 reference apple 28x28: tokens', model.forward_features(x), ref.features, 2e-5)
    max_delta('aimv2 reference apple 28x28: pooled', model(x), ref.logits, 2e-5)
    x = OUTPUTS['x21x35']
    target = ckpt.config.replace(img_size=(21, 35))
    ref = aimv2_outputs(Check(str(path), 'aimv2', ckpt.config, target=target, rule='timm'), x, None)
    max_delta('aimv2 reference apple 21x35 (timm resize): tokens', model.forward_features(x), ref.features, 2e-5)
    with pytest.raises(NoReference, match='resized with'):
        aimv2_outputs(Check(str(path), 'aimv2', ckpt.config, target=target, rule='bigvision'), x, None)
    save_file(load_file(DATA / 'apple_native.safetensors'), path)
    with pytest.raises(NoReference, match='sin-cos'):
        aimv2_outputs(Check(str(path), 'aimv2', _open(path, num_heads=2).config), x, None)


def test_porting_family_names_the_reference():
    """The porting registry finds the family's torch-free module and its 'aimv2' reference."""
    from porting.families.registry import FAMILIES, REFERENCES

    assert 'aimv2' in [family.name for family in FAMILIES]
    assert REFERENCES['aimv2'].__name__ == 'porting.families.aimv2_ref.aimv2_outputs'


@torch.no_grad()
def test_dispatch_and_rows(tmp_path, max_delta):
    """``open_checkpoint`` detects each layout as 'aimv2' (Apple's bare file, a transformers folder), and a row
    builds by its registered name (the LiT tower's pool, sized down)."""
    import timm

    from timm_vit_variants.checkpoints import open_checkpoint

    path = tmp_path / 'apple.safetensors'
    save_file(load_file(DATA / 'apple_lit.safetensors'), path)
    ckpt = open_checkpoint(path, num_heads=2, layout=SimpleVisionTransformer.state_layout)
    assert ckpt.format == 'aimv2' and isinstance(ckpt.config.head.pool, Aimv2Pool)
    model = timm.create_model('simple_vit_large_patch14_aimv2_lit_224', img_size=28, patch_size=7, embed_dim=16,
                              depth=2, num_heads=2, mlp_dim=24).eval()
    ckpt.fill_into(dict(model.state_dict(keep_vars=True)))
    max_delta('aimv2 row lit: ours vs Apple', model(OUTPUTS['x28x28']), OUTPUTS['lit.x28x28.out'], 2e-5)
