"""``vit-port export`` and ``porting.export``: ONNX and .pt2 files for any batch and H x W, each proved by running it.

Every test runs the written file itself (ONNX Runtime, or ``torch.export.load``) against a reference
built independently of the export code (timm's ``local-dir:`` loader, or the eager model), at sizes
that are non-square and not divisible by the patch, and with batch 1 and 3.
"""
import hashlib
import json
from pathlib import Path

import pytest
import timm
import torch

import timm_vit_variants  # noqa: F401  (registers simple_vit_*)
from porting import export as export_module
from porting.cli import main
from porting.export import METADATA_FILE, export_onnx, export_pt2
from porting.hub_folder import save_pretrained_folder
from timm_vit_variants import SimpleVisionTransformer

import checkpoint_fixtures as F

onnx = pytest.importorskip('onnx')
ort = pytest.importorskip('onnxruntime')
pytest.importorskip('onnxscript')

# Patch 8 throughout: 33x31 and 17x57 are not divisible by it.
SIZES = [(32, 32), (24, 64), (33, 31), (48, 40), (17, 57), (16, 16)]
TINY = dict(embed_dim=32, depth=1, num_heads=2, mlp_dim=64, patch_size=8, img_size=32, num_classes=5)


def _inputs(sizes, channels=3):
    gen = torch.Generator().manual_seed(7)
    return [torch.randn(1 + 2 * (i % 2), channels, h, w, generator=gen) for i, (h, w) in enumerate(sizes)]


def _run_onnx(path, x):
    session = ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])
    return torch.from_numpy(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0])


def _assert_matches(run, reference, sizes=SIZES, channels=3):
    with torch.no_grad():
        for x in _inputs(sizes, channels):
            torch.testing.assert_close(run(x), reference(x), rtol=0, atol=1e-4)


def _random_model(**kwargs):
    torch.manual_seed(0)
    model = timm.create_model('simple_vit_tiny', **{**TINY, **kwargs}).eval()
    with torch.no_grad():
        model.head.weight.normal_()  # zero-initialised otherwise
        if model.pos_embed is not None:
            model.pos_embed.normal_()  # a wrong resample rule must change the logits
    return model


def _leftovers(folder):
    return sorted(p.name for p in Path(folder).iterdir() if p.name.startswith('.'))


@pytest.fixture(scope='module')
def converted(tmp_path_factory):
    """A vit_jax checkpoint (learned table with a cls slot, big_vision rule) converted by vit-port."""
    root = tmp_path_factory.mktemp('export')
    npz = F.write_npz(root, 'vitjax.npz', F.vitjax_arrays())
    assert main(['convert', str(npz), str(root / 'folder')]) == 0
    return dict(root=root, npz=npz, folder=root / 'folder')


