"""DINOv3 and RoPE-ViT: 2D rotary positions, storage tokens, the masked k bias, untied norms and DeiT-III LayerScale,
against outputs written by DINOv3's and RoPE-ViT's own code (tests/data/reference_dino, see its README), against
transformers' DINOv3ViTModel and timm's own Eva ports, and the converter end to end."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from model_probes import assert_list_equals_each_alone, read_into_model
from reader_checks import assert_register_count_refused
from porting.cli import main
from timm_vit_variants import SimpleVisionTransformer
from timm_vit_variants.checkpoints import open_checkpoint
from timm_vit_variants.errors import ViTVariantsError
from timm_vit_variants.parts import Rope
from timm_vit_variants.rope import AxialRope, DinoV3Rope, MixedRope

DATA = Path(__file__).parent / 'data' / 'reference_dino'
GRIDS = ('6x6', '12x9', '4x5')
DINOV3 = ('dinov3_tiny_bf16periods', 'dinov3_tiny_fp32periods', 'dinov3_tiny_untied_swiglu')
ROPEVIT = ('ropevit_tiny_axial', 'ropevit_tiny_mixed', 'ropevit_tiny_axial_ape', 'ropevit_tiny_mixed_ape')
BOUND = 2e-5


def _rows_cols(grid: str):
    return tuple(map(int, grid.split('x')))


def _input(grid: str, patch: int = 16) -> torch.Tensor:
    """The fixtures' input at a grid: the top-left crop of the stored uint8 images, mapped to [-1, 1]."""
    rows, cols = _rows_cols(grid)
    u8 = np.load(DATA / 'inputs.npz')[f'p{patch}_uint8'][:, :, :rows * patch, :cols * patch]
    return torch.from_numpy(np.float32(-1) + (u8.astype(np.float32) / np.float32(255)) * np.float32(2))


def _coords(rows: int, cols: int):
    y, x = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing='ij')
    coords = torch.stack([y.flatten(), x.flatten()], dim=-1)
    return coords, torch.tensor([rows, cols]).expand_as(coords)


def _state(name: str):
    state = torch.load(DATA / f'{name}.pth', weights_only=True)
    return state['model'] if 'model' in state else state


# -- the rotary tables ------------------------------------------------------------------------------

@pytest.mark.parametrize('name', DINOV3[:2])
def test_dinov3_rope_tables_are_dinov3s(name):
    """sin/cos from the stored periods equal what DINOv3's rope_embed hands every block, bit for bit."""
    rope = DinoV3Rope(16)
    rope.periods.copy_(_state(name)['rope_embed.periods'])
    io = np.load(DATA / f'{name}_io.npz')
    for grid in GRIDS:
        table = rope(*_coords(*_rows_cols(grid)))[0, 0]
        assert torch.equal(table[:, :16], torch.from_numpy(io[f'rope_sin_{grid}']))
        assert torch.equal(table[:, 16:], torch.from_numpy(io[f'rope_cos_{grid}']))


@pytest.mark.parametrize('name', ROPEVIT[:2])
def test_ropevit_rope_tables_are_ropevits(name, max_delta):
    """The interleaved [sin | cos] are the imaginary and real parts of RoPE-ViT's freqs_cis, per grid (4x9 too)."""
    if 'mixed' in name:
        rope = MixedRope(16, depth=2, num_heads=2)
        rope.freqs.data.copy_(_state(name)['freqs'].reshape(2, 2, 2, 8))
    else:
        rope = AxialRope(16)
    io = np.load(DATA / f'{name}_io.npz')
    for grid in (*GRIDS, '4x9'):
        table = rope(*_coords(*_rows_cols(grid)))
        table = table[0, 0] if 'axial' in name else table
        max_delta(f'{name} rope sin {grid}', table[..., :16:2], io[f'rope_sin_{grid}'], 1e-6)
        max_delta(f'{name} rope cos {grid}', table[..., 16::2], io[f'rope_cos_{grid}'], 1e-6)


# -- the fixtures, through the readers and the model --------------------------------------------------

