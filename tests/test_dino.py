"""DINOv2: registers, LayerScale, the packed SwiGLU and the hub's table resize, against outputs written by DINOv2's
own code (tests/data/reference_dino, see its README), and the converter end to end."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from model_probes import assert_list_equals_each_alone, load_like_user, read_into_model
from reader_checks import assert_register_count_refused
from porting.cli import main
from timm_vit_variants import SimpleVisionTransformer
from timm_vit_variants.checkpoints import open_checkpoint
from timm_vit_variants.config import SimpleViTConfig
from timm_vit_variants.errors import ViTVariantsError
from timm_vit_variants.parts import Learned

DATA = Path(__file__).parent / 'data' / 'reference_dino'
GRIDS = ('6x6', '12x9', '4x5')
DINOV2 = ('dinov2_tiny', 'dinov2_tiny_reg4', 'dinov2_tiny_swiglu')
BOUND = 2e-5


def _input(grid: str, patch: int = 14) -> torch.Tensor:
    """The fixtures' input at a grid: the top-left crop of the stored uint8 images, mapped to [-1, 1]."""
    rows, cols = map(int, grid.split('x'))
    u8 = np.load(DATA / 'inputs.npz')[f'p{patch}_uint8'][:, :, :rows * patch, :cols * patch]
    return torch.from_numpy(np.float32(-1) + (u8.astype(np.float32) / np.float32(255)) * np.float32(2))


def _check_tokens(max_delta, what, feats, io, grid, registers):
    max_delta(f'{what} cls {grid}', feats[:, 0], io[f'cls_{grid}'], BOUND)
    if registers:
        max_delta(f'{what} registers {grid}', feats[:, 1:1 + registers], io[f'reg_{grid}'], BOUND)
    max_delta(f'{what} patches {grid}', feats[:, 1 + registers:], io[f'patch_{grid}'], BOUND)


@pytest.mark.parametrize('name', DINOV2)
def test_dinov2_hub_file_matches_dinov2(name, max_delta):
    src = open_checkpoint(DATA / f'{name}.pth', num_heads=2)
    assert src.format == 'dinov2' and src.given == {'num_heads': 2}
    assert src.notes[0].startswith('detected a DINOv2 backbone') and 'mask_token' in src.notes[0]
    src.close()
    model = read_into_model(DATA / f'{name}.pth', num_heads=2)
    cfg = model.config
    registers = 4 if 'reg4' in name else 0
    assert (cfg.tokens.registers, model.num_prefix_tokens, cfg.block.init_values) == (registers, 1 + registers, 1.0)
    assert cfg.position(Learned).resample == ('timm' if registers else 'dinov2')
    assert cfg.block.mlp == ('swiglu_packed' if 'swiglu' in name else 'mlp')
    io = np.load(DATA / f'{name}_io.npz')
    for grid in GRIDS:
        x = _input(grid)
        with torch.no_grad():
            feats = model.forward_features(x)
            maps = model.forward_intermediates(x, indices=2, norm=True, intermediates_only=True)
        _check_tokens(max_delta, name, feats, io, grid, registers)
        rows, cols = map(int, grid.split('x'))
        assert [tuple(m.shape) for m in maps] == [(2, 32, rows, cols)] * 2
        if f'blocks_{grid}' in io:  # the normalised block outputs, [CLS, registers, patches], as NCHW maps
            blocks = torch.from_numpy(io[f'blocks_{grid}'])
            want = model.norm(blocks[-1])[:, 1 + registers:].reshape(2, rows, cols, 32).permute(0, 3, 1, 2)
            max_delta(f'{name} last block map {grid}', maps[-1], want, BOUND)


def test_registers_in_the_naflex_path():
    """A list of images of different grids gives each image's [CLS, registers, patches] as it gives alone."""
    model = read_into_model(DATA / 'dinov2_tiny_reg4.pth', num_heads=2)
    assert_list_equals_each_alone(model, [_input(g)[0] for g in GRIDS], prefix=5)  # [CLS] and 4 registers