def test_cli_onnx_is_dynamic_and_matches_timm(converted, tmp_path, capsys):
    out = tmp_path / 'model.onnx'
    capsys.readouterr()
    assert main(['export', str(converted['folder']), str(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == f'{out} (ONNX opset 18, dynamic batch, height and width)'
    assert lines[1].startswith('verification passed vs PyTorch eager (the file run by ONNX Runtime CPU at 7 sizes:')
    assert '33x31' in lines[1] and 'max|dlogits|=' in lines[1]

    model = onnx.load(str(out))
    onnx.checker.check_model(model, full_check=True)
    dims = [d.dim_param or d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == ['batch', 3, 'height', 'width'] and model.opset_import[0].version == 18
    meta = {p.key: p.value for p in model.metadata_props}
    assert json.loads(meta['mean']) == json.loads(meta['std']) == [0.5, 0.5, 0.5]
    assert json.loads(meta['patch_size']) == [8, 8]
    assert meta['source_sha256'] == hashlib.sha256(converted['npz'].read_bytes()).hexdigest()

    reference = timm.create_model(f'local-dir:{converted["folder"]}', pretrained=True).eval()
    _assert_matches(lambda x: _run_onnx(out, x), reference)


@pytest.mark.parametrize('kwargs', [
    dict(in_chans=1),  # sin-cos table computed in the graph
    dict(pos_embed='learn', pos_embed_resample='timm'),  # bicubic + antialias: ONNX Resize antialias=1
], ids=['sincos_1ch', 'learn_timm_rule'])
def test_python_api_onnx_from_a_module(kwargs, tmp_path):
    model = _random_model(**kwargs)
    out = tmp_path / 'm.onnx'
    result = export_onnx(model, out)
    assert result.verification.status == 'passed' and result.verification.max_abs_logits <= 1e-4
    assert result.verification.notes == []  # the logits vary, so the check could fail
    assert result.metadata['source_sha256'].startswith('not recorded')
    graph = onnx.load(str(out)).graph
    if 'pos_embed_resample' in kwargs:
        resize = [n for n in graph.node if n.op_type == 'Resize']
        assert resize and {a.name: onnx.helper.get_attribute_value(a) for a in resize[0].attribute}['antialias'] == 1
    _assert_matches(lambda x: _run_onnx(out, x), model, channels=model.in_chans)


def test_cli_pt2_loads_runs_and_keeps_guards(converted, tmp_path, capsys):
    out = tmp_path / 'model.pt2'
    capsys.readouterr()
    assert main(['export', str(converted['folder']), str(out)]) == 0  # the format follows the suffix
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == f'{out} (torch.export .pt2, dynamic batch, height and width)'
    assert lines[1].startswith('verification passed vs PyTorch eager (the file loaded by torch.export.load')
    extra = {METADATA_FILE: ''}
    program = torch.export.load(str(out), extra_files=extra)
    assert json.loads(json.loads(extra[METADATA_FILE])['patch_size']) == [8, 8]
    reference = timm.create_model(f'local-dir:{converted["folder"]}', pretrained=True).eval()
    _assert_matches(program.module(), reference)
    with pytest.raises(Exception, match='Guard failed'):  # below patch + 1 the program refuses, never guesses
        program.module()(torch.randn(1, 3, 8, 32))


def test_static_size_and_opset(converted, tmp_path, capsys):
    out = tmp_path / 'static.onnx'
    assert main(['export', str(converted['folder']), str(out), '--static', '40', '24', '--opset', '20']) == 0
    assert 'dynamic batch, fixed 40x24' in capsys.readouterr().out
    model = onnx.load(str(out))
    assert [d.dim_param or d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim] == ['batch', 3, 40, 24]
    assert model.opset_import[0].version == 20
    reference = timm.create_model(f'local-dir:{converted["folder"]}', pretrained=True).eval()
    _assert_matches(lambda x: _run_onnx(out, x), reference, sizes=[(40, 24), (40, 24)])
    with pytest.raises(Exception, match='dimensions'):
        _run_onnx(out, torch.randn(1, 3, 32, 32))


def test_a_zero_head_is_reported_as_a_check_that_proves_little(tmp_path):
    model = timm.create_model('simple_vit_tiny', **TINY).eval()  # the family's zero-initialised head
    result = export_pt2(model, tmp_path / 'm.pt2')
    assert result.verification.status == 'passed'
    assert 'constant (an all-zero head?)' in result.verification.summary()


def test_failed_verification_leaves_nothing(tmp_path, monkeypatch):
    real = export_module._onnx_runner
    monkeypatch.setattr(export_module, '_onnx_runner', lambda path: (lambda x: real(path)(x) + 1e-3))
    out = tmp_path / 'm.onnx'
    with pytest.raises(timm_vit_variants.ViTVariantsError, match='verification failed'):
        export_onnx(_random_model(), out)
    assert not out.exists() and _leftovers(tmp_path) == []


def _fails(capsys, argv, code=1):
    capsys.readouterr()
    assert main(argv) == code
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].startswith('error: ') and 'Traceback' not in err
    return err


def test_bad_input_is_one_clear_error_and_leaves_nothing(converted, tmp_path, capsys):
    folder, out = str(converted['folder']), tmp_path / 'out.onnx'
    assert 'unknown model' in _fails(capsys, ['export', 'simple_vit_nope', str(out)])
    assert 'no such folder' in _fails(capsys, ['export', str(tmp_path / 'missing'), str(out)])
    assert 'convert checkpoint files' in _fails(capsys, ['export', str(converted['npz']), str(out)])
    assert 'No pretrained weights' in _fails(capsys, ['export', 'simple_vit_tiny', str(out)])
    err = _fails(capsys, ['export', folder, str(out), '--opset', '17'], code=2)  # a usage error, before any work
    assert 'opset 17 is not supported' in err and '18 to 23' in err
    assert '--opset applies to --format onnx' in _fails(capsys, ['export', folder, 'm.pt2', '--opset', '18'], code=2)
    assert _fails(capsys, ['export', folder, str(out), '--static', '0', '32'], code=2)
    blocker = tmp_path / 'a_file'
    blocker.write_text('x')
    assert 'not a directory' in _fails(capsys, ['export', folder, str(blocker / 'out.onnx')])
    assert 'inside the source folder' in _fails(capsys, ['export', folder, str(converted['folder'] / 'm.onnx')])
    out.write_text('keep me')
    assert 'already exists' in _fails(capsys, ['export', folder, str(out)])
    assert out.read_text() == 'keep me'
    assert _leftovers(tmp_path) == [] and sorted(p.name for p in tmp_path.iterdir()) == ['a_file', 'out.onnx']


def test_static_size_a_non_padding_model_cannot_take(tmp_path, capsys):
    model = SimpleVisionTransformer(**TINY, dynamic_img_pad=False)
    folder = save_pretrained_folder(model, tmp_path / 'nopad')
    err = _fails(capsys, ['export', str(folder), str(tmp_path / 'm.onnx'), '--static', '36', '32'])
    assert "key 'static'" in err and 'not divisible by patch size 8x8' in err and 'dynamic_img_pad' in err
    assert not (tmp_path / 'm.onnx').exists() and _leftovers(tmp_path) == []