@pytest.mark.parametrize('name', DINOV3)
def test_dinov3_file_matches_dinov3(name, max_delta):
    with open_checkpoint(DATA / f'{name}.pth', num_heads=2) as src:
        assert src.format == 'dinov3' and src.given == {'num_heads': 2}
        assert src.notes[0].startswith('detected a DINOv3 backbone') and 'bias_mask' in src.notes[0]
        assert ('bfloat16' if 'bf16' in name or 'untied' in name else 'float32') in src.notes[0]
    model = read_into_model(DATA / f'{name}.pth', num_heads=2)
    cfg = model.config
    assert (cfg.tokens.registers, model.num_prefix_tokens, cfg.flat_pos_embed) == (4, 5, 'rope')
    assert cfg.position(Rope).kind == 'dinov3'
    assert cfg.head.untie_norms == ('untied' in name) and cfg.block.norm_eps == 1e-5
    assert cfg.block.mlp == ('swiglu' if 'swiglu' in name else 'mlp')
    assert model.state_dict()['blocks.0.attn.qkv.bias'][32:64].abs().max() == 0  # bias_mask applied
    io = np.load(DATA / f'{name}_io.npz')
    for grid in GRIDS:
        rows, cols = _rows_cols(grid)
        x = _input(grid)
        with torch.no_grad():
            feats = model.forward_features(x)
            maps = model.forward_intermediates(x, indices=2, intermediates_only=True)
        max_delta(f'{name} cls {grid}', feats[:, 0], io[f'cls_{grid}'], BOUND)
        max_delta(f'{name} storage {grid}', feats[:, 1:5], io[f'storage_{grid}'], BOUND)
        max_delta(f'{name} patches {grid}', feats[:, 5:], io[f'patch_{grid}'], BOUND)
        assert [tuple(m.shape) for m in maps] == [(2, 32, rows, cols)] * 2
        if f'blocks_{grid}' in io:  # the raw block outputs as NCHW maps
            want = torch.from_numpy(io[f'blocks_{grid}'][-1])[:, 5:].reshape(2, rows, cols, 32).permute(0, 3, 1, 2)
            max_delta(f'{name} last block map {grid}', maps[-1], want, BOUND)


@pytest.mark.parametrize('name', ROPEVIT)
def test_ropevit_file_matches_ropevit(name, max_delta):
    with open_checkpoint(DATA / f'{name}.pth', num_heads=2) as src:
        assert src.format == 'ropevit'
        assert any(n.startswith(f'detected a RoPE-ViT {"mixed" if "mixed" in name else "axial"}') for n in src.notes)
    model = read_into_model(DATA / f'{name}.pth', num_heads=2)
    cfg = model.config
    assert cfg.flat_pos_embed == ('learn+rope' if 'ape' in name else 'rope') and cfg.block.init_values == 1e-4
    assert cfg.position(Rope).kind == ('mixed' if 'mixed' in name else 'axial') and cfg.num_classes == 10
    io = np.load(DATA / f'{name}_io.npz')
    for grid, suffix in (*((g, '') for g in GRIDS), ('4x9', '_pergrid')):
        with torch.no_grad():
            feats = model.forward_features(_input(grid))
            logits = model.forward_head(feats)
        max_delta(f'{name} logits {grid}{suffix}', logits, io[f'logits_{grid}{suffix}'], BOUND)
        max_delta(f'{name} cls {grid}{suffix}', feats[:, 0], io[f'cls_{grid}{suffix}'], BOUND)
        max_delta(f'{name} patches {grid}{suffix}', feats[:, 1:], io[f'patch_{grid}{suffix}'], BOUND)
    # the original reuses its 6x6 grid state at 4x9 (the same token count); this model does not
    assert np.abs(logits.numpy() - io['logits_4x9_original']).max() > 1e-3


def test_dinov3_list_of_images_equals_each_alone():
    """Packing: a list of differently sized images gives each image's tokens as it gives alone."""
    model = read_into_model(DATA / 'dinov3_tiny_untied_swiglu.pth', num_heads=2)
    assert_list_equals_each_alone(model, [_input(g)[0] for g in GRIDS], prefix=5)  # [CLS] and 4 registers


