"""EVA-02: BAAI's fine-tuned and MIM files and timm's ``eva02_*`` ports (state dict and Hub folder) convert, and the
folders, loaded as the README says, give the outputs EVA-02's own ``asuka`` code wrote at three grids, the other
two by EVA's own rule for a new size (tests/data/reference_eva02, see its README.md); our block and RoPE equal
timm's ``Eva`` exactly; a non-square target is said to be outside EVA-02's rule; bad input is one error naming
file and key."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from model_probes import load_like_user
from porting.cli import main
from porting.verification.eva02_ref import eva02_outputs
from porting.verification.result import Check
from timm_vit_variants import SimpleVisionTransformer
from timm_vit_variants.checkpoints import detect_format, open_checkpoint
from timm_vit_variants.errors import ViTVariantsError
from timm_vit_variants.eva02_models import EVA02_CFGS, EVA02_REF_GRID, EVA02_ROWS
from timm_vit_variants.parts import Learned, Rope

DATA = Path(__file__).parent / 'data' / 'reference_eva02'
# fixture -> (stored image size, the image sizes EVA's code was run at); patch 2
FIXTURES = {'eva02_ft_ts_module': (24, (16, 24, 40)), 'eva02_ft_bl_ls_model': (24, (16, 24, 40)),
            'eva02_mim_ts_module': (32, (24, 32, 40))}
CASES = [(name, size) for name, (_, sizes) in FIXTURES.items() for size in sizes]
BOUND = 2e-5


def _io(name: str):
    return np.load(DATA / f'{name}_io.npz', allow_pickle=False)


def _assert_like_eva(model: torch.nn.Module, name: str, size: int, max_delta, what: str) -> None:
    """``model`` gives what EVA's code wrote at size x size: logits and fc_norm-pooled features for a classifier, the
    final-norm patch tokens for the MIM backbone."""
    io = _io(name)
    x = torch.from_numpy(io[f'x_{size}']).float()
    grid = f'{size // 2}x{size // 2}'
    with torch.no_grad():
        feats = model.forward_features(x)
        if f'logits_{size}' in io.files:
            max_delta(f'{what} logits {grid}', model.forward_head(feats), io[f'logits_{size}'], BOUND)
            max_delta(f'{what} pooled {grid}', model.forward_head(feats, pre_logits=True), io[f'pooled_{size}'], BOUND)
        else:
            max_delta(f'{what} tokens {grid}', feats[:1, 1:], io[f'tokens_{size}'], BOUND)


@pytest.mark.parametrize('name, size', CASES)
def test_baai_file_converts_and_matches_eva(name, size, tmp_path, capsys, max_delta):
    stored = FIXTURES[name][0]
    out = tmp_path / 'out'
    resize = [] if size == stored else ['--img-size', str(size)]
    assert main(['convert', str(DATA / f'{name}.pth'), str(out), '--num-heads', '2', *resize]) == 0
    printed = ''.join(capsys.readouterr())  # the pass line on stdout, the reader's notes on stderr
    assert 'verification passed' in printed and "detected BAAI's EVA-02 file" in printed
    if size != stored:
        assert f'target geometry ({size}x{size}, patch 2) passed' in printed
        assert "the table resized as EVA-02's run_class_finetuning" in printed
    if 'mim' in name:
        assert 'mask_token, lm_head.weight, lm_head.bias dropped' in printed
    args = json.loads((out / 'config.json').read_text())['model_args']
    assert (args['block_type'], args['rope_type'], args['rope_ref_grid'], args['pos_embed_resample']) == \
        ('eva', 'eva02', EVA02_REF_GRID, 'deit')
    _assert_like_eva(load_like_user(out), name, size, max_delta, f'{name} converted')


@pytest.mark.parametrize('name, size', CASES)
def test_the_reference_is_evas_own(name, size, max_delta):
    """timm's Eva through timm's filter (and EVA's resize, transcribed) gives what EVA-02's own code wrote."""
    with open_checkpoint(DATA / f'{name}.pth', num_heads=2) as src:
        source, entry = src.config, src.weights_key
    target = None if size == FIXTURES[name][0] else source.replace(img_size=size)
    check = Check(str(DATA / f'{name}.pth'), 'eva02', source, target, None if target is None else 'deit',
                  weights_key=entry)
    io = _io(name)
    out = eva02_outputs(check, torch.from_numpy(io[f'x_{size}']).float())
    if f'logits_{size}' in io.files:
        max_delta(f'reference {name} logits {size // 2}', out.logits, io[f'logits_{size}'], BOUND)
    else:
        max_delta(f'reference {name} tokens {size // 2}', out.features[:1, 1:], io[f'tokens_{size}'], BOUND)


def _timm_eva02(arch: str) -> torch.nn.Module:
    """timm's own eva02_* entry, built tiny (width 64, 2 heads, 2 blocks, 56 px: a 4x4 grid), random weights."""
    import timm

    model = timm.create_model(arch, pretrained=False, embed_dim=64, depth=2, num_heads=2, num_classes=5, img_size=56,
                              dynamic_img_size=True).eval()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=gen))
    return model


