"""BEiT, BEiT v2 and data2vec-vision: unilm's files against outputs written by unilm's own code at three grids, the
tables resized by BEiT's cubic rule (tests/data/reference_beit, see its README); timm ``Beit`` state dicts and folders
against timm, transformers BEiT / data2vec-vision folders against transformers; each conversion loaded the way the
README tells users."""
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn

from model_probes import load_like_user, read_into_model
from porting.cli import main
from timm_vit_variants import SimpleVisionTransformer
from timm_vit_variants.checkpoints import open_checkpoint
from timm_vit_variants.errors import ViTVariantsError
from timm_vit_variants.parts import Learned, RelPos

DATA = Path(__file__).parent / 'data' / 'reference_beit'
GRIDS = (6, 8, 4)  # stored, and the two unilm's fine-tuning script resized the tables to
BOUND = 2e-5
# fixture -> (pos_embed, mean pooling with fc_norm, LayerScale, classes)
FIXTURES = {
    'beit2_ft_meanpool': ('relpos', True, True, 10),
    'beit_ft_abs_cls': ('learn+relpos', False, False, 10),
    'beit2_pt_shared': ('relpos', False, True, 0),
}


def _input(side: int) -> torch.Tensor:
    """The fixtures' input at a side x side grid: the top-left crop of the stored uint8 images, mapped to [-1, 1]."""
    u8 = np.load(DATA / 'inputs.npz')['p8_uint8'][:, :, :side * 8, :side * 8]
    return torch.from_numpy(np.float32(-1) + (u8.astype(np.float32) / np.float32(255)) * np.float32(2))


def _check_unilm(max_delta, what, model, io, side):
    """Our outputs at side x side against unilm's: logits (or the pooled feature), the final-norm tokens."""
    key = f'{side}x{side}'
    x = _input(side)
    with torch.no_grad():
        feats = model.forward_features(x)
        out = model.forward_head(feats)
    want = io[f'logits_{key}'] if f'logits_{key}' in io.files else io[f'pooled_{key}']
    max_delta(f'{what} {"logits" if f"logits_{key}" in io.files else "pooled"} {key}', out, want, BOUND)
    max_delta(f'{what} tokens {key}', feats, io[f'tokens_{key}'], BOUND)


@pytest.mark.parametrize('name', list(FIXTURES))
def test_unilm_file_matches_unilm_at_three_grids(name, max_delta):
    pos_embed, mean_pool, layer_scale, classes = FIXTURES[name]
    with open_checkpoint(DATA / f'{name}.pth') as src:
        cfg, notes = src.config, ' '.join(src.notes)
        assert src.format == 'beit' and (cfg.flat_pos_embed, cfg.head.fc_norm, cfg.num_classes) == (pos_embed, mean_pool, classes)
        assert cfg.head.pool.kind == ('avg' if mean_pool else 'token') and (cfg.block.init_values is not None) == layer_scale
        assert (cfg.num_heads, cfg.depth, cfg.img_size, cfg.position(RelPos).resample) == (2, 2, (48, 48), 'beit')
        if pos_embed.startswith('learn'):  # 37 rows: a [CLS] slot and 6x6, not "37 positions, no square grid"
            assert src.grid == (6, 6) and cfg.position(Learned).cls_slot and cfg.position(Learned).resample == 'deit'
        if name == 'beit2_pt_shared':
            assert 'shared pretraining table' in notes and 'mask_token' in notes and 'cls_pt_layers' in notes
    io = np.load(DATA / f'{name}_io.npz', allow_pickle=False)
    for side in GRIDS:
        model = read_into_model(DATA / f'{name}.pth')
        if side != 6:
            model.set_input_size(img_size=side * 8)  # the tables by BEiT's rule, the absolute table by 'deit'
        state = model.state_dict()
        max_delta(f'{name} tables {side}x{side}', state['rel_pos.tables'], io[f'tables_{side}x{side}'], 1e-6)
        if pos_embed.startswith('learn'):
            max_delta(f'{name} pos_embed {side}x{side}', state['pos_embed'], io[f'pos_embed_{side}x{side}'], 1e-6)
        _check_unilm(max_delta, name, model, io, side)


