"""The family registry: a family is its own module, found without editing any other file of the package."""
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_PROBE_FAMILY = '''
from ..checkpoints.routes import Route
from ..checkpoints.timm_format import TimmCheckpoint
from ..model_table import ModelEntry
from .registry import Family


class ProbeCheckpoint(TimmCheckpoint):
    """A timm state dict carrying the probe's marker tensor, read as timm's."""
    format = 'zzfmt'


FAMILY = Family(
    'zz_probe',
    rows={'simple_vit_zz_probe': ModelEntry('tiny', {'depth': 2}, 'A probe row.')},
    cfgs={'simple_vit_zz_probe.probe_tag': {'num_classes': 7, 'input_size': (3, 224, 224)}},
    routes=(Route(50., lambda p: 'zz.marker' in p.names, ProbeCheckpoint),),
)
'''

_CHECK = '''
import torch, timm
from safetensors.torch import save_file
import timm_vit_variants
from timm_vit_variants.checkpoints import FORMATS, detect_format
from timm_vit_variants.checkpoints.detect import DISPATCH
model = timm.create_model('simple_vit_zz_probe')
assert model.default_cfg['tag'] == 'probe_tag' and model.num_classes == 7 and len(model.blocks) == 2
assert 'zzfmt' in FORMATS and DISPATCH[0].reader.format == 'zzfmt'
state = {k: v.contiguous() for k, v in timm.create_model('vit_tiny_patch16_224', num_classes=0).state_dict().items()}
save_file(dict(state, **{'zz.marker': torch.zeros(1)}), 'probe.safetensors')
save_file(state, 'plain.safetensors')
print(detect_format('probe.safetensors'), detect_format('plain.safetensors'))
'''


def test_a_new_family_module_registers_its_rows_tags_and_routes(tmp_path):
    """A copy of the package with one more file in ``families/``: its row is a timm model with its tag as the
    default, its format is listed, and its route, ordered first, reads what its test holds for."""
    shutil.copytree(REPO / 'timm_vit_variants', tmp_path / 'timm_vit_variants',
                    ignore=shutil.ignore_patterns('__pycache__'))
    (tmp_path / 'timm_vit_variants' / 'families' / 'zz_probe.py').write_text(textwrap.dedent(_PROBE_FAMILY))
    proc = subprocess.run([sys.executable, '-c', _CHECK], capture_output=True, text=True, cwd=tmp_path,
                          env={'PYTHONPATH': str(tmp_path), 'PATH': '/usr/bin:/bin'}, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[-2:] == ['zzfmt', 'timm']


def test_every_registered_model_has_one_default_tag():
    import timm
    import timm_vit_variants  # noqa: F401  (registers the family)
    names = timm.list_models('simple_vit*')
    assert names and all(timm.models.get_pretrained_cfg(name) is not None for name in names)
