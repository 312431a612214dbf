"""DeiT-III: DeiT's own ``{'model': ...}`` files and timm's port of them (state dict and Hub folder) convert as DeiT-III
and match the outputs DeiT's own ``models_v2.py`` wrote at three grids, resized by DeiT's ``main.py`` rule
(tests/data/reference_deit, see its README.md); a file whose keys fit RoPE-ViT ``rope_axial_ape`` too is read as
the family its name says (DeiT-III without evidence), the choice named in the pass line."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from model_probes import load_like_user
from porting.cli import main
from porting.sources import url_cache_path
from porting.verification.deit3_ref import deit3_outputs
from porting.verification.result import Check
from timm_vit_variants import SimpleVisionTransformer
from timm_vit_variants.checkpoints import detect_format, open_checkpoint
from timm_vit_variants.deit_models import DEIT3_CFGS, DEIT3_ROWS

DATA = Path(__file__).parent / 'data' / 'reference_deit'
SIDES = (6, 8, 4)  # the stored grid, and two square ones by DeiT's main.py rule
FIXTURES = {'deit3_tiny': 10, 'deit3_tiny_headless': 0}
BOUND = 2e-5
ASSUMED = "the architecture 'DeiT-III' was"


def _input(side: int) -> torch.Tensor:
    """The fixtures' input at side x side: the top-left crop of the stored uint8 images, mapped to [-1, 1]."""
    u8 = np.load(DATA / 'deit3_inputs.npz')['p16_uint8'][:, :, :side * 16, :side * 16]
    return torch.from_numpy(np.float32(-1) + (u8.astype(np.float32) / np.float32(255)) * np.float32(2))


def _io(name: str):
    return np.load(DATA / f'{name}_io.npz')


def _convert(src: Path, out: Path, side: int, *extra: str) -> int:
    size = [] if side == 6 else ['--img-size', str(side * 16)]
    return main(['convert', str(src), str(out), *size, *extra])


def _assert_like_deit(folder: Path, name: str, side: int, max_delta, what: str) -> None:
    """The folder, loaded as the README says, gives DeiT's own tokens, pooled [CLS] and logits at side x side."""
    model = load_like_user(folder)
    io, grid = _io(name), f'{side}x{side}'
    with torch.no_grad():
        tokens = model.forward_features(_input(side))
    max_delta(f'{what} tokens {grid}', tokens, io[f'tokens_{grid}'], BOUND)
    max_delta(f'{what} pooled {grid}', model.forward_head(tokens, pre_logits=True), io[f'pooled_{grid}'], BOUND)
    classes = FIXTURES[name]
    assert model.num_classes == classes  # the stored head, not the row's
    if classes:
        with torch.no_grad():
            max_delta(f'{what} logits {grid}', model(_input(side)), io[f'logits_{grid}'], BOUND)


@pytest.mark.parametrize('side', SIDES)
@pytest.mark.parametrize('name', FIXTURES)
def test_deit_file_converts_as_deit3_and_matches_deit(name, side, tmp_path, capsys, max_delta):
    out = tmp_path / 'out'
    assert _convert(DATA / f'{name}.pth', out, side, '--num-heads', '4') == 0
    printed = capsys.readouterr().out
    assert f'verification passed, but {ASSUMED} assumed' in printed and "timm's port of DeiT-III" in printed
    if side != 6:
        assert f'target geometry ({side * 16}x{side * 16}, patch 16) passed' in printed
        assert "the table resized as DeiT's main.py" in printed
    config = json.loads((out / 'config.json').read_text())
    assert config['architecture'] == 'simple_vit_small_patch16_deit3_224'
    assert config['model_args']['pos_embed'] == 'learn' and config['model_args']['pos_embed_resample'] == 'deit'
    _assert_like_deit(out, name, side, max_delta, f'{name} via DeiT file')


@pytest.mark.parametrize('side', SIDES)
def test_the_reference_is_deits_own(side, max_delta):
    """timm's port through timm's filter, at DeiT's main.py resize, gives what DeiT's models_v2 wrote."""
    with open_checkpoint(DATA / 'deit3_tiny.pth', num_heads=4) as src:
        source, entry = src.config, src.weights_key
    target = None if side == 6 else source.replace(img_size=side * 16)
    out = deit3_outputs(Check(str(DATA / 'deit3_tiny.pth'), 'deit3', source, target, None if side == 6 else 'deit',
                              weights_key=entry), _input(side))
    io, grid = _io('deit3_tiny'), f'{side}x{side}'
    max_delta(f'reference tokens {grid}', out.features, io[f'tokens_{grid}'], BOUND)
    max_delta(f'reference logits {grid}', out.logits, io[f'logits_{grid}'], BOUND)


