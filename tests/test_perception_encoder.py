"""Perception Encoder towers of timm's ``Eva`` (``vit_pe_core_*``, ``vit_pe_lang_*``, ``vit_pe_spatial_*``): one tiny
tower of each kind, every tensor random (the MAP head and the projection too), saved by timm's ``save_for_hf``,
converts with ``vit-port convert`` and, loaded back as a user does, gives timm's own outputs at its grid, another
square grid and a non-square one (timm there: ``set_input_size``, and ``dynamic_img_size=True``); a conversion to a
non-square size equals timm moved to it; what PE's family does not express is refused by name."""
import copy
import json

import pytest
import torch

from model_probes import load_like_user
from porting.cli import main
from timm_vit_variants import SimpleViTConfig
from timm_vit_variants.errors import ViTVariantsError
from timm_vit_variants.families.pe_positions import PeRope
from timm_vit_variants.parts import Learned, MapPool

BOUND = 2e-5
# kind -> timm entry; what the tiny tower shows: core (a [CLS] with its table row, grid offset 1, the final norm,
# the MAP head of 8 heads and 4x MLP, the projection), lang G (no [CLS], offset 0, LayerScale, no final norm, the
# mean), spatial (a [CLS], no final norm, the mean; another reference grid, 32x32), and a non-square reference grid
KINDS = {'core': 'vit_pe_core_tiny_patch16_384', 'lang': 'vit_pe_lang_gigantic_patch14_448',
         'spatial': 'vit_pe_spatial_tiny_patch16_512', 'ref_3x5': 'vit_pe_spatial_small_patch16_512'}
_EXTRA = {'vit_pe_core_tiny_patch16_384': {'num_classes': 5},
          'vit_pe_spatial_small_patch16_512': {'ref_feat_shape': (3, 5)}}


def _args(arch: str) -> dict:
    patch = 14 if 'patch14' in arch else 16
    return dict(embed_dim=32, depth=2, num_heads=2, img_size=4 * patch, **_EXTRA.get(arch, {}))


def _timm_pe(arch: str, **extra) -> torch.nn.Module:
    """timm's entry, tiny, every parameter drawn at random (the same for the same entry)."""
    import timm

    model = timm.create_model(arch, pretrained=False, **_args(arch), **extra).eval()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():  # norm weights around 1
            is_norm_weight = name.endswith('.weight') and 'norm' in name.split('.')[-2]
            p.copy_(0.2 * torch.randn(p.shape, generator=gen) + float(is_norm_weight))
    return model


def _save(arch: str, folder) -> torch.nn.Module:
    from timm.models import save_for_hf

    model = _timm_pe(arch)
    save_for_hf(model, str(folder), model_args=_args(arch))
    return model


def _grids(arch: str):
    patch = 14 if 'patch14' in arch else 16
    return [(4 * patch, 4 * patch), (6 * patch, 6 * patch), (3 * patch, 5 * patch)]


@pytest.mark.parametrize('kind', list(KINDS))
def test_folder_converts_and_equals_timm_at_three_grids(kind, tmp_path, capsys, max_delta):
    arch = KINDS[kind]
    timm_model = _save(arch, tmp_path / 'src')
    assert main(['convert', str(tmp_path / 'src'), str(tmp_path / 'out')]) == 0
    printed = ''.join(capsys.readouterr())
    assert 'detected a timm Perception Encoder tower' in printed and 'verification passed' in printed, printed
    ours = load_like_user(tmp_path / 'out')
    dynamic = _timm_pe(arch, dynamic_img_size=True)
    for h, w in _grids(arch):
        moved = copy.deepcopy(timm_model)
        moved.set_input_size(img_size=(h, w))  # timm's own move: the table resized, the RoPE made for the grid
        x = torch.randn(2, 3, h, w, generator=torch.Generator().manual_seed(h * w))
        with torch.no_grad():
            feats = ours.forward_features(x)
            for what, theirs in (('set_input_size', moved), ('dynamic_img_size', dynamic)):
                max_delta(f'{kind} {h}x{w} tokens vs timm {what}', feats, theirs.forward_features(x), BOUND)
                max_delta(f'{kind} {h}x{w} pooled vs timm {what}', ours(x), theirs(x), BOUND)


@pytest.mark.parametrize('kind', ['core', 'lang'])
def test_a_non_square_target_equals_timm_moved_there(kind, tmp_path, capsys, max_delta):
    arch = KINDS[kind]
    timm_model = _save(arch, tmp_path / 'src')
    h, w = _grids(arch)[2]
    assert main(['convert', str(tmp_path / 'src'), str(tmp_path / 'out'), '--img-size', str(h), str(w)]) == 0
    assert f'target geometry ({h}x{w}' in ''.join(capsys.readouterr())
    ours = load_like_user(tmp_path / 'out')
    assert tuple(ours.pos_embed.shape[1:]) == (15 + (kind == 'core'), 32)
    timm_model.set_input_size(img_size=(h, w))
    x = torch.randn(2, 3, h, w, generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        max_delta(f'{kind} converted to {h}x{w} vs timm set_input_size', ours(x), timm_model(x), BOUND)


def test_the_folder_records_pes_rope_and_map_head(tmp_path, capsys):
    _save(KINDS['core'], tmp_path / 'src')
    assert main(['convert', str(tmp_path / 'src'), str(tmp_path / 'out')]) == 0
    args = json.loads((tmp_path / 'out' / 'config.json').read_text())['model_args']
    config = SimpleViTConfig.from_dict(args)
    assert config.position(PeRope) == PeRope(theta=10000., ref_grid=(24, 24), offset=1.)
    assert config.position(Learned) == Learned(cls_slot=True, resample='timm')
    assert config.head.pool == MapPool(heads=8, mlp_dim=128)


def test_a_family_schemes_settings_survive_the_flat_form():
    """``to_flat`` (what config.json's ``model_args`` holds) keeps the settings of a scheme a family adds."""
    config = SimpleViTConfig.of(embed_dim=32, num_heads=2, depth=1, img_size=64, patch_size=16,
                                positions=(Learned(cls_slot=True, resample='timm'),
                                           PeRope(theta=100., ref_grid=(32, 16), offset=0.)))
    assert SimpleViTConfig.from_dict(json.loads(json.dumps(config.to_flat()))) == config


@pytest.mark.parametrize('model_args, what', [
    (dict(rope_grid_indexing='ij'), "a RoPE in 'ij' order"),
    (dict(use_rot_pos_emb=False), 'no RoPE'),
    (dict(num_reg_tokens=2), 'register tokens'),
])
def test_what_the_family_does_not_express_is_refused_by_name(model_args, what, tmp_path, capsys):
    from timm.models import save_for_hf

    arch = KINDS['spatial']
    args = dict(_args(arch), **model_args)
    save_for_hf(_timm_pe(arch, **model_args), str(tmp_path / 'src'), model_args=args)
    assert main(['convert', str(tmp_path / 'src'), str(tmp_path / 'out')]) != 0
    err = capsys.readouterr().err
    assert err.count('error:') == 1 and what in err and 'config.json' in err and 'Traceback' not in err, err


def test_a_map_head_whose_heads_do_not_divide_the_width_is_one_error():
    with pytest.raises(ViTVariantsError, match='attn_pool_map_heads'):
        SimpleViTConfig.of(embed_dim=32, num_heads=2, global_pool=MapPool(heads=3))
