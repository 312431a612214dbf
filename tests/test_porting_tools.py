"""``vit-port inspect`` / ``verify``, ``save_pretrained_folder`` and the streaming shard writer."""
import json

import pytest
import torch
from safetensors import safe_open

import timm
from porting.cli import main
from porting.hub_folder import parse_size
from porting.verification import bigvision_posemb_sincos_2d
from porting.hub_folder import save_pretrained_folder
from porting.safetensors_writer import SafetensorsWriter
from timm_vit_variants import SimpleVisionTransformer
from timm_vit_variants.errors import ViTVariantsError

import checkpoint_fixtures as F


@pytest.fixture(scope='module')
def npz_sources(tmp_path_factory):
    d = tmp_path_factory.mktemp('npz')
    return {
        'vitjax': F.write_npz(d, 'vitjax.npz', F.vitjax_arrays()),
        'sincos': F.write_npz(d, 'bv.npz', F.bigvision_arrays('sincos', 'gap')),
    }


def test_inspect_table(npz_sources, capsys):
    assert main(['inspect', str(npz_sources['vitjax'])]) == 0
    out = capsys.readouterr().out
    assert 'Transformer/posembed_input/pos_embedding' in out and '1x17x32' in out and 'float32' in out
    assert 'format: vitjax' in out and "pos_embed_cls_slot" in out and 'learned position grid 4x4' in out


@pytest.mark.parametrize('name,extra', [('vitjax', ['--img-size', '48', '40']), ('sincos', ['--patch-size', '16'])])
def test_inspect_plot(npz_sources, tmp_path, capsys, name, extra):
    png = tmp_path / 'pos.png'
    assert main(['inspect', str(npz_sources[name]), '--plot', str(png), *extra]) == 0
    assert f'plot: {png}' in capsys.readouterr().out
    assert png.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n' and png.stat().st_size > 10_000


def test_inspect_resize_flags_need_plot(npz_sources, capsys):
    assert main(['inspect', str(npz_sources['vitjax']), '--img-size', '48']) == 2
    assert '--plot' in capsys.readouterr().err


def test_verify_command(tmp_path, capsys):
    src = F.write_hf_folder(tmp_path)
    good, other = tmp_path / 'good', tmp_path / 'other'
    assert main(['convert', str(src), str(good)]) == 0
    capsys.readouterr()
    assert main(['verify', str(src), str(good)]) == 0
    assert 'verification passed' in capsys.readouterr().out

    # A conversion of different weights must be caught.
    other_src = F.write_hf_folder(tmp_path / 'seed1', seed=1)
    assert main(['convert', str(other_src), str(other), '--no-verify']) == 0
    assert 'skipped: --no-verify' in capsys.readouterr().err
    assert main(['verify', str(src), str(other)]) == 1
    assert 'verification failed' in capsys.readouterr().err

    # A resized folder is checked at its own geometry, with the rule it records (issue 16: it used to be skipped).
    resized = tmp_path / 'resized'
    assert main(['convert', str(src), str(resized), '--img-size', '48', '--no-verify']) == 0
    capsys.readouterr()
    assert main(['verify', str(src), str(resized)]) == 0
    out = capsys.readouterr().out
    assert 'verification passed' in out and "checked at the folder's geometry (48x48" in out


def test_save_pretrained_folder_loads_in_timm(tmp_path):
    model = SimpleVisionTransformer(img_size=(32, 24), patch_size=8, embed_dim=32, depth=2, num_heads=2,
                                    num_classes=3, rep_size=16, class_token=True, global_pool='token',
                                    pos_embed='learn', pos_embed_cls_slot=True, act_layer='gelu').eval()
    out = save_pretrained_folder(model, tmp_path / 'ft', label_names=['a', 'b', 'c'], license='apache-2.0',
                                 datasets=['digits'])
    cfg = json.loads((out / 'config.json').read_text())
    assert cfg['label_names'] == ['a', 'b', 'c'] and cfg['num_features'] == 32 and cfg['global_pool'] == 'token'
    assert cfg['model_args']['rep_size'] == 16 and cfg['pretrained_cfg']['input_size'] == [3, 32, 24]
    assert cfg['pretrained_cfg']['mean'] == [0.5, 0.5, 0.5]
    assert 'apache-2.0' in (out / 'README.md').read_text()
    loaded = timm.create_model(f'local-dir:{out}', pretrained=True).eval()
    x = torch.randn(2, 3, 32, 24)
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))
    with pytest.raises(ViTVariantsError, match='already exists'):
        save_pretrained_folder(model, out)