def _timm_port(tmp_path: Path):
    """DeiT's deit3_tiny file as timm loads DeiT's files: a deit3_small_patch16_224-style model, timm's filter."""
    import timm
    from timm.models.deit import checkpoint_filter_fn

    args = dict(embed_dim=64, depth=2, num_heads=4, img_size=96, num_classes=10)
    model = timm.create_model('deit3_small_patch16_224', pretrained=False, **args).eval()
    state = torch.load(DATA / 'deit3_tiny.pth', weights_only=True)['model']
    model.load_state_dict(checkpoint_filter_fn(state, model, adapt_layer_scale=True))
    return model, args


@pytest.mark.parametrize('side', SIDES)
@pytest.mark.parametrize('form', ['state_dict', 'folder'])
def test_timm_deit3_converts_as_deit3_and_matches_deit(form, side, tmp_path, capsys, max_delta):
    from timm.models import save_for_hf

    model, args = _timm_port(tmp_path)
    if form == 'folder':
        src, extra = tmp_path / 'timm', ()
        save_for_hf(model, str(src), model_args=args)
    else:
        src, extra = tmp_path / 'weights.pth', ('--num-heads', '4')
        torch.save(model.state_dict(), src)
    out = tmp_path / 'out'
    assert _convert(src, out, side, '--resample-like', 'deit', *extra) == 0
    printed = capsys.readouterr().out
    assert 'verification passed' in printed
    if side != 6:
        assert f"target geometry ({side * 16}x{side * 16}, patch 16) passed" in printed
        assert "DeiT's main.py table resize" in printed
    assert json.loads((out / 'config.json').read_text())['architecture'] == 'simple_vit_small_patch16_deit3_224'
    _assert_like_deit(out, 'deit3_tiny', side, max_delta, f'timm deit3 {form}')


@pytest.mark.parametrize('file_name, flag, family, kind', [
    ('rope_axial_ape_tiny.pth', (), 'RoPE-ViT rope_axial_ape', 'assumed'),
    ('deit_3_tiny_96_1k.pth', (), 'DeiT-III', 'assumed'),
    ('checkpoint.pth', (), 'DeiT-III', 'assumed'),  # no evidence: DeiT-III, by far the more used
    ('rope_axial_ape_tiny.pth', ('--from', 'deit3'), 'DeiT-III', 'given'),
    ('deit_3_tiny_96_1k.pth', ('--from', 'ropevit'), 'RoPE-ViT rope_axial_ape', 'given'),
])
def test_the_shared_layout_is_read_as_the_family_the_evidence_says(file_name, flag, family, kind, tmp_path, capsys):
    src = tmp_path / file_name
    shutil.copy(DATA / 'deit3_tiny.pth', src)
    out = tmp_path / 'out'
    assert main(['convert', str(src), str(out), '--num-heads', '4', *flag]) == 0
    printed = capsys.readouterr().out
    if kind == 'given':
        assert f"verification passed, but the architecture '{family}' and head count 4 were given" in printed
    else:
        assert f"verification passed, but the architecture '{family}' was assumed" in printed
    pos_embed = json.loads((out / 'config.json').read_text())['model_args']['pos_embed']
    assert pos_embed == ('learn+rope' if family.startswith('RoPE') else 'learn')


def test_a_hub_id_is_evidence(tmp_path):
    """A Hub download keeps its repo id in the cache path: naver-ai's rope_* repos are RoPE-ViT."""
    for repo, fmt in (('naver-ai--rope_axial_ape_deit_small_patch16_LS', 'ropevit'), ('someone--deit3-small', 'deit3')):
        snapshot = tmp_path / f'models--{repo}' / 'snapshots' / 'abc'
        snapshot.mkdir(parents=True)
        shutil.copy(DATA / 'deit3_tiny.pth', snapshot / 'pytorch_model.bin')
        assert detect_format(snapshot / 'pytorch_model.bin') == fmt


def test_a_non_square_target_is_not_checked_by_deits_rule(tmp_path, capsys):
    """DeiT's main.py resizes to square grids only: a 8x6 target is written but said to be unchecked."""
    assert main(['convert', str(DATA / 'deit3_tiny.pth'), str(tmp_path / 'out'), '--num-heads', '4',
                 '--img-size', '128', '96']) == 0
    printed = capsys.readouterr().out
    assert 'the output at the target geometry (128x96, patch 16) was NOT checked' in printed
    assert "DeiT's main.py resizes the table to square grids only" in printed
    assert 'target geometry (128x96, patch 16) passed' not in printed