@pytest.mark.parametrize('name,side', [('beit2_ft_meanpool', 8), ('beit_ft_abs_cls', 4), ('beit2_pt_shared', 6)])
def test_convert_unilm_file_and_load_it_as_a_user(name, side, tmp_path, capsys, max_delta):
    out = tmp_path / 'out'
    extra = ['--img-size', str(side * 8)] if side != 6 else []
    assert main(['convert', str(DATA / f'{name}.pth'), str(out), *extra]) == 0
    printed = capsys.readouterr().out
    assert 'verification passed' in printed and 'timm Beit' in printed
    if side != 6:
        assert "BEiT's rule as reproduced here" in printed
    model = load_like_user(out)
    assert model.config.flat_pos_embed == FIXTURES[name][0] and model.config.img_size == (side * 8, side * 8)
    _check_unilm(max_delta, f'converted {name}', model, np.load(DATA / f'{name}_io.npz'), side)


def test_non_square_target_under_beits_rule_is_refused(tmp_path, capsys):
    src = DATA / 'beit2_ft_meanpool.pth'
    assert main(['convert', str(src), str(tmp_path / 'out'), '--img-size', '64', '48']) != 0
    err = capsys.readouterr().err
    assert 'non-square' in err and '--resample-like timm' in err and not (tmp_path / 'out').exists()
    assert "key 'rel_pos.tables'" in err and str(src) in err
    model = read_into_model(src)
    with pytest.raises(ViTVariantsError, match='non-square') as e:
        model.set_input_size(img_size=(64, 48))
    assert e.value.key == 'rel_pos.tables'
    # timm's linear rule defines any grid: converted and checked against timm's own resize
    assert main(['convert', str(src), str(tmp_path / 'timm'), '--img-size', '64', '48', '--resample-like', 'timm']) == 0
    printed = capsys.readouterr().out
    assert "relative-position tables by 'timm'" in printed and "tables resized by timm's own filter" in printed
    assert 'target geometry (64x48, patch 8) passed' in printed
    assert main(['convert', str(tmp_path / 'timm'), str(tmp_path / 'again')]) == 0  # our own folder, read back
    assert "verification passed vs timm.create_model('local-dir:...')" in capsys.readouterr().out


def _noised(module: nn.Module, seed: int) -> nn.Module:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for tensor in module.state_dict().values():
            if tensor.is_floating_point():
                tensor.add_(torch.randn(tensor.shape, generator=gen) * 0.2)
    return module.eval()


def _timm_beit(**kwargs) -> nn.Module:
    import timm

    args = dict(img_size=48, patch_size=8, embed_dim=32, depth=2, num_heads=2, num_classes=5, **kwargs)
    return _noised(timm.create_model('beit_base_patch16_224', pretrained=False, **args), 7), args


@pytest.mark.parametrize('kwargs', [{}, dict(use_abs_pos_emb=True, global_pool='token', init_values=None)])
def test_timm_beit_state_dict_and_folder_match_timm(kwargs, tmp_path, capsys, max_delta):
    from safetensors.torch import save_file
    from timm.models import save_for_hf

    ref, args = _timm_beit(**kwargs)
    save_file(ref.state_dict(), str(tmp_path / 'w.safetensors'))
    save_for_hf(ref, str(tmp_path / 'folder'), model_args=args)
    x = _input(6)
    with torch.no_grad():
        want_feats = ref.forward_features(x)
        want = ref.forward_head(want_feats)
    for path, fmt in ((tmp_path / 'w.safetensors', 'beit'), (tmp_path / 'folder', 'timm')):
        with open_checkpoint(path) as src:
            assert src.format == fmt
        model = read_into_model(path)
        with torch.no_grad():
            feats = model.forward_features(x)
            max_delta(f'timm Beit {fmt} {kwargs} tokens', feats, want_feats, BOUND)
            max_delta(f'timm Beit {fmt} {kwargs} logits', model.forward_head(feats), want, BOUND)
        assert main(['convert', str(path), str(tmp_path / f'out_{fmt}')]) == 0
        assert 'verification passed vs timm Beit' in capsys.readouterr().out



