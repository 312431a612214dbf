"""transformers loads our Hub folders through its timm wrapper (``TimmWrapperForImageClassification``), with the
logits of timm's ``local-dir:`` and ``hf-hub:`` loaders, and the model card's transformers snippet runs.

Against the real transformers (5.x): ``config.json`` keeps ``num_classes`` at the top level only, because
TimmWrapper passes it to ``timm.create_model`` itself and a second copy in ``model_args`` is a TypeError.

The weights transformers loads are bit-identical to timm's. Its logits may differ in the last bit (2.4e-7
measured): it keeps the weights where safetensors put them, 8-byte but not 64-byte aligned, and the CPU
matmul takes another code path for such memory; a copy of the same weights gives identical logits.
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from PIL import Image

import timm_vit_variants  # noqa: F401  (must come before transformers builds a simple_vit_* model)
from porting.cli import main
from porting.hub_folder import save_pretrained_folder
from porting.publish import push_folder

import checkpoint_fixtures as F
from hub_server import FakeHub, keep_client_local

pytest.importorskip('transformers')

ROOT = Path(__file__).resolve().parents[1]
LABELS = [f'digit_{i}' for i in range(5)]
TOKEN = 'hf_' + 'DeployTransformers' * 2
REPO = 'org/deploy-vit'
# Logits of the same weights in differently aligned memory (see above).
ALIGNMENT_ATOL = 1e-6


def _image(seed=0, size=(40, 28)):
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (*size, 3), dtype=np.uint8))


@pytest.fixture(scope='module')
def folders(tmp_path_factory):
    """A converted vit_jax checkpoint (learned table, cls slot) and a sin-cos model saved with label names."""
    root = tmp_path_factory.mktemp('transformers')
    npz = F.write_npz(root, 'vitjax.npz', F.vitjax_arrays())
    assert main(['convert', str(npz), str(root / 'converted')]) == 0
    torch.manual_seed(0)
    model = timm.create_model('simple_vit_tiny', embed_dim=32, depth=1, num_heads=2, mlp_dim=64, patch_size=8,
                              img_size=32, num_classes=5)
    with torch.no_grad():
        model.head.weight.normal_()
    saved = save_pretrained_folder(model, root / 'saved', label_names=LABELS)
    return {'converted': root / 'converted', 'saved': saved}


def _timm(folder):
    return timm.create_model(f'local-dir:{folder}', pretrained=True).eval()


@pytest.mark.parametrize('which', ['converted', 'saved'])
def test_auto_model_gives_timm_local_dir_logits(folders, which):
    from transformers import AutoModelForImageClassification

    folder = folders[which]
    config = json.loads((folder / 'config.json').read_text())
    assert 'num_classes' not in config['model_args'] and config['num_classes'] == 5  # what both readers accept
    model = AutoModelForImageClassification.from_pretrained(folder).eval()
    assert type(model).__name__ == 'TimmWrapperForImageClassification'
    if which == 'saved':
        assert [model.config.id2label[i] for i in range(5)] == LABELS
    reference = _timm(folder)
    ours, theirs = model.timm_model.state_dict(), reference.state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    with torch.no_grad():
        for shape in [(2, 3, 32, 32), (1, 3, 40, 24)]:
            x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
            torch.testing.assert_close(model(pixel_values=x).logits, reference(x), rtol=0, atol=ALIGNMENT_ATOL)


def test_pipeline_matches_timm_preprocessing_and_model(folders):
    from transformers import pipeline

    folder = folders['saved']
    classifier = pipeline('image-classification', model=str(folder))
    img = _image()
    got = classifier(img, top_k=3)
    model = _timm(folder)
    transform = timm.data.create_transform(**timm.data.resolve_data_config({}, model=model))
    with torch.no_grad():
        probs = model(transform(img).unsqueeze(0)).softmax(-1)[0]
    top = probs.topk(3)
    assert [p['label'] for p in got] == [LABELS[i] for i in top.indices.tolist()]
    np.testing.assert_allclose([p['score'] for p in got], top.values.numpy(), rtol=0, atol=1e-6)


def test_model_card_transformers_snippet_runs(folders):
    folder = folders['saved']
    card = (folder / 'README.md').read_text()
    blocks = re.findall(r'```python\n(.*?)```', card, flags=re.S)
    snippet = next(b for b in blocks if 'transformers' in b)
    assert snippet.index('import timm_vit_variants') < snippet.index('from transformers')
    scope = {'img': _image(1)}
    exec(snippet.replace("'ORG/NAME'", repr(str(folder))), scope)  # noqa: S102  (our own card's code)
    assert [p['label'] for p in scope['predictions']][:1] == [LABELS[int(scope['logits'].argmax())]]
    processor = scope['processor']
    with torch.no_grad():
        expected = _timm(folder)(processor(scope['img'], return_tensors='pt')['pixel_values'])
    torch.testing.assert_close(scope['logits'], expected, rtol=0, atol=ALIGNMENT_ATOL)


# Runs in the child: load the pushed repo through timm's hf-hub: and through transformers, from the loopback Hub.
_HUB_LOAD = """
import sys, torch
import timm_vit_variants  # noqa: F401
import timm
from transformers import AutoModelForImageClassification
x = torch.load(sys.argv[1], weights_only=True)
with torch.no_grad():
    out = {'timm': timm.create_model('hf-hub:%(repo)s', pretrained=True).eval()(x),
           'transformers': AutoModelForImageClassification.from_pretrained('%(repo)s').eval()(pixel_values=x).logits}
torch.save(out, sys.argv[2])
""" % {'repo': REPO}


def test_pushed_folder_loads_through_hf_hub_in_timm_and_transformers(folders, tmp_path):
    x = torch.randn(2, 3, 32, 48, generator=torch.Generator().manual_seed(2))
    torch.save(x, tmp_path / 'x.pt')
    with FakeHub(token=TOKEN, max_lifetime=300) as hub, pytest.MonkeyPatch.context() as mp:
        keep_client_local(mp, tmp_path)
        push_folder(folders['saved'], REPO, token=TOKEN, endpoint=hub.url)
        env = {k: v for k, v in os.environ.items() if not k.startswith(('HF_', 'HUGGING'))}
        env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS='1', HF_HOME=str(tmp_path / 'home'), HF_ENDPOINT=hub.url,
                   HF_HUB_DISABLE_TELEMETRY='1')
        proc = subprocess.run([sys.executable, '-c', _HUB_LOAD, str(tmp_path / 'x.pt'), str(tmp_path / 'out.pt')],
                              capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = torch.load(tmp_path / 'out.pt', weights_only=True)
    with torch.no_grad():
        local = _timm(folders['saved'])(x)
    assert torch.equal(out['timm'], local)
    torch.testing.assert_close(out['transformers'], local, rtol=0, atol=ALIGNMENT_ATOL)
