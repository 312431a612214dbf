"""The command line's habits: usage errors exit 2, a flag that needs another refuses without it, OUT must be a
folder, a sharded output says how to load it, a missing extra is named before any work, ``--version``, the trainer
refuses a run of 0 steps, and one public Python API spelled as the flags."""
import json
import sys
from pathlib import Path

import pytest

import timm_vit_variants  # noqa: F401  (registers simple_vit_*)
from porting.cli import main
from timm_vit_variants.errors import ViTVariantsError

import checkpoint_fixtures as F

REPO = Path(__file__).resolve().parents[1]
NPZ = REPO / 'tests' / 'data' / 'reference' / 'bigvision_learn_tok.npz'


def _exit(capsys, argv):
    code = main(argv)
    out = capsys.readouterr()
    assert 'Traceback' not in out.err
    return code, out


@pytest.mark.parametrize('flags, words', [
    (['--limit', 'foo=1'], 'expected NAME=N with NAME one of depth'),
    (['--limit', 'depth=lots'], 'limit depth needs a positive integer'),
    (['--tol', '-1'], 'expected a finite number >= 0'),
    (['--crop-pct', '2'], 'expected a number in (0, 1]'),
    (['--num-classes', '-3'], 'expected a non-negative integer'),
])
def test_bad_flag_values_are_usage_errors(capsys, tmp_path, flags, words):
    code, out = _exit(capsys, ['convert', str(NPZ), str(tmp_path / 'out'), *flags])
    assert code == 2 and words in out.err and out.err.startswith('usage: ')
    assert not (tmp_path / 'out').exists()


def test_export_opset_out_of_range_is_a_usage_error(capsys, tmp_path):
    code, out = _exit(capsys, ['export', str(tmp_path), str(tmp_path / 'm.onnx'), '--opset', '17'])
    assert code == 2 and 'opset 17 is not supported' in out.err


@pytest.mark.parametrize('flag', [['--dry-run'], ['--private'], ['--create-pr'], ['--revision', 'dev'],
                                  ['--commit-message', 'x'], ['--overwrite-card']])
def test_upload_flags_need_push_to(capsys, tmp_path, flag):
    code, out = _exit(capsys, ['convert', str(NPZ), str(tmp_path / 'out'), *flag])
    assert code == 2 and f'{flag[0]} only apply with --push-to REPO_ID' in out.err
    assert not (tmp_path / 'out').exists()


@pytest.mark.parametrize('name, words', [('m.onnx', 'vit-port export FOLDER'), ('m.pt2', 'vit-port export FOLDER'),
                                         ('model.safetensors', 'name the folder')])
def test_out_named_like_a_file_is_refused(capsys, tmp_path, name, words):
    for command in ('convert', 'resize'):
        code, out = _exit(capsys, [command, str(NPZ), str(tmp_path / name), '--img-size', '48'])
        assert code == 2 and 'convert writes a folder' in out.err and words in out.err, command
        assert not (tmp_path / name).exists()


def test_sharded_output_says_how_to_load_it(capsys, tmp_path):
    import torch
    import vit_port

    out = tmp_path / 'sharded'
    code, text = _exit(capsys, ['convert', str(NPZ), str(out), '--max-shard-size', '20KB'])
    assert code == 0 and len(list(out.glob('model-*-of-*.safetensors'))) > 1
    note = next(line for line in text.err.splitlines() if 'shards' in line)
    assert "timm's local-dir: and hf-hub: read only a single model.safetensors" in note
    assert f'vit_port.load_folder({str(out)!r})' in note and '--max-shard-size' in note
    model = vit_port.load_folder(out)  # what the note says works
    assert model(torch.zeros(1, 3, 32, 32)).shape == (1, 10)


def test_version_names_the_package(capsys):
    from importlib.metadata import version

    assert main(['--version']) == 0
    assert capsys.readouterr().out.strip() == f'vit-port {version("timm-vit-variants")} (timm-vit-variants)'
    assert version('timm-vit-variants') == timm_vit_variants.__version__


# -- missing extras: named, before any work ---------------------------------------------------------------

def test_plot_without_matplotlib_names_the_extra_before_the_table(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, 'matplotlib', None)
    code, out = _exit(capsys, ['inspect', str(NPZ), '--plot', str(tmp_path / 'p.png')])
    assert code == 1 and out.out == ''
    assert out.err.strip() == ("error: inspect --plot needs matplotlib: pip install 'timm-vit-variants[plot]'")


