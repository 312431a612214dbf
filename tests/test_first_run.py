"""The README's first set-up line: ``examples/first_run.py`` runs on the base install (no extra) and says what it did."""
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# What only the extras and the test suite bring; the base install (`pip install -e .`) has none of it
# (PyYAML is not here: huggingface_hub requires it).
NOT_IN_THE_BASE_INSTALL = ('transformers', 'scipy', 'sklearn', 'matplotlib', 'onnx', 'onnxscript', 'onnxruntime',
                           'hypothesis', 'pytest')

_RUN = '''
import runpy, sys
for name in {blocked!r}:
    sys.modules[name] = None  # importing it now fails, as on a base install
sys.argv = ['examples/first_run.py', '--out', {out!r}]
try:
    runpy.run_path('examples/first_run.py', run_name='__main__')
except SystemExit as stop:
    sys.exit(stop.code)
'''


def test_the_demo_runs_on_the_base_install(tmp_path):
    out = tmp_path / 'first_run'
    code = _RUN.format(blocked=NOT_IN_THE_BASE_INSTALL, out=str(out))
    proc = subprocess.run([sys.executable, '-c', code], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == f'1. converted bigvision_learn_tok.npz -> {out}'
    assert lines[1].strip().startswith('verification passed vs timm VisionTransformer.load_pretrained(npz)')
    assert lines[3].startswith(f'2. loaded local-dir:{out} with timm: SimpleVisionTransformer, 32 wide, 2 blocks')
    assert lines[4].startswith('3. ran it on a 24x52 image (3x7 tokens')
    assert sorted(p.name for p in out.iterdir()) == ['README.md', 'config.json', 'model.safetensors']
    # run again: an earlier output of its own is replaced, not refused
    again = subprocess.run([sys.executable, '-c', code], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