def test_rope_model_features_only_and_any_size():
    import timm

    model = read_into_model(DATA / 'ropevit_tiny_mixed.pth', num_heads=2)
    x = torch.randn(1, 3, 80, 112)
    with torch.no_grad():
        maps = model.forward_intermediates(x, indices=[0, 1], intermediates_only=True)
    assert [tuple(m.shape) for m in maps] == [(1, 32, 5, 7)] * 2
    features = timm.create_model('simple_vit_small_patch16_rope_mixed_224', features_only=True, embed_dim=32,
                                 depth=2, num_heads=2, mlp_dim=128, out_indices=(0, 1)).eval()
    wanted = set(features.state_dict())  # the getter wraps the model as `model.`, pruned after its last block
    features.load_state_dict({f'model.{k}': v for k, v in model.state_dict().items() if f'model.{k}' in wanted})
    assert wanted <= {f'model.{k}' for k in model.state_dict()}
    with torch.no_grad():
        got = features(x)
    torch.testing.assert_close(got[-1], maps[-1], rtol=0, atol=1e-5)


# -- transformers and timm folders --------------------------------------------------------------------

def _noised(model: torch.nn.Module) -> torch.nn.Module:
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return model.eval()


def _hf_dinov3(tmp_path, gated: bool, registers: int = 4):
    from transformers import DINOv3ViTConfig, DINOv3ViTModel

    torch.manual_seed(0)
    config = DINOv3ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, patch_size=16,
                             intermediate_size=88 if gated else 128, num_register_tokens=registers, image_size=96,
                             use_gated_mlp=gated, hidden_act='silu' if gated else 'gelu')
    model = _noised(DINOv3ViTModel(config))
    model.save_pretrained(tmp_path / 'hf')
    return model, tmp_path / 'hf'


@pytest.mark.parametrize('gated', [False, True])
def test_transformers_dinov3_folder_matches_transformers(gated, tmp_path, max_delta):
    ref, folder = _hf_dinov3(tmp_path, gated)
    model = read_into_model(folder)
    for size in ((96, 96), (192, 144), (64, 80)):
        x = torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(2))
        with torch.no_grad():
            max_delta(f'transformers dinov3 gated={gated} {size}', model.forward_features(x),
                      ref(pixel_values=x).last_hidden_state, BOUND)


def test_transformers_dinov3_folder_is_verified_by_its_own_class(tmp_path):
    """The conversion's check runs the folder in transformers' DINOv3ViTModel (the DINOv3 family's claim on 'hf')."""
    import vit_port

    _, folder = _hf_dinov3(tmp_path, False)
    result = vit_port.convert(str(folder), tmp_path / 'out')
    summary = result.verification.summary()
    assert result.verification.status == 'passed' and 'DINOv3ViTModel.from_pretrained' in summary, summary


def test_transformers_dinov3_register_count_disagreeing_with_the_config(tmp_path):
    _, folder = _hf_dinov3(tmp_path, False)
    assert_register_count_refused(folder)


@pytest.mark.parametrize('arch', ['vit_small_patch16_dinov3_qkvb', 'vit_small_plus_patch16_dinov3',
                                  'vit_small_patch16_rope_224', 'vit_small_patch16_rope_mixed_ape_224'])
def test_timm_eva_folder_matches_timm(arch, tmp_path, max_delta):
    import timm
    from timm.models import save_for_hf

    args = dict(embed_dim=32, depth=2, num_heads=2, img_size=96)
    ref = _noised(timm.create_model(arch, **args))
    save_for_hf(ref, str(tmp_path / 'timm'), model_args=args)
    with open_checkpoint(tmp_path / 'timm') as src:
        assert src.notes[-1].startswith(f'detected a timm Eva {arch}')
    model = read_into_model(tmp_path / 'timm')
    runs = timm.create_model(arch, **args, dynamic_img_size=True).eval()  # timm itself at any size
    runs.load_state_dict(ref.state_dict())
    for size in ((96, 96), (128, 80)):
        x = torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(3))
        with torch.no_grad():
            max_delta(f'timm {arch} {size}', model.forward_features(x), runs.forward_features(x), BOUND)


