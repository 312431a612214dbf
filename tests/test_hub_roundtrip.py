"""Load pushed weights back through timm's ``hf-hub:`` path: offline from a Hub cache, and downloaded from the
loopback Hub. ``import timm_vit_variants`` then ``timm.create_model('hf-hub:ORG/NAME', pretrained=True)`` must give
exactly the logits of the local folder, and ``@REVISION`` (commit or branch) must pin the older weights.

The loads run in fresh interpreters because huggingface_hub reads HF_ENDPOINT / HF_HUB_OFFLINE / HF_HUB_CACHE
at import time.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import timm
import torch

import timm_vit_variants  # noqa: F401  (registers simple_vit_*)
from porting.publish import push_folder

from hub_server import FakeHub, git_blob_sha1, keep_client_local

TOKEN = 'hf_' + 'RoundTripSecret' * 2
REPO = 'org/tiny-vit'
ROOT = Path(__file__).resolve().parents[1]
MODEL_ARGS = dict(embed_dim=32, depth=2, num_heads=2, img_size=32, patch_size=8, num_classes=5)

# Runs in the child: build each named model with pretrained=True, save its logits on a fixed batch.
_LOAD_SCRIPT = """
import sys, torch
import timm_vit_variants  # must come before create_model: plain timm cannot build simple_vit_*
import timm
x_path, out_path, names = sys.argv[1], sys.argv[2], sys.argv[3:]
x = torch.load(x_path, weights_only=True)
out = {}
with torch.no_grad():
    for name in names:
        out[name] = timm.create_model(name, pretrained=True).eval()(x)
torch.save(out, out_path)
"""


@pytest.fixture(scope='module')
def pushed(tmp_path_factory):
    """Two versions of a tiny model pushed to a loopback Hub: v1, then v2 on main, then v1 on branch 'stable'."""
    root = tmp_path_factory.mktemp('roundtrip')
    folders, logits = {}, {}
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    torch.save(x, root / 'x.pt')
    for seed, name in ((0, 'v1'), (1, 'v2')):
        torch.manual_seed(seed)
        model = timm.create_model('simple_vit_tiny', **MODEL_ARGS).eval()
        with torch.no_grad():
            model.head.weight.normal_()  # a non-zero head, so the two versions' logits differ
            logits[name] = model(x)
        folders[name] = root / name
        timm.models.save_for_hf(model, folders[name], model_args=MODEL_ARGS, safe_serialization=True)
    with FakeHub(token=TOKEN, max_lifetime=600) as hub, pytest.MonkeyPatch.context() as mp:
        keep_client_local(mp, root)
        push_folder(folders['v1'], REPO, token=TOKEN, endpoint=hub.url)
        push_folder(folders['v2'], REPO, token=TOKEN, endpoint=hub.url)
        push_folder(folders['v1'], REPO, token=TOKEN, endpoint=hub.url, revision='stable')
        yield dict(root=root, hub=hub, folders=folders, logits=logits,
                   c1=hub.history(REPO)[1].oid, refs=dict(hub.repos[REPO].refs))


def load_logits(names, x_path, root, env_extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(('HF_', 'HUGGING'))}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS='1', HF_HOME=str(root / 'home'), **env_extra)
    out = root / 'logits.pt'
    proc = subprocess.run([sys.executable, '-c', _LOAD_SCRIPT, str(x_path), str(out), *names],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return torch.load(out, weights_only=True)


def lay_out_cache(cache: Path, hub: FakeHub, refs: dict, extra_commits=()) -> None:
    """Write the Hub cache layout: refs/<branch> holds the commit, snapshots/<commit>/ links into blobs/."""
    repo_dir = cache / f'models--{REPO.replace("/", "--")}'
    commits = {**{oid: oid for oid in refs.values()}, **{oid: oid for oid in extra_commits}}
    for oid in commits:
        for path, data in hub.files(REPO, oid).items():
            blob = repo_dir / 'blobs' / git_blob_sha1(data)
            blob.parent.mkdir(parents=True, exist_ok=True)
            blob.write_bytes(data)
            link = repo_dir / 'snapshots' / oid / path
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(os.path.relpath(blob, link.parent))
    for ref, oid in refs.items():
        (repo_dir / 'refs' / ref).parent.mkdir(parents=True, exist_ok=True)
        (repo_dir / 'refs' / ref).write_text(oid)


def with_local(names, pushed) -> list:
    """The hub names plus the local folders, loaded in the same process as the exact reference."""
    return [*names, *(f'local-dir:{f}' for f in pushed['folders'].values())]


def assert_versions(out, pushed, by_name):
    for name, version in by_name.items():
        local = out[f'local-dir:{pushed["folders"][version]}']
        assert torch.equal(out[name], local), name
        torch.testing.assert_close(out[name], pushed['logits'][version], rtol=0, atol=1e-5)
    assert not torch.allclose(pushed['logits']['v1'], pushed['logits']['v2'])


def test_offline_hf_hub_roundtrip_from_cache(pushed, tmp_path):
    cache = tmp_path / 'cache'
    refs = {'main': pushed['refs']['main'], 'stable': pushed['refs']['stable']}
    lay_out_cache(cache, pushed['hub'], refs, extra_commits=[pushed['c1']])
    assert len((cache / 'models--org--tiny-vit/refs/main').read_text()) == 40
    n_requests = len(pushed['hub'].requests)
    names = {f'hf-hub:{REPO}': 'v2', f'hf-hub:{REPO}@{pushed["c1"]}': 'v1', f'hf-hub:{REPO}@stable': 'v1'}
    out = load_logits(with_local(names, pushed), pushed['root'] / 'x.pt', tmp_path,
                      {'HF_HUB_OFFLINE': '1', 'HF_HUB_CACHE': str(cache), 'HF_ENDPOINT': pushed['hub'].url})
    assert_versions(out, pushed, names)
    assert len(pushed['hub'].requests) == n_requests  # offline: the Hub was not asked anything


def test_download_through_loopback_hub(pushed, tmp_path):
    cache = tmp_path / 'cache'
    names = {f'hf-hub:{REPO}': 'v2', f'hf-hub:{REPO}@{pushed["c1"]}': 'v1', f'hf-hub:{REPO}@stable': 'v1'}
    out = load_logits(with_local(names, pushed), pushed['root'] / 'x.pt', tmp_path,
                      {'HF_HUB_CACHE': str(cache), 'HF_ENDPOINT': pushed['hub'].url})
    assert_versions(out, pushed, names)
    repo_dir = cache / 'models--org--tiny-vit'
    assert (repo_dir / 'refs' / 'main').read_text() == pushed['refs']['main']
    assert (repo_dir / 'refs' / 'stable').read_text() == pushed['refs']['stable']
    resolves = [r for r in pushed['hub'].requests if '/resolve/' in r.path]
    assert {r.method for r in resolves} == {'HEAD', 'GET'}
    assert any(r.path.endswith('/model.safetensors') and r.method == 'GET' for r in resolves)