def test_published_tags_are_deit3_files_read_as_deit3():
    """Every tag downloads one of README_revenge.md's files, whose name says DeiT-III, with DeiT-III's eval
    preprocessing; every row is a DeiT-III network (width, heads, patch, table, LayerScale)."""
    from timm_vit_variants.checkpoints.layerscale_blocks import layerscale_ape_format

    assert len(DEIT3_CFGS) == 16 and len({cfg['url'] for cfg in DEIT3_CFGS.values()}) == 16
    for tag, cfg in DEIT3_CFGS.items():
        assert cfg['url'].startswith('https://dl.fbaipublicfiles.com/deit/deit_3_')
        assert layerscale_ape_format(str(url_cache_path(cfg['url']))) == 'deit3'
        assert (cfg['crop_pct'], cfg['interpolation'], cfg['mean']) == (1.0, 'bicubic', (0.485, 0.456, 0.406))
        assert tag.split('.')[0] in DEIT3_ROWS
    dims = {name: (row[1].get('embed_dim'), row[1]['patch_size']) for name, row in DEIT3_ROWS.items()}
    assert dims['simple_vit_medium_patch16_deit3_224'] == (512, 16)
    assert dims['simple_vit_huge_patch14_deit3_224'][1] == 14
    assert 'deit_3_huge_224_21k_v1.pth' in DEIT3_CFGS['simple_vit_huge_patch14_deit3_224.fb_in22k_ft_in1k']['url']


def test_timm_builds_every_deit3_row():
    import timm

    for name in DEIT3_ROWS:
        with torch.device('meta'):
            model = timm.create_model(name, pretrained=False)
        assert isinstance(model, SimpleVisionTransformer) and model.pos_embed.shape[1] == model.patch_embed.num_patches


def test_verify_checks_a_resized_folder_against_deit3(tmp_path, capsys):
    out = tmp_path / 'out'
    assert _convert(DATA / 'deit3_tiny.pth', out, 8, '--num-heads', '4') == 0
    capsys.readouterr()
    assert main(['verify', str(DATA / 'deit3_tiny.pth'), str(out), '--num-heads', '4']) == 0
    printed = capsys.readouterr().out
    assert f'verification passed, but {ASSUMED} assumed' in printed and "the table resized as DeiT's main.py" in printed


@pytest.mark.parametrize('change, flag, key, reason', [
    (lambda s: s.update(pos_embed=s['pos_embed'][:, :35]), (), 'pos_embed', 'square'),
    (lambda s: s.update(pos_embed=s['pos_embed'][0]), (), 'pos_embed', '(1, tokens, width)'),
    (lambda s: s.update(freqs=torch.zeros(2, 2, 32)), ('--from', 'deit3'), 'freqs', "a 'ropevit' checkpoint"),
])
def test_bad_input_is_one_error_naming_file_and_key(change, flag, key, reason, tmp_path, capsys):
    state = torch.load(DATA / 'deit3_tiny.pth', weights_only=True)
    change(state['model'])
    src = tmp_path / 'deit_3_bad.pth'
    torch.save(state, src)
    assert main(['convert', str(src), str(tmp_path / 'out'), '--num-heads', '4', *flag]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith('error:') and str(src) in err[0], err
    assert f"'{key}'" in err[0] and reason in err[0], err
    assert not (tmp_path / 'out').exists()


def test_a_tag_loads_deits_file_through_timm(tmp_path, monkeypatch, max_delta):
    """``create_model('...deit3_224.fb_in1k', pretrained=True)``: timm hands the file it downloaded (here: found in its
    cache under the URL's name) to our reader, which reads DeiT's layout, LayerScale included."""
    import timm

    cache = tmp_path / 'torch-home' / 'hub' / 'checkpoints'
    cache.mkdir(parents=True)
    shutil.copy(DATA / 'deit3_tiny.pth', cache / 'deit_3_small_224_1k.pth')
    monkeypatch.setenv('TORCH_HOME', str(tmp_path / 'torch-home'))
    model = timm.create_model('simple_vit_small_patch16_deit3_224.fb_in1k', pretrained=True, embed_dim=64, depth=2,
                              num_heads=4, mlp_dim=256, img_size=96, num_classes=10).eval()
    with torch.no_grad():
        max_delta('tag fb_in1k logits 6x6', model(_input(6)), _io('deit3_tiny')['logits_6x6'], BOUND)


def test_assume_heads_reaches_deit3s_reader(capsys, tmp_path):
    """``--assume-heads`` assumes 64-wide heads for a DeiT-III file of a width DeiT-III never published (64 here),
    and says so; without it the file is refused, asking for the head count."""
    with pytest.raises(Exception, match='head'):
        open_checkpoint(DATA / 'deit3_tiny.pth')
    with open_checkpoint(DATA / 'deit3_tiny.pth', assume_heads=True) as src:
        assert src.config.num_heads == 1 and src.assumed['num_heads'] == (1, '64-wide heads (asked for with '
                                                                                 'assume_heads)')
    assert main(['convert', str(DATA / 'deit3_tiny.pth'), str(tmp_path / 'out'), '--assume-heads']) == 0
    assert 'head count 1 were assumed' in capsys.readouterr().out