@pytest.mark.parametrize('change, key, evidence', [
    (dict(num_heads=4), 'model_args.num_heads', 'blocks.0.attn.relative_position_bias_table (124, 2): (rows, heads)'),
    (dict(use_abs_pos_emb=True), 'model_args.use_abs_pos_emb', 'pos_embed absent'),
    (dict(qkv_bias=False), 'model_args.qkv_bias', 'blocks.0.attn.q_bias stored'),
    (dict(init_values=0), 'model_args.init_values', 'blocks.0.gamma_1 stored'),
])
def test_a_timm_beit_folder_whose_model_args_contradict_its_tensors_is_refused(change, key, evidence, tmp_path):
    """Every setting timm builds from a beit* folder's model_args is held against the tensors, so a folder describing
    another network than its weights is refused naming config.json, the key and the tensor that shows it."""
    import json

    from timm.models import save_for_hf

    ref, args = _timm_beit()
    save_for_hf(ref, str(tmp_path / 'folder'), model_args=args)
    config = json.loads((tmp_path / 'folder' / 'config.json').read_text())
    config['model_args'].update(change)
    (tmp_path / 'folder' / 'config.json').write_text(json.dumps(config))
    with pytest.raises(ViTVariantsError) as info:
        open_checkpoint(tmp_path / 'folder')
    assert info.value.key == key and evidence in str(info.value), str(info.value)
    assert str(tmp_path / 'folder' / 'config.json') in str(info.value)

def _hf_folder(tmp_path, data2vec: bool, classify: bool, **kwargs):
    import transformers

    cfg_cls = transformers.Data2VecVisionConfig if data2vec else transformers.BeitConfig
    cfg = cfg_cls(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128, image_size=48,
                  patch_size=8, hidden_act='gelu', **kwargs)
    stem = 'Data2VecVision' if data2vec else 'Beit'
    cls = getattr(transformers, f'{stem}ForImageClassification' if classify else f'{stem}Model')
    torch.manual_seed(0)
    model = _noised(cls(cfg), 11)
    model.save_pretrained(str(tmp_path / stem))
    return model, tmp_path / stem


@pytest.mark.parametrize('data2vec,classify,kwargs', [
    (False, True, dict(use_relative_position_bias=True, use_mean_pooling=True, num_labels=5)),
    (True, False, dict(use_shared_relative_position_bias=True, use_absolute_position_embeddings=True,
                       use_mean_pooling=False, layer_scale_init_value=0.0)),
])
def test_transformers_folder_matches_transformers(data2vec, classify, kwargs, tmp_path, capsys, max_delta):
    ref, folder = _hf_folder(tmp_path, data2vec, classify, **kwargs)
    x = _input(6)
    with torch.no_grad():
        out = (getattr(ref, 'data2vec_vision' if data2vec else 'beit') if classify else ref)(pixel_values=x)
        want = ref(pixel_values=x).logits if classify else out.last_hidden_state[:, 0]
    model = read_into_model(folder)
    assert model.config.block.norm_eps == 1e-12 and model.config.head.fc_norm == kwargs['use_mean_pooling']
    with torch.no_grad():
        feats = model.forward_features(x)
        max_delta(f'transformers {type(ref).__name__} tokens', feats, out.last_hidden_state, BOUND)
        max_delta(f'transformers {type(ref).__name__} output', model.forward_head(feats), want, BOUND)
    assert main(['convert', str(folder), str(tmp_path / 'out')]) == 0
    assert 'verification passed' in capsys.readouterr().out
    if classify:  # another grid: transformers' own run-time resize is neither rule, so that part is not checked
        assert main(['convert', str(folder), str(tmp_path / 'out64'), '--img-size', '64']) == 0
        assert 'was NOT checked: transformers resizes the relative position tables bilinearly' in \
            capsys.readouterr().out


