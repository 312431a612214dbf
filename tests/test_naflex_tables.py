"""timm NaFlexVit position tables beyond the antialiased, half-pixel, per-axis resize: RADIO's CPE (the table kept at
its own size, resized to the square of the longer side and cropped: the 'radio' family's scheme), timm's
aspect-preserving resize (``Learned.ar_preserving``), and the other F.interpolate rules we name. Each tiny tower
(depth 1, random weights, its table included) is saved by timm's ``save_for_hf``, converted by the CLI, loaded back as
a user does, and run against timm's own NaFlexVit: whole images at the default grid and at a non-square one, and a
packed NaFlex batch of images at their own sizes (timm's naflex forward with patch_coord / patch_valid)."""
import json

import pytest
import timm
import torch
from timm.models import save_for_hf

import timm_vit_variants  # noqa: F401
from model_probes import load_like_user
from porting.cli import main
from timm_vit_variants.checkpoints import open_checkpoint
from timm_vit_variants.errors import ViTVariantsError
from timm_vit_variants.naflex_transforms import naflex_batch

TOL = 2e-5
TINY = dict(embed_dim=32, depth=1, num_heads=2)
# RADIO's table, small: 12 x 12 patches, the towers' default input 96 px (a 6 x 6 grid).
RADIO_TABLE = dict(pos_embed_grid_size=(12, 12))
RADIO = ('naflexvit_base_patch16_radio_v3', 'naflexvit_large_patch16_radio_v3', 'naflexvit_huge_patch16_radio_v3',
         'naflexvit_giant_patch16_radio_v3', 'naflexvit_so400m_patch16_radio_v4', 'naflexvit_huge_patch16_radio_v4')
# Image sizes of the NaFlex batch: grids 3x7, 9x3, 12x4 (the longer side the table's), 5x5, 14x6 (beyond the table).
NAFLEX_SIZES = [(48, 112), (144, 48), (192, 64), (80, 80), (224, 96)]
NON_SQUARE = (80, 208)  # a 5x13 grid


def _tower(name, **args):
    """timm's tiny ``name`` in eval mode, every weight (the table too) perturbed so no output is trivial."""
    model = timm.create_model(name, pretrained_cfg_overlay=dict(input_size=(3, 96, 96)), **args).eval()
    torch.manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return model


def _converted(reference, args, tmp_path, capsys):
    """``reference`` saved by timm, converted by the CLI (which verifies it), loaded back; and its model_args."""
    save_for_hf(reference, str(tmp_path / 'hub'), model_args=args)
    code = main(['convert', str(tmp_path / 'hub'), str(tmp_path / 'out')])
    captured = capsys.readouterr()
    assert code == 0 and 'verification passed vs timm' in captured.out, captured.out + captured.err
    return load_like_user(tmp_path / 'out'), json.loads((tmp_path / 'out' / 'config.json').read_text())['model_args']


def _compare_with_timm(name, ours, reference, max_delta):
    """Ours against timm: whole images at the default grid and a non-square one, and a packed NaFlex batch."""
    generator = torch.Generator().manual_seed(7)
    for size in (tuple(ours.config.img_size), NON_SQUARE):
        x = torch.randn(2, 3, *size, generator=generator)
        with torch.no_grad():
            max_delta(f'{name}, {size[0]}x{size[1]} px: tokens', ours.forward_features(x),
                      reference.forward_features(x), TOL)
            max_delta(f'{name}, {size[0]}x{size[1]} px: output', ours(x), reference(x), TOL)
    images = [torch.randn(3, h, w, generator=generator) for h, w in NAFLEX_SIZES]
    batch = naflex_batch(images, 16)
    with torch.no_grad():
        theirs = reference.forward_features(**batch)['patches']
        mine = ours.forward_features(batch)['patches']
        valid, prefix = batch['patch_valid'], reference.num_prefix_tokens
        max_delta(f'{name}, NaFlex batch of {len(images)} grids: patch tokens', mine[:, prefix:][valid],
                  theirs[:, prefix:][valid], TOL)
        max_delta(f'{name}, NaFlex batch: prefix tokens', mine[:, :prefix], theirs[:, :prefix], TOL)
        max_delta(f'{name}, NaFlex batch: output', ours(batch), reference(batch), TOL)


@pytest.mark.parametrize('name', RADIO)
def test_radio_towers_convert_with_their_cpe(name, tmp_path, capsys, max_delta):
    """RADIO's table is kept at its own 12x12 grid (not fitted to the 96 px input) and read as RADIO reads it, with
    each checkpoint's align_corners, at every grid: below, at and beyond the table's."""
    args = dict(TINY, **RADIO_TABLE)
    reference = _tower(name, **args)
    ours, cfg = _converted(reference, args, tmp_path, capsys)
    corners = name.endswith(('base_patch16_radio_v3', 'huge_patch16_radio_v3'))
    assert (cfg['img_size'], cfg['pos_embed']) == (96, 'radio')
    assert cfg['positions'] == [{'scheme': 'radio', 'table_grid': [12, 12], 'align_corners': corners}]
    assert tuple(ours.abs_pos.table.shape) == (1, 144, 32) and ours.pos_embed is None
    _compare_with_timm(name, ours, reference, max_delta)


