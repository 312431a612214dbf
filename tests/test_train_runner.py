"""``vit-variants-run SCRIPT ARGS`` (``python -m timm_vit_variants.training.run``): the plugin is loaded, SCRIPT
runs as __main__ with every argument after it."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from timm_vit_variants.training.run import main
from train_fixtures import TINY_MODEL_KWARGS, make_image_folder

ROOT = Path(__file__).resolve().parents[1]

# Stands in for train.py: a script that only knows timm, creates a simple_vit model by name and
# reports its argv and __name__.
_PROBE = '''
import json, sys
import timm
model = timm.create_model('simple_vit_tiny', embed_dim=16, depth=1, num_heads=1)
json.dump({"name": __name__, "argv": sys.argv[1:], "model": type(model).__name__,
           "sibling": __import__("probe_sibling").VALUE}, open(sys.argv[-1], "w"))
'''


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get('PYTHONPATH', '')]))


def test_wrapper_runs_script_as_main_with_plugin(tmp_path):
    script = tmp_path / 'train.py'
    script.write_text(_PROBE)
    (tmp_path / 'probe_sibling.py').write_text('VALUE = 7\n')  # train.py imports siblings from its folder
    report = tmp_path / 'report.json'
    argv = ['--model', 'simple_vit_tiny', '--timm-train', 'not-ours', '-h', str(report)]
    proc = subprocess.run([sys.executable, '-m', 'timm_vit_variants.training.run', str(script), *argv],
                          env=_env(), cwd=tmp_path.parent, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(report.read_text()) == {
        'name': '__main__', 'argv': argv, 'model': 'SimpleVisionTransformer', 'sibling': 7}


def test_missing_script_is_a_clean_error(tmp_path, capsys):
    assert main([str(tmp_path / 'nope.py'), '--model', 'x']) == 2
    err = capsys.readouterr().err
    assert 'script not found' in err and 'nope.py' in err and 'Traceback' not in err


def test_script_is_required(capsys):
    assert main([]) == 2
    assert 'usage: vit-variants-run SCRIPT.py' in capsys.readouterr().err
    assert main(['--help']) == 0
    assert 'validate.py' in capsys.readouterr().out


def test_console_script_runs(tmp_path):
    script = tmp_path / 'exit3.py'
    script.write_text('import sys, timm\nsys.exit(3 if "simple_vit_tiny" in timm.list_models() else 4)\n')
    runner = Path(sys.executable).parent / 'vit-variants-run'
    if not runner.is_file():
        pytest.skip('the package is not installed with its console scripts')
    assert subprocess.run([str(runner), str(script)], timeout=600).returncode == 3


@pytest.mark.skipif(not os.environ.get('TIMM_TRAIN_SCRIPT'), reason='set TIMM_TRAIN_SCRIPT=/path/to/timm/train.py')
def test_real_train_py_through_wrapper(tmp_path):
    # Opt-in: timm's real train.py, one epoch of a tiny simple_vit on CPU through the wrapper.
    data = make_image_folder(tmp_path / 'data')
    cmd = [sys.executable, '-m', 'timm_vit_variants.training.run', os.environ['TIMM_TRAIN_SCRIPT'],
           '--data-dir', str(data), '--model', 'simple_vit_tiny', '--model-kwargs', *TINY_MODEL_KWARGS,
           '--img-size', '16', '--num-classes', '2', '--device', 'cpu', '--batch-size', '4', '--epochs', '1',
           '--warmup-epochs', '0', '--opt', 'adamw', '--lr', '1e-3', '--workers', '0',
           '--output', str(tmp_path / 'out'), '--experiment', 'probe']
    proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert '--result' in proc.stdout
    assert (tmp_path / 'out' / 'probe' / 'last.pth.tar').is_file()