def test_bad_tables_are_refused(tmp_path):
    state = torch.load(DATA / 'beit2_ft_meanpool.pth', weights_only=True)['model']
    bad = dict(state, **{'blocks.0.attn.relative_position_bias_table': torch.zeros(120, 2)})
    torch.save({'model': bad}, tmp_path / 'bad_rows.pth')
    with pytest.raises(ViTVariantsError) as e:
        open_checkpoint(tmp_path / 'bad_rows.pth')
    assert e.value.key == 'blocks.0.attn.relative_position_bias_table' and 'bad_rows.pth' in str(e.value)
    bad = dict(state, **{'blocks.1.attn.relative_position_bias_table': torch.zeros(124, 3)})
    torch.save({'model': bad}, tmp_path / 'bad_heads.pth')
    with pytest.raises(ViTVariantsError) as e:
        open_checkpoint(tmp_path / 'bad_heads.pth', layout=SimpleVisionTransformer.state_layout)
    assert e.value.key == 'blocks.1.attn.relative_position_bias_table' and 'bad_heads.pth' in str(e.value)
    shared = torch.load(DATA / 'beit2_pt_shared.pth', weights_only=True)['model']
    for name, state, key in (('per_block', state, 'blocks.0.attn.relative_position_bias_table'),
                             ('shared', shared, 'rel_pos_bias.relative_position_bias_table')):
        no_heads = {k: torch.zeros(v.shape[0], 0) if k.endswith('relative_position_bias_table') else v
                    for k, v in state.items()}
        torch.save({'model': no_heads}, tmp_path / f'{name}.pth')
        with pytest.raises(ViTVariantsError, match='at least one head') as e:
            open_checkpoint(tmp_path / f'{name}.pth', layout=SimpleVisionTransformer.state_layout)
        assert e.value.key == key and f'{name}.pth' in str(e.value)


def test_published_tag_route_reads_timms_hub_file(tmp_path, max_delta):
    """The tags load timm's Hub copy (a timm Beit state dict) through our reader: the same route, on a tiny file."""
    import timm
    from safetensors.torch import save_file

    ref, _ = _timm_beit()
    save_file(ref.state_dict(), str(tmp_path / 'model.safetensors'))
    cfg = timm.get_pretrained_cfg('simple_vit_base_patch16_beitv2_224.in1k_ft_in22k_in1k').to_dict()
    assert cfg['hf_hub_id'] == 'timm/beitv2_base_patch16_224.in1k_ft_in22k_in1k' and cfg['custom_load'] == 'hf'
    model = timm.create_model('simple_vit_base_patch16_beitv2_224', pretrained=True, img_size=48, patch_size=8,
                              embed_dim=32, depth=2, num_heads=2, mlp_dim=128, num_classes=5,
                              pretrained_cfg_overlay=dict(file=str(tmp_path / 'model.safetensors'),
                                                          custom_load=True)).eval()
    x = _input(6)
    with torch.no_grad():
        max_delta('tag route logits', model(x), ref(x), BOUND)


def test_loading_at_another_size_uses_beits_rule(max_delta):
    """timm.create_model(..., pretrained=True) at 64 px from the 48 px file: the tables fitted by BEiT's rule, as
    unilm's fine-tuning script loads them at 8x8."""
    import timm

    model = timm.create_model('simple_vit_base_patch16_beitv2_224', pretrained=True, img_size=64, patch_size=8,
                              embed_dim=32, depth=2, num_heads=2, mlp_dim=128, num_classes=10,
                              pretrained_cfg_overlay=dict(file=str(DATA / 'beit2_ft_meanpool.pth'),
                                                          custom_load=True)).eval()
    io = np.load(DATA / 'beit2_ft_meanpool_io.npz')
    max_delta('loaded at 64 px: tables', model.state_dict()['rel_pos.tables'], io['tables_8x8'], 0.0)
    _check_unilm(max_delta, 'loaded at 64 px', model, io, 8)