def test_aspect_preserving_table_converts(tmp_path, capsys, max_delta):
    """naflexvit_base_patch16_par_gap: the learned table resized (bicubic, antialiased) to the square of the longer
    side, then cropped; written to config.json as pos_embed_ar_preserving, only there."""
    args = dict(TINY, pos_embed_grid_size=(6, 6), num_classes=5)
    reference = _tower('naflexvit_base_patch16_par_gap', **args)
    ours, cfg = _converted(reference, args, tmp_path, capsys)
    assert (cfg['pos_embed'], cfg['pos_embed_resample'], cfg['pos_embed_ar_preserving']) == ('learn', 'timm', True)
    assert 'positions' not in cfg
    _compare_with_timm('naflexvit_base_patch16_par_gap', ours, reference, max_delta)


@pytest.mark.parametrize('options, rule', [(dict(pos_embed_interp_mode='bilinear', pos_embed_antialias=False,
                                                 pos_embed_align_corners=True), 'bigvision'),
                                           (dict(pos_embed_interp_mode='bicubic', pos_embed_antialias=False), 'hf')])
def test_other_named_table_resizes_convert(options, rule, tmp_path, capsys, max_delta):
    """A NaFlexVit table resize that one of our rules computes (F.interpolate of the same mode, corners, antialias)
    converts with that rule; before, only bilinear or bicubic antialiased ones did."""
    args = dict(TINY, pos_embed_grid_size=(6, 6), **options)
    reference = _tower('naflexvit_base_patch16_siglip', **args)
    ours, cfg = _converted(reference, args, tmp_path, capsys)
    assert cfg['pos_embed_resample'] == rule and 'pos_embed_ar_preserving' not in cfg
    _compare_with_timm(f'naflexvit ({rule} table resize)', ours, reference, max_delta)


@pytest.mark.parametrize('options, said', [(dict(pos_embed_use_grid_sample=True), 'grid_sample'),
                                           (dict(pos_embed_interp_mode='nearest'), "'nearest'")])
def test_a_table_resize_no_rule_computes_is_refused_by_name(options, said, tmp_path):
    args = dict(TINY, pos_embed_grid_size=(6, 6), **options)
    save_for_hf(_tower('naflexvit_base_patch16_siglip', **args), str(tmp_path / 'hub'), model_args=args)
    with pytest.raises(ViTVariantsError, match=f'resizes its table by {said}') as refused:
        open_checkpoint(tmp_path / 'hub')
    assert refused.value.key == 'architecture'


@pytest.mark.parametrize('name, options', [('naflexvit_base_patch16_parfac_gap', {}),
                                           ('naflexvit_base_patch16_gap', dict(pos_embed='factorized'))])
def test_factorised_tables_convert(name, options, tmp_path, capsys, max_delta):
    """Factorised tables (pos_embed_y, pos_embed_x: the 'factorized' scheme's own), each resized linearly to its side,
    from the longer side's square where aspect-preserving (parfac_gap); written to config.json whole."""
    args = dict(TINY, pos_embed_grid_size=(6, 7), num_classes=5, **options)
    reference = _tower(name, **args)
    ours, cfg = _converted(reference, args, tmp_path, capsys)
    square = name.endswith('parfac_gap')
    assert cfg['positions'] == [{'scheme': 'factorized', 'table_grid': [6, 7], 'ar_preserving': square}]
    assert (tuple(ours.abs_pos.y.shape), tuple(ours.abs_pos.x.shape)) == ((1, 6, 32), (1, 7, 32))
    _compare_with_timm(name, ours, reference, max_delta)


def test_a_state_dict_with_factorised_tables_says_what_it_assumed(tmp_path, capsys, max_delta):
    """A bare state dict does not record aspect preservation: NaFlexVitCfg's default (off) is assumed, and said."""
    args = dict(TINY, pos_embed_grid_size=(6, 6), pos_embed='factorized', num_classes=5, global_pool='avg')
    reference = _tower('naflexvit_base_patch16_siglip', **args)
    torch.save(reference.state_dict(), tmp_path / 'fac.pth')
    code = main(['convert', str(tmp_path / 'fac.pth'), str(tmp_path / 'out'), '--num-heads', '2',
                 '--act-layer', 'gelu_tanh'])  # SigLIP's, which a state dict does not record
    captured = capsys.readouterr()
    assert code == 0 and 'verification passed' in captured.out, captured.out + captured.err
    assert 'vs timm NaFlexVit + timm load_state_dict' in captured.out
    assert 'assumed: architecture=' in captured.err and 'pos_embed_ar_preserving=False' in captured.err
    _compare_with_timm('naflexvit factorised, state dict', load_like_user(tmp_path / 'out'), reference, max_delta)


def test_an_aspect_preserving_table_fitted_to_another_size_is_what_timm_computes_there(tmp_path, capsys, max_delta):
    """Converted at another size (--img-size 64 144), the table is fitted to the new grid by the same rule (the
    longer side's square, cropped), so the model at its new nominal size is timm's source at that size; the target
    check's reference crops the same way."""
    args = dict(TINY, pos_embed_grid_size=(6, 6), pos_embed_interp_mode='bicubic', pos_embed_ar_preserving=True)
    reference = _tower('naflexvit_base_patch16_siglip', **args)
    save_for_hf(reference, str(tmp_path / 'hub'), model_args=args)
    code = main(['convert', str(tmp_path / 'hub'), str(tmp_path / 'out'), '--img-size', '64', '144'])
    captured = capsys.readouterr()
    assert code == 0 and 'target geometry (64x144, patch 16) passed' in captured.out, captured.out + captured.err
    x = torch.randn(2, 3, 64, 144, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        max_delta('aspect-preserving table fitted to 64x144: output', load_like_user(tmp_path / 'out')(x), reference(x),
                  TOL)