def test_model_options_round_trip_and_layout():
    cfg = SimpleViTConfig.of(img_size=28, patch_size=14, embed_dim=32, depth=1, num_heads=2, mlp_dim=88,
                          mlp_layer='swiglu_packed', act_layer='silu', init_values=1e-5, class_token=True,
                          reg_tokens=4, global_pool='token', pos_embed='learn', pos_embed_cls_slot=True,
                          pos_embed_resample='dinov2')
    assert SimpleViTConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    layout = {key: shape for key, shape, _ in SimpleVisionTransformer.state_layout(cfg)}
    assert layout['reg_token'] == (1, 4, 32) and layout['pos_embed'] == (1, 5, 32)
    assert layout['blocks.0.ls1.gamma'] == (32,) and layout['blocks.0.mlp.fc1.weight'] == (176, 32)
    assert layout['blocks.0.mlp.fc2.weight'] == (32, 88)
    with pytest.raises(ViTVariantsError, match='silu'):
        cfg.replace(act_layer='gelu')


def test_convert_dinov2_end_to_end(tmp_path, capsys, max_delta):
    out = tmp_path / 'out'
    assert main(['convert', str(DATA / 'dinov2_tiny.pth'), str(out), '--num-heads', '2', '--img-size', '126']) == 0
    captured = capsys.readouterr()
    assert 'detected a DINOv2 backbone (0 registers)' in captured.err
    assert "rule 'dinov2'" in captured.err
    assert 'target geometry (126x126, patch 14) passed' in captured.out
    assert 'the head count 2 was given' in captured.out
    import timm
    import timm_vit_variants  # noqa: F401
    model = timm.create_model(f'local-dir:{out}', pretrained=True).eval()
    io = np.load(DATA / 'dinov2_tiny_io.npz')
    for grid in GRIDS:  # a 9x9 table now, resized again for each grid: close to, not equal to, DINOv2's
        with torch.no_grad():
            feats = model.forward_features(_input(grid))
        assert feats.shape[1] == 1 + int(np.prod([int(v) for v in grid.split('x')]))
    out6 = tmp_path / 'out6'
    assert main(['convert', str(DATA / 'dinov2_tiny_reg4.pth'), str(out6), '--num-heads', '2']) == 0
    model = timm.create_model(f'local-dir:{out6}', pretrained=True).eval()
    io = np.load(DATA / 'dinov2_tiny_reg4_io.npz')
    for grid in GRIDS:
        with torch.no_grad():
            _check_tokens(max_delta, 'converted reg4 folder', model.forward_features(_input(grid)), io, grid, 4)


def test_dinov2_heads_are_needed_off_the_hub_widths():
    with pytest.raises(ViTVariantsError) as e:
        open_checkpoint(DATA / 'dinov2_tiny.pth')
    assert e.value.key == 'blocks.0.attn.qkv.weight' and 'head count' in str(e.value)
    with open_checkpoint(DATA / 'dinov2_tiny.pth', num_heads=4) as src:
        assert src.config.num_heads == 4 and src.given == {'num_heads': 4}
    state = torch.load(DATA / 'dinov2_tiny.pth', weights_only=True)
    with pytest.raises(ViTVariantsError) as e:  # width 32: no 64-wide heads either
        open_checkpoint(DATA / 'dinov2_tiny.pth', assume_heads=True)
    assert e.value.key == 'blocks.0.attn.qkv.weight' and state['blocks.0.attn.qkv.weight'].shape == (96, 32)


def test_register_count_disagreeing_with_the_config(tmp_path):
    """A folder whose config.json says 2 registers where the tensors hold 4: one error naming the file and key."""
    out = tmp_path / 'out'
    assert main(['convert', str(DATA / 'dinov2_tiny_reg4.pth'), str(out), '--num-heads', '2']) == 0
    bad = tmp_path / 'bad'
    shutil.copytree(out, bad)
    config = json.loads((bad / 'config.json').read_text())
    config['model_args']['reg_tokens'] = 2
    (bad / 'config.json').write_text(json.dumps(config))
    with pytest.raises(ViTVariantsError) as e:
        open_checkpoint(bad, layout=SimpleVisionTransformer.state_layout)
    assert e.value.key == 'reg_token' and str(bad / 'model.safetensors') in str(e.value)
    assert len(str(e.value).splitlines()) == 1


@pytest.mark.parametrize('arch,extra', [('vit_small_patch14_dinov2', {}), ('vit_small_patch14_reg4_dinov2', {}),
                                        ('vit_giant_patch14_dinov2', {'mlp_ratio': 176 / 32})])