def test_shard_writer_streams_out_of_order(tmp_path):
    tensors = {'a': torch.randn(10, 3), 'b': torch.arange(7, dtype=torch.float32), 'c': torch.randn(2, 2, 2)}
    writer = SafetensorsWriter(tmp_path, [(k, tuple(v.shape), v.dtype) for k, v in tensors.items()], 130)
    for key in ('c', 'a', 'b'):
        writer.write(key, tensors[key])
    assert writer.close() is not None
    (tmp_path / 'x').mkdir()
    small = SafetensorsWriter(tmp_path / 'x', [('a', (2,), torch.float32)], 10)
    with pytest.raises(ViTVariantsError, match='does not fit'):
        small.write('a', torch.zeros(3))
    with pytest.raises(ViTVariantsError, match='not part of the target'):
        small.write('z', torch.zeros(2))
    small.abort()
    index = json.loads((tmp_path / 'model.safetensors.index.json').read_text())
    assert index['metadata']['total_size'] == (30 + 7 + 8) * 4
    for key, tensor in tensors.items():
        with safe_open(str(tmp_path / index['weight_map'][key]), framework='pt') as f:
            assert torch.equal(f.get_tensor(key), tensor)


def test_parse_size():
    assert parse_size('5GB') == 5 * 10 ** 9 and parse_size('2MiB') == 2 * 2 ** 20 and parse_size('123') == 123
    for bad in ('', 'GB', 'x1', '-1GB'):
        with pytest.raises(ViTVariantsError):
            parse_size(bad)


def test_numpy_sincos_matches_big_vision_formula():
    """Spot values from the formula: channel blocks [sin x | cos x | sin y | cos y], omega_k = T^-(k/(q-1))."""
    table = bigvision_posemb_sincos_2d(3, 5, 8)[0]
    q = 2
    token = 1 * 5 + 4  # y=1, x=4
    omega = [1.0, 1.0 / 10_000.]
    expected = [torch.sin(torch.tensor(4 * w)) for w in omega] + [torch.cos(torch.tensor(4 * w)) for w in omega] \
        + [torch.sin(torch.tensor(1 * w)) for w in omega] + [torch.cos(torch.tensor(1 * w)) for w in omega]
    assert table.shape == (15, 4 * q)
    assert torch.allclose(torch.from_numpy(table[token]), torch.stack(expected).float(), atol=1e-6)


def test_truncated_converted_folder(tmp_path, capsys):
    model = SimpleVisionTransformer(img_size=16, patch_size=8, embed_dim=32, depth=1, num_heads=2, num_classes=3)
    out = save_pretrained_folder(model, tmp_path / 'm')
    weights = out / 'model.safetensors'
    weights.write_bytes(weights.read_bytes()[:-100])
    from porting.hub_folder import load_folder
    with pytest.raises(ViTVariantsError, match='model.safetensors'):
        load_folder(out)


def test_plot_is_tight_with_a_colour_scale_per_panel_from_the_data(tmp_path, monkeypatch):
    """Each panel's scale is its own data's range: a sin-cos table's similarities lie in a narrow band, where a
    fixed [-1, 1] scale would show one flat colour."""
    from matplotlib.figure import Figure

    from porting.inspection import colour_range, plot_position_similarity, position_tables, similarities
    from porting.pipeline import make_plan, open_source
    from porting.request import SourceOptions, TargetOptions

    saved = {}
    real_savefig = Figure.savefig

    def keep(fig, *args, **kwargs):
        saved['fig'], saved['kwargs'] = fig, kwargs
        return real_savefig(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, 'savefig', keep)
    sources = {'sincos': F.write_npz(tmp_path, 'bv.npz', F.bigvision_arrays('sincos', 'gap')),
               'learned': F.write_npz(tmp_path, 'vj.npz', F.vitjax_arrays())}
    for kind, npz in sources.items():
        with open_source(npz, SourceOptions(source_img_size=(32, 32))) as src:
            plan = make_plan(src, TargetOptions(img_size=(48, 48)))
            plot_position_similarity(src, plan, tmp_path / f'{kind}.png', source_name=npz.name)
            tables = position_tables(src, plan)
        fig = saved['fig']
        scales = [ax.images[0].get_clim() for ax in fig.axes if ax.images]
        assert scales == [colour_range(similarities(t)) for t in tables], kind  # one scale per panel, from its data
        assert 'Colour scale per panel' in fig._supxlabel.get_text() and npz.name in fig._suptitle.get_text()
        assert saved['kwargs']['bbox_inches'] == 'tight' and fig.get_layout_engine() is not None
        if kind == 'sincos':
            assert all(0 < low < high < 1 and high - low < 0.5 for low, high in scales)
        else:
            assert scales[0] != scales[1]
