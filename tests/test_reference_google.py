"""Converters and loaders against Google's own code: fixtures written by big_vision (plain ViT and FlexiViT)
and vit_jax, with random weights, inputs and the logits their code computed (tests/data/reference/README.md).
"""
from pathlib import Path

import numpy as np
import pytest
import timm
import torch

import timm_vit_variants  # noqa: F401
from model_probes import load_like_user
from porting.cli import main
from porting.verification.rules import flexi_pi_resize, jax_linear, resize_grid_table, zoom_linear

REF = Path(__file__).resolve().parent / 'data' / 'reference'
TOL = 2e-5
TINY = dict(embed_dim=32, depth=2, num_heads=2, mlp_dim=128, num_classes=10)


def _io(name):
    return np.load(REF / f'{name}_io.npz')


def _params(name):
    return np.load(REF / f'{name}.npz')


def _nchw(images: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(images).permute(0, 3, 1, 2).contiguous()


def _logits(model, images) -> np.ndarray:
    with torch.no_grad():
        return model.eval()(_nchw(images)).numpy()


# -- the independent numpy transcriptions of each framework's resize rule -----------------------------

def test_numpy_rules_reproduce_googles_resizes():
    flexi, io = _params('flexivit_tiny'), _io('flexivit_tiny')
    grid = flexi['pos_embedding'][0].reshape(7, 7, 32)
    for side in (5, 6, 8, 15):  # FlexiViT at run time: jax.image.resize, antialiased when shrinking
        np.testing.assert_allclose(jax_linear(grid, side, side), io[f'posemb_grid{side}'], atol=1e-6)
    for side in (15, 5):  # FlexiViT's load(): vit.resample_posemb, scipy zoom
        np.testing.assert_allclose(zoom_linear(grid, side, side).reshape(1, -1, 32),
                                   io[f'pos_embedding_loadtime_grid{side}'], atol=1e-6)
    kernel = flexi['embedding/kernel'].transpose(3, 2, 0, 1)  # HWIO -> OIHW
    np.testing.assert_allclose(flexi_pi_resize(kernel, 8, 8).transpose(2, 3, 1, 0), io['kernel_patch8'], atol=1e-6)
    for patch in (16, 40, 48):
        np.testing.assert_allclose(flexi_pi_resize(kernel[:2], patch, patch).transpose(2, 3, 1, 0),
                                   io[f'kernel_patch{patch}_out0to1'], atol=1e-5)
    for name, key, prefix in (('bigvision_learn_tok', 'pos_embedding', 0),
                              ('vitjax_tiny', 'Transformer/posembed_input/pos_embedding', 1)):
        table = _params(name)[key]
        for size, side in ((48, 6), (24, 3)):
            np.testing.assert_allclose(resize_grid_table(table, (4, 4), (side, side), prefix, 'bigvision'),
                                       _io(name)[f'pos_embedding_{size}x{size}'], atol=1e-6)


# -- FlexiViT ---------------------------------------------------------------------------------------

def test_flexivit_tags_are_registered():
    tags = set(timm.list_pretrained('simple_vit*'))
    for size, letter in (('small', 's'), ('base', 'b'), ('large', 'l')):
        name = f'simple_vit_{size}_flexi_240.bv_i1k_1200ep'
        assert name in tags
        cfg = timm.models.get_pretrained_cfg(name)
        assert cfg.url == f'https://storage.googleapis.com/big_vision/flexivit/flexivit_{letter}_i1k.npz'
        assert cfg.custom_load and cfg.input_size == (3, 240, 240)


@pytest.mark.parametrize('patch', [8, 16, 30, 48])  # 48: a 5x5 grid, smaller than the stored 7x7 table
def test_flexivit_matches_big_vision_at_every_patch_size(patch):
    io = _io('flexivit_tiny')
    model = timm.create_model('simple_vit_small_flexi_240', pretrained=True, patch_size=patch, **TINY,
                              pretrained_cfg_overlay=dict(file=str(REF / 'flexivit_tiny.npz'), num_classes=10))
    assert model.patch_embed.patch_size == (patch, patch)
    np.testing.assert_allclose(_logits(model, io['inputs_240']), io[f'logits_patch{patch}'], atol=TOL)


@pytest.mark.parametrize('rule,key', [('bigvision', 'logits_loadtime_patch16'), ('flexi', 'logits_patch16')])
def test_convert_flexivit_with_either_big_vision_resize(tmp_path, capsys, rule, key):
    """big_vision resizes FlexiViT two ways: at load time (zoom) and at run time (jax.image.resize)."""
    out = tmp_path / rule
    assert main(['convert', str(REF / 'flexivit_tiny.npz'), str(out), '--img-size', '240', '--patch-size', '16',
                 '--resample-like', rule]) == 0
    io = _io('flexivit_tiny')
    np.testing.assert_allclose(_logits(load_like_user(out), io['inputs_240']), io[key], atol=TOL)


# -- plain big_vision and vit_jax ----------------------------------------------------------------------

@pytest.mark.parametrize('name,sizes', [
    ('bigvision_sincos_gap', ['32x32', '48x48', '32x48', '24x24']),
    ('bigvision_learn_tok', ['32x32', '48x48', '24x24']),
    ('vitjax_tiny', ['32x32', '48x48', '24x24']),
])
def test_converted_model_matches_google_at_every_geometry(tmp_path, capsys, name, sizes):
    """Source geometry, and each resized geometry that Google's own loader (vit.load /
    checkpoint.load_pretrained) produced."""
    io = _io(name)
    for size in sizes:
        h, w = map(int, size.split('x'))
        out = tmp_path / size
        extra = [] if size == '32x32' else ['--img-size', str(h), str(w)]
        assert main(['convert', str(REF / f'{name}.npz'), str(out), *extra]) == 0, capsys.readouterr().err
        np.testing.assert_allclose(_logits(load_like_user(out), io[f'inputs_{size}']), io[f'logits_{size}'],
                                   atol=TOL, err_msg=size)