def test_timm_dinov2_folder_matches_timm(arch, extra, tmp_path, max_delta):
    import timm
    from timm.models import save_for_hf

    args = dict(embed_dim=32, depth=2, num_heads=2, img_size=84, dynamic_img_size=True, **extra)
    ref = timm.create_model(arch, **args).eval()
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():  # LayerScale's 1e-5 init would make each block almost the identity
        for tensor in ref.state_dict().values():
            tensor.add_(torch.randn(tensor.shape, generator=gen) * 0.2)
    save_for_hf(ref, str(tmp_path / 'timm'), model_args=args)
    model = read_into_model(tmp_path / 'timm')
    assert model.config.tokens.registers == (4 if 'reg4' in arch else 0) and model.config.block.init_values is not None
    for grid in ('6x6', '12x9'):
        x = _input(grid)
        with torch.no_grad():
            max_delta(f'{arch} folder tokens {grid}', model.forward_features(x), ref.forward_features(x), BOUND)


@pytest.mark.parametrize('kwargs', [dict(init_values=1e-5), dict(reg_tokens=2, no_embed_class=True)])
def test_bare_timm_state_dict_with_registers_or_layer_scale(kwargs, tmp_path, max_delta):
    """Once refused (tests/test_checkpoints_timm.py listed them as inexpressible): now read and exact."""
    from safetensors.torch import save_file
    from timm.models.vision_transformer import VisionTransformer

    ref = VisionTransformer(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=0,
                            dynamic_img_size=True, **kwargs).eval()
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for tensor in ref.state_dict().values():
            tensor.add_(torch.randn(tensor.shape, generator=gen) * 0.2)
    save_file(ref.state_dict(), str(tmp_path / 'w.safetensors'))
    model = read_into_model(tmp_path / 'w.safetensors', num_heads=4)
    for size in ((32, 32), (48, 40)):
        x = torch.randn(2, 3, *size, generator=gen)
        with torch.no_grad():
            max_delta(f'timm {kwargs} {size}', model.forward_features(x), ref.forward_features(x), BOUND)


def test_timm_registers_with_position_rows_read_from_a_bare_state_dict(tmp_path, max_delta):
    """A bare timm state dict whose table has rows for [CLS] and the registers (``no_embed_class=False``): the
    table's length tells the rows apart from DINOv2's layout (registers without rows), and the logits match."""
    from safetensors.torch import save_file
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    ref = VisionTransformer(img_size=32, patch_size=8, embed_dim=64, depth=1, num_heads=4, reg_tokens=2).eval()
    save_file(ref.state_dict(), str(tmp_path / 'w.safetensors'))
    model = read_into_model(tmp_path / 'w.safetensors', num_heads=4).eval()
    assert model.config.num_prefix_slots == 3
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        max_delta('timm bare state dict, registers with table rows: logits', model(x), ref(x), 1e-5)


def _hf_dinov2(tmp_path, registers=0, swiglu=False):
    import transformers

    kwargs = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, mlp_ratio=4, image_size=84, patch_size=14,
                  use_swiglu_ffn=swiglu)
    if registers:
        cls, config = transformers.Dinov2WithRegistersModel, transformers.Dinov2WithRegistersConfig(
            num_register_tokens=registers, **kwargs)
    else:
        cls, config = transformers.Dinov2Model, transformers.Dinov2Config(**kwargs)
    torch.manual_seed(7)
    ref = cls(config).eval()
    with torch.no_grad():
        for tensor in ref.state_dict().values():
            tensor.add_(torch.randn(tensor.shape) * 0.2)
    ref.save_pretrained(str(tmp_path / 'hf'))
    return ref, tmp_path / 'hf'


@pytest.mark.parametrize('registers,swiglu', [(0, False), (4, False), (0, True)])
def test_transformers_dinov2_folder_matches_transformers(registers, swiglu, tmp_path, max_delta):
    ref, folder = _hf_dinov2(tmp_path, registers, swiglu)
    model = read_into_model(folder)
    assert (model.config.tokens.registers, model.config.block.mlp) == (registers, 'swiglu_packed' if swiglu else 'mlp')
    for grid in GRIDS:
        x = _input(grid)
        with torch.no_grad():
            want = ref(pixel_values=x).last_hidden_state
            max_delta(f'transformers dinov2 reg{registers} swiglu={swiglu} {grid}', model.forward_features(x), want,
                      BOUND)


def test_transformers_register_count_disagreeing_with_the_config(tmp_path):
    _, folder = _hf_dinov2(tmp_path, registers=4)
    assert_register_count_refused(folder)