def test_onnx_export_without_onnxruntime_names_the_extra(capsys, tmp_path, monkeypatch):
    folder = tmp_path / 'folder'
    assert main(['convert', str(NPZ), str(folder), '--no-verify']) == 0
    capsys.readouterr()
    monkeypatch.setitem(sys.modules, 'onnxruntime', None)
    code, out = _exit(capsys, ['export', str(folder), str(tmp_path / 'm.onnx')])
    assert code == 1 and "pip install 'timm-vit-variants[onnx]'" in out.err and 'onnxruntime' in out.err
    assert '--format pt2' in out.err and not (tmp_path / 'm.onnx').exists()


def test_hf_source_without_transformers_refuses_unless_no_verify(capsys, tmp_path, monkeypatch):
    src = F.write_hf_folder(tmp_path)
    monkeypatch.setitem(sys.modules, 'transformers', None)
    code, out = _exit(capsys, ['convert', str(src), str(tmp_path / 'out')])
    assert code == 1 and "verifying a transformers source needs transformers: pip install " \
                          "'timm-vit-variants[hf]', or pass --no-verify" in out.err
    assert not (tmp_path / 'out').exists()
    code, out = _exit(capsys, ['convert', str(src), str(tmp_path / 'out'), '--no-verify'])
    assert code == 0 and 'verification skipped' in out.err


def test_extras_mirror_pyproject():
    tomllib = pytest.importorskip('tomllib')
    from porting.extras import EXTRAS

    extras = tomllib.loads((REPO / 'pyproject.toml').read_text())['project']['optional-dependencies']
    distribution = {'onnx': 'onnx', 'onnxscript': 'onnxscript', 'onnxruntime': 'onnxruntime',
                    'matplotlib': 'matplotlib', 'transformers': 'transformers', 'open_clip': 'open-clip-torch',
                    'scipy': 'scipy'}
    for extra, modules in EXTRAS.items():
        names = {dep.split('>')[0].split('<')[0].split('=')[0].strip() for dep in extras[extra]}
        assert {distribution[m] for m in modules} <= names, extra
    assert {'timm-vit-variants[onnx,plot,hf,clip]'} <= set(extras['test'])


# -- the trainer ----------------------------------------------------------------------------------------

def test_trainer_refuses_a_run_of_zero_steps(tmp_path, capsys):
    from timm_vit_variants.training.trainer import main as train_main
    from train_fixtures import TINY_MODEL_KWARGS, make_image_folder

    data = make_image_folder(tmp_path / 'data')  # 16 training images
    rc = train_main(['--data-dir', str(data), '--model', 'simple_vit_tiny', '--model-kwargs', *TINY_MODEL_KWARGS,
                     '--img-size', '16', '--num-classes', '2', '--batch-size', '32', '--device', 'cpu'])
    out = capsys.readouterr()
    assert rc == 1 and 'done' not in out.out
    assert 'this run would take 0 training steps: --batch-size 32 is larger than the 16 training images' in out.err


# -- the public Python API ---------------------------------------------------------------------------------

def test_one_public_api_module():
    import porting
    import vit_port
    from porting import api

    assert vit_port.__all__ == porting.__all__ == api.__all__
    for name in api.__all__:
        assert getattr(vit_port, name) is getattr(porting, name) is getattr(api, name)
    tomllib = pytest.importorskip('tomllib')
    setuptools = tomllib.loads((REPO / 'pyproject.toml').read_text())['tool']['setuptools']
    assert 'vit_port' in setuptools['py-modules']


def test_api_keywords_are_spelled_as_the_flags(tmp_path):
    import vit_port

    result = vit_port.convert(NPZ, tmp_path / 'out', from_='bigvision', source_img_size=32, dataset='digits',
                              limit=['depth=8'])
    assert result.verification.status == 'passed'
    assert json.loads((tmp_path / 'out' / 'config.json').read_text())['conversion']['source_format'] == 'bigvision'
    assert vit_port.verify(NPZ, tmp_path / 'out', from_='bigvision').status == 'passed'
    resized = vit_port.resize(tmp_path / 'out', tmp_path / 'p4', patch_size=4, no_verify=True)
    assert resized.verification.status == 'skipped' and resized.plan.target.patch_size == (4, 4)
    for old in (dict(fmt='bigvision'), dict(verify=False), dict(datasets=['x']), dict(limits=None)):
        with pytest.raises(TypeError, match='unknown conversion option'):
            vit_port.convert(NPZ, tmp_path / 'never', **old)
    with pytest.raises(ViTVariantsError, match='resize needs a new image size'):
        vit_port.resize(tmp_path / 'out', tmp_path / 'never')
    assert not (tmp_path / 'never').exists()