ARCHS = ('eva02_tiny_patch14_224', 'eva02_base_patch14_448')  # Ti/S: fused qkv, packed SwiGLU; B/L: split, sub-LN


@pytest.mark.parametrize('arch', ARCHS)
def test_our_model_is_timms_eva_exactly(arch, tmp_path, max_delta):
    timm_model = _timm_eva02(arch)
    torch.save(timm_model.state_dict(), tmp_path / 'weights.pth')
    assert detect_format(tmp_path / 'weights.pth') == 'eva02'
    with open_checkpoint(tmp_path / 'weights.pth', layout=SimpleVisionTransformer.state_layout, num_heads=2) as src:
        ours = SimpleVisionTransformer(src.config.replace(weight_init='skip')).eval()
        ours.load_state_dict(src.state_dict())
    assert ours.config.position(Learned).resample == 'timm'
    for size in (56, 84, 42):  # the stored 4x4 grid, and 6x6 and 3x3, resized by timm's rule on both sides
        x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(size))
        with torch.no_grad():
            max_delta(f'{arch} vs timm Eva logits {size // 14}', ours(x), timm_model(x), 0.0)
            max_delta(f'{arch} vs timm Eva tokens {size // 14}', ours.forward_features(x),
                      timm_model.forward_features(x), 0.0)