@pytest.mark.parametrize('registers', [0, 4])
def test_convert_transformers_dinov2_verifies_at_both_geometries(registers, tmp_path, capsys):
    _, folder = _hf_dinov2(tmp_path, registers)
    out = tmp_path / 'out'
    assert main(['convert', str(folder), str(out), '--img-size', '126', '98']) == 0
    captured = capsys.readouterr()
    assert 'target geometry (126x98, patch 14) passed vs transformers Dinov2' in captured.out
    assert 'detected a transformers dinov2' in captured.err


def test_convert_timm_dinov2_folder_verifies_at_the_target_geometry(tmp_path, capsys):
    import timm
    from timm.models import save_for_hf

    args = dict(embed_dim=32, depth=2, num_heads=2, img_size=84, mlp_ratio=176 / 32)
    save_for_hf(timm.create_model('vit_giant_patch14_reg4_dinov2', **args), str(tmp_path / 'timm'), model_args=args)
    assert main(['convert', str(tmp_path / 'timm'), str(tmp_path / 'out'), '--img-size', '126', '98']) == 0
    assert 'target geometry (126x98, patch 14) passed' in capsys.readouterr().out


@pytest.mark.parametrize('registers', [0, 2])
def test_transformers_dinov2_classifier_keeps_its_probe(tmp_path, registers, max_delta):
    """``Dinov2ForImageClassification`` / ``Dinov2WithRegistersForImageClassification``: the probe on [CLS]
    concatenated with the mean of the patch tokens (registers left out) is kept, the 'cls_patch_mean' pool; the
    converted folder gives the class's logits at its grid, a larger and a non-square one (the class resizes its
    table by itself). Before, refused ("[CLS]+mean concat head is not expressed")."""
    import transformers

    kwargs = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, image_size=28, patch_size=7, num_labels=5)
    if registers:
        source = transformers.Dinov2WithRegistersForImageClassification(
            transformers.Dinov2WithRegistersConfig(num_register_tokens=registers, **kwargs))
    else:
        source = transformers.Dinov2ForImageClassification(transformers.Dinov2Config(**kwargs))
    torch.manual_seed(3)
    with torch.no_grad():
        for p in source.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    source.eval().save_pretrained(str(tmp_path / 'src'))
    assert main(['convert', str(tmp_path / 'src'), str(tmp_path / 'out')]) == 0
    for size in ((28, 28), (42, 42), (35, 49)):
        model = load_like_user(tmp_path / 'out')
        model.set_input_size(img_size=size)
        x = torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            max_delta(f'transformers DINOv2 classifier ({registers} registers) {size}: logits', model(x),
                      source(pixel_values=x).logits, 2e-5)


def test_a_dinov2_classifier_that_contradicts_its_width_is_refused(tmp_path, capsys):
    import transformers
    from safetensors.torch import load_file, save_file

    source = transformers.Dinov2ForImageClassification(transformers.Dinov2Config(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=28, patch_size=7, num_labels=5))
    source.save_pretrained(str(tmp_path / 'src'))
    weights = tmp_path / 'src' / 'model.safetensors'
    state = load_file(str(weights))
    save_file(dict(state, **{'classifier.weight': state['classifier.weight'][:, :32].contiguous()}), str(weights))
    capsys.readouterr()
    assert main(['convert', str(tmp_path / 'src'), str(tmp_path / 'out')]) == 1
    err = capsys.readouterr().err
    assert err.count('error:') == 1 and "key 'classifier.weight'" in err and 'model.safetensors' in err, err


def test_resetting_the_probe_pool_to_another_pooling_gives_a_head_of_its_width():
    """A model with DINOv2's 'cls_patch_mean' pool (twice the token width) reset to 'token' pooling gets a classifier
    reading the token width. Before, the new head kept the old width and the forward pass failed."""
    from timm_vit_variants import SimpleVisionTransformer
    import timm_vit_variants.families.dinov2  # noqa: F401  (registers the pool)

    model = SimpleVisionTransformer(img_size=28, patch_size=7, embed_dim=32, depth=1, num_heads=2, class_token=True,
                                    num_classes=3, global_pool='cls_patch_mean').eval()
    assert model.head.in_features == 64
    model.reset_classifier(5, 'token')
    assert model.head.in_features == 32 and model.num_features == 32
    with torch.no_grad():
        assert model(torch.randn(2, 3, 28, 28)).shape == (2, 5)