@pytest.mark.parametrize('arch', ['vit_small_patch16_dinov3', 'vit_small_patch16_dinov3_qkvb',
                                  'vit_small_plus_patch16_dinov3', 'vit_small_patch16_rope_mixed_224',
                                  'vit_small_patch16_rope_mixed_ape_224'])
def test_bare_timm_eva_state_dict_matches_timm(arch, tmp_path, max_delta):
    """No config.json: the RoPE form from the keys, the sizes from the shapes, the head count given."""
    import timm
    from safetensors.torch import save_file

    args = dict(embed_dim=32, depth=2, num_heads=2, img_size=96)
    ref = _noised(timm.create_model(arch, **args, dynamic_img_size=True))
    path = tmp_path / 'bare.safetensors'
    save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, str(path))
    with open_checkpoint(path, num_heads=2) as src:
        assert src.format == 'timm' and src.notes[-1].startswith('detected a bare timm Eva state dict')
    model = read_into_model(path, num_heads=2)
    ref.global_pool = 'token'  # what the converter assumes for a bare state dict (said in its notes)
    for size in ((96, 96), (128, 80)):
        x = torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(3))
        with torch.no_grad():
            max_delta(f'bare timm {arch} {size}', model.forward_features(x), ref.forward_features(x), BOUND)
            max_delta(f'bare timm {arch} {size} pooled', model(x), ref(x), BOUND)


def test_convert_bare_timm_dinov3_state_dict_verifies_at_both_geometries(tmp_path, capsys):
    import timm

    args = dict(embed_dim=32, depth=2, num_heads=2)
    path = tmp_path / 'dinov3.pth'
    torch.save(_noised(timm.create_model('vit_small_patch16_dinov3_qkvb', **args)).state_dict(), path)
    assert main(['convert', str(path), str(tmp_path / 'out'), '--num-heads', '2', '--img-size', '128', '80']) == 0
    out = capsys.readouterr().out
    assert 'target geometry (128x80, patch 16) passed vs timm Eva (vit_*_patch16_dinov3* blocks)' in out
    assert 'shared with the converter: the head count' in out


def test_bare_timm_eva_registers_of_the_wrong_width_are_one_error(tmp_path):
    import timm
    from safetensors.torch import save_file

    state = timm.create_model('vit_small_patch16_dinov3', embed_dim=32, depth=2, num_heads=2).state_dict()
    state['reg_token'] = torch.zeros(1, 4, 16)
    path = tmp_path / 'bad.safetensors'
    save_file({k: v.contiguous() for k, v in state.items()}, str(path))
    with pytest.raises(ViTVariantsError) as e:
        open_checkpoint(path, num_heads=2)
    assert e.value.key == 'reg_token' and str(path) in str(e.value) and len(str(e.value).splitlines()) == 1