@pytest.mark.parametrize('form', ['state_dict', 'folder'])
@pytest.mark.parametrize('arch', ARCHS)
def test_timm_eva02_converts_and_loads_like_timm(arch, form, tmp_path, capsys, max_delta):
    from timm.models import save_for_hf

    timm_model = _timm_eva02(arch)
    if form == 'folder':
        src, extra = tmp_path / 'timm', ()
        save_for_hf(timm_model, str(src), model_args=dict(embed_dim=64, depth=2, num_heads=2, num_classes=5,
                                                          img_size=56))
    else:
        src, extra = tmp_path / 'weights.pth', ('--num-heads', '2')
        torch.save(timm_model.state_dict(), src)
    out = tmp_path / 'out'
    assert main(['convert', str(src), str(out), '--img-size', '84', *extra]) == 0
    printed = ''.join(capsys.readouterr())
    assert "detected timm's eva02_* port" in printed and 'target geometry (84x84, patch 14) passed' in printed
    x = torch.randn(2, 3, 84, 84, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        max_delta(f'{arch} {form} converted logits 6x6', load_like_user(out)(x), timm_model(x), 1e-5)


def test_a_non_square_target_is_outside_eva02s_rule(tmp_path, capsys):
    """EVA-02 takes one integer image size: a 12x20 target is written (our model runs any grid) but said unchecked."""
    assert main(['convert', str(DATA / 'eva02_ft_ts_module.pth'), str(tmp_path / 'out'), '--num-heads', '2',
                 '--img-size', '24', '40']) == 0
    printed = capsys.readouterr().out
    assert 'the output at the target geometry (24x40, patch 2) was NOT checked' in printed
    assert 'EVA-02 takes one integer image size: it defines no non-square grid' in printed


def _bad_mlp(state):
    state['blocks.0.mlp.w12.weight'] = state['blocks.0.mlp.w12.weight'][:-1]


@pytest.mark.parametrize('change, key, reason', [
    (lambda s: s.update(pos_embed=s['pos_embed'][:, :-3]), 'pos_embed', 'square'),
    (_bad_mlp, 'blocks.0.mlp.w12.weight', 'even'),
    (lambda s: s.pop('blocks.1.attn.proj.bias'), 'blocks.1.attn.proj.bias', 'missing key'),
    (lambda s: s.update({'blocks.0.attn.extra': torch.zeros(2)}), 'blocks.0.attn.extra', 'unknown key'),
])
def test_bad_input_is_one_error_naming_file_and_key(change, key, reason, tmp_path, capsys):
    state = torch.load(DATA / 'eva02_ft_ts_module.pth', weights_only=True)
    change(state['module'])
    src = tmp_path / 'eva02_bad.pth'
    torch.save(state, src)
    with pytest.raises(ViTVariantsError) as raised:
        open_checkpoint(src, layout=SimpleVisionTransformer.state_layout, num_heads=2).close()
    assert raised.value.path == str(src) and raised.value.key == key, raised.value
    assert main(['convert', str(src), str(tmp_path / 'out'), '--num-heads', '2']) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(src) in err[0] and f"'{key}'" in err[0] and reason in err[0], err
    assert not (tmp_path / 'out').exists()


def test_rows_are_timms_eva02_networks():
    """Every row builds, and has the dimensions of timm's own eva02_* entry of its size and resolution."""
    import timm

    for name, (_, args, _) in EVA02_ROWS.items():
        size, img = name.split('_')[2], int(name.rsplit('_', 1)[1])
        with torch.device('meta'):
            ours = timm.create_model(name, pretrained=False)
            ref = timm.create_model(f'eva02_{size}_patch14_{img}', pretrained=False)
        ours_keys = {k: tuple(v.shape) for k, v in ours.state_dict().items()}
        ref_keys = {k: tuple(v.shape) for k, v in ref.state_dict().items() if not k.startswith('rope.')}
        if args['num_classes'] == 0:  # timm's MIM rows move the final norm to fc_norm and keep a 1000-class head
            ref_keys = {k.replace('fc_norm.', 'norm.'): v for k, v in ref_keys.items() if not k.startswith('head.')}
        assert ours_keys == ref_keys, name
        cfg = ours.config
        assert (cfg.position(Rope).ref_grid, cfg.position(Rope).ref_grid) == tuple(ref.rope.ref_feat_shape), name
        assert (cfg.position(Rope).theta, cfg.img_size) == (ref.rope.temperature, ref.patch_embed.img_size), name


def test_tags_name_baai_files():
    assert len(EVA02_CFGS) == 16 and len({cfg['hf_hub_filename'] for cfg in EVA02_CFGS.values()}) == 16
    for tag, cfg in EVA02_CFGS.items():
        assert cfg['hf_hub_id'] == 'Yuxin-CV/EVA-02' and cfg['custom_load'] == 'hf'
        assert tag.split('.')[0] in EVA02_ROWS and cfg['mean'] == (0.48145466, 0.4578275, 0.40821073)
    assert EVA02_CFGS['simple_vit_large_patch14_eva02_448.mim_m38m_ft_in22k']['num_classes'] == 21841


@pytest.mark.parametrize('size', (24, 40))
def test_a_tag_loads_baais_file_through_timm(size, tmp_path, monkeypatch, max_delta):
    """``create_model('...eva02_336.mim_in22k_ft_in1k', pretrained=True)``: timm downloads BAAI's file from the Hub
    (here: handed our fixture under that name) and gives it to our reader; at another size the table is fitted by
    EVA's own rule, so the model gives what EVA's code computes there."""
    import shutil

    import timm
    import timm.models._hub as hub

    asked = []

    def download(repo_id, filename, **kwargs):
        asked.append((repo_id, filename))
        path = tmp_path / Path(filename).name
        shutil.copy(DATA / 'eva02_ft_ts_module.pth', path)
        return str(path)

    monkeypatch.setattr(hub, 'hf_hub_download', download)
    model = timm.create_model('simple_vit_tiny_patch14_eva02_336.mim_in22k_ft_in1k', pretrained=True, embed_dim=32,
                              depth=2, num_heads=2, mlp_dim=85, patch_size=2, img_size=size, num_classes=10).eval()
    assert asked == [('Yuxin-CV/EVA-02', 'eva02/cls/in1k/eva02_Ti_pt_in21k_ft_in1k_p14.pt')]
    _assert_like_eva(model, 'eva02_ft_ts_module', size, max_delta, 'tag mim_in22k_ft_in1k')


def test_set_input_size_follows_evas_rule(tmp_path, max_delta):
    """A converted folder moved to another size in place (``set_input_size``) resizes its table by EVA's rule and
    recomputes the RoPE, so it gives what EVA's own code computes at that size."""
    out = tmp_path / 'out'
    assert main(['convert', str(DATA / 'eva02_ft_bl_ls_model.pth'), str(out), '--num-heads', '2']) == 0
    model = load_like_user(out)
    model.set_input_size(img_size=40)
    _assert_like_eva(model, 'eva02_ft_bl_ls_model', 40, max_delta, 'set_input_size(40)')


def test_detection_claims_eva02_only():
    """EVA-02's keys (BAAI's and timm's) are told from timm's other ViTs and Eva ports and from BEiT's (which has
    q/v biases and LayerScale too)."""
    import timm

    from timm_vit_variants.checkpoints.eva02 import is_eva02

    for arch, expected in (('eva02_tiny_patch14_224', True), ('eva02_base_patch14_448', True),
                           ('beit_base_patch16_224', False), ('beitv2_base_patch16_224', False),
                           ('vit_base_patch16_224', False), ('vit_small_patch14_dinov2', False),
                           ('vit_base_patch16_dinov3', False), ('vit_small_patch16_rope_mixed_224', False)):
        with torch.device('meta'):
            names = set(timm.create_model(arch, depth=1).state_dict())
        assert is_eva02(names) == expected, arch
    baai = set(torch.load(DATA / 'eva02_ft_bl_ls_model.pth', weights_only=True)['model'])
    assert is_eva02(baai) and 'blocks.0.gamma_1' in baai  # LayerScale and q_bias: timm's DINOv3-port signs too