def _sparse_safetensors(path: Path, shapes: dict, dtype: str = 'BF16') -> None:
    """A safetensors file with these tensors' header and a hole for their data (no disk is used for it)."""
    width = {'BF16': 2, 'F32': 4}
    header, offset = {}, 0
    for name, (shape, kind) in shapes.items():
        size = int(np.prod(shape)) * width[kind or dtype]
        header[name] = {'dtype': kind or dtype, 'shape': list(shape), 'data_offsets': [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    raw += b' ' * (-len(raw) % 8)
    with open(path, 'wb') as f:
        f.write(len(raw).to_bytes(8, 'little') + raw)
        f.truncate(8 + len(raw) + offset)


def test_dinov3_7b_hub_layout_reads_as_its_row(tmp_path):
    """The 7B's layout as dinov3/hub/backbones.py builds it (no qkv bias, swiglu64, fp32 periods, local_cls_norm),
    read from the header alone: the reader's config is the registered row's, and it is labelled so."""
    from timm_vit_variants.model_table import MODELS, architecture_for

    dim, depth, hidden = 4096, 40, 8192
    shapes = {'cls_token': ((1, 1, dim), None), 'storage_tokens': ((1, 4, dim), None), 'mask_token': ((1, dim), None),
              'patch_embed.proj.weight': ((dim, 3, 16, 16), None), 'patch_embed.proj.bias': ((dim,), None),
              'rope_embed.periods': ((32,), 'F32'), 'norm.weight': ((dim,), None), 'norm.bias': ((dim,), None),
              'local_cls_norm.weight': ((dim,), None), 'local_cls_norm.bias': ((dim,), None)}
    for i in range(depth):
        b = f'blocks.{i}.'
        shapes.update({b + 'norm1.weight': ((dim,), None), b + 'norm1.bias': ((dim,), None),
                       b + 'attn.qkv.weight': ((3 * dim, dim), None), b + 'attn.proj.weight': ((dim, dim), None),
                       b + 'attn.proj.bias': ((dim,), None), b + 'ls1.gamma': ((dim,), None),
                       b + 'norm2.weight': ((dim,), None), b + 'norm2.bias': ((dim,), None),
                       b + 'mlp.w1.weight': ((hidden, dim), None), b + 'mlp.w1.bias': ((hidden,), None),
                       b + 'mlp.w2.weight': ((hidden, dim), None), b + 'mlp.w2.bias': ((hidden,), None),
                       b + 'mlp.w3.weight': ((dim, hidden), None), b + 'mlp.w3.bias': ((dim,), None),
                       b + 'ls2.gamma': ((dim,), None)})
    path = tmp_path / 'dinov3_vit7b16_pretrain_lvd1689m.safetensors'
    _sparse_safetensors(path, shapes)
    with open_checkpoint(path, layout=SimpleVisionTransformer.state_layout) as src:
        config = src.config
        assert 'local_cls_norm.weight, local_cls_norm.bias stored for training and skipped' in src.notes[0]
    row = MODELS['simple_vit_7b_patch16_dinov3'].config()
    fields = ('embed_dim', 'depth', 'num_heads', 'mlp_dim', 'mlp_layer', 'qkv_bias', 'reg_tokens', 'init_values',
              'pos_embed', 'rope_type', 'rope_theta', 'act_layer', 'norm_eps', 'patch_size', 'num_classes')
    flat, row_flat = config.to_flat(), row.to_flat()
    assert {f: flat[f] for f in fields} == {f: row_flat[f] for f in fields}
    assert architecture_for(config) == 'simple_vit_7b_patch16_dinov3'


# -- bad input ---------------------------------------------------------------------------------------------

def _bad(tmp_path, name: str, change, wrap: bool = False) -> Path:
    state = _state(name)
    change(state)
    path = tmp_path / f'bad_{name}.pth'
    torch.save({'model': state} if wrap else state, path)
    return path


def _nan_mask(state):
    state['blocks.1.attn.qkv.bias_mask'] = torch.full((96,), float('nan'))


def _no_mask(state):
    del state['blocks.0.attn.qkv.bias_mask']


def _short_periods(state):
    state['rope_embed.periods'] = state['rope_embed.periods'][:3]


def _bad_freqs(state):
    state['freqs'] = state['freqs'][:, :, :12]


@pytest.mark.parametrize('name,change,key,wrap', [
    ('dinov3_tiny_bf16periods', _nan_mask, 'blocks.1.attn.qkv.bias_mask', False),
    ('dinov3_tiny_bf16periods', _no_mask, 'blocks.0.attn.qkv.bias_mask', False),
    ('dinov3_tiny_fp32periods', _short_periods, 'rope_embed.periods', False),
    ('ropevit_tiny_mixed', _bad_freqs, 'freqs', True),
])
def test_bad_input_is_one_error_naming_file_and_key(name, change, key, wrap, tmp_path, capsys):
    path = _bad(tmp_path, name, change, wrap)
    with pytest.raises(ViTVariantsError) as e:
        open_checkpoint(path, num_heads=2)
    assert e.value.key == key and str(path) in str(e.value)
    assert main(['convert', str(path), str(tmp_path / 'out'), '--num-heads', '2']) != 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith('error:')]
    assert len(err) == 1 and key in err[0] and str(path) in err[0]


# -- the converter end to end ---------------------------------------------------------------------------

@pytest.mark.parametrize('name', ['dinov3_tiny_untied_swiglu', 'ropevit_tiny_mixed_ape'])
def test_convert_verifies_at_both_geometries(name, tmp_path, capsys, max_delta):
    import timm

    out = tmp_path / 'out'
    assert main(['convert', str(DATA / f'{name}.pth'), str(out), '--num-heads', '2', '--img-size', '192', '144']) == 0
    captured = capsys.readouterr()
    assert 'target geometry (192x144, patch 16) passed' in captured.out
    assert 'source geometry' in captured.out and 'passed' in captured.out
    model = timm.create_model(f'local-dir:{out}', pretrained=True).eval()
    io = np.load(DATA / f'{name}_io.npz')
    with torch.no_grad():  # a RoPE model without a table, or with RoPE-ViT's table resized to 12x9 once
        feats = model.forward_features(_input('12x9'))
    max_delta(f'converted {name} cls 12x9', feats[:, 0], io['cls_12x9'], BOUND)


def test_convert_timm_eva_folder_verifies_at_the_target_geometry(tmp_path, capsys):
    import timm
    from timm.models import save_for_hf

    args = dict(embed_dim=32, depth=2, num_heads=2, img_size=96)
    save_for_hf(_noised(timm.create_model('vit_small_patch16_rope_mixed_ape_224', **args)), str(tmp_path / 'timm'),
                model_args=args)
    assert main(['convert', str(tmp_path / 'timm'), str(tmp_path / 'out'), '--img-size', '128', '80']) == 0
    assert "target geometry (128x80, patch 16) passed vs timm.create_model('local-dir:...'" in capsys.readouterr().out


def test_compile_and_onnx_follow_the_input_size(tmp_path):
    """One torch.compile graph for every H x W and batch; an ONNX file with dynamic H x W that matches eager (the
    DINOv3 fixture with every option: registers, untied norms, SwiGLU, RoPE)."""
    from torch._dynamo.utils import counters

    from porting.export import export_onnx

    model = read_into_model(DATA / 'dinov3_tiny_untied_swiglu.pth', num_heads=2)
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, dynamic=True, fullgraph=True, backend='eager')
    with torch.no_grad():
        for i, size in enumerate(((96, 80), (64, 64), (128, 48), (33, 57))):
            x = torch.randn(2 + i % 2, 3, *size, generator=torch.Generator().manual_seed(i))
            torch.testing.assert_close(compiled(x), model(x))
    assert counters['stats']['unique_graphs'] == 1
    result = export_onnx(model, tmp_path / 'm.onnx')
    assert result.verification.status == 'passed' and 'at 7 sizes' in result.verification.summary()


def test_every_tag_downloads_a_file_of_its_own():
    """timm's download cache keys a URL by its file name, and a Hub file by (repo, name): no two of the family's
    tags may share either, or one tag's weights would load as another's (all RoPE-ViT files are pytorch_model.bin)."""
    import os
    import timm

    urls, hub = {}, {}
    for tag in timm.list_pretrained('simple_vit_*'):
        cfg = timm.models.get_pretrained_cfg(tag)
        if cfg.hf_hub_id:
            assert hub.setdefault((cfg.hf_hub_id, cfg.hf_hub_filename), tag) == tag
        elif cfg.url:
            assert urls.setdefault(os.path.basename(cfg.url), tag) == tag, (tag, cfg.url)
    ropevit = [tag for tag in timm.list_pretrained('simple_vit_*_rope_*')]
    assert len(ropevit) == 12
    for tag in ropevit:
        cfg = timm.models.get_pretrained_cfg(tag)
        assert cfg.hf_hub_id.startswith('naver-ai/rope_') and cfg.hf_hub_filename == 'pytorch_model.bin'
        assert cfg.custom_load == 'hf'  # timm hands the downloaded file to our reader (load_pretrained)
