"""Sources by name: Hub ids, URLs and registered tags for convert / inspect / verify, offline against loopback servers.

The Hub is ``tests/hub_server.FakeHub`` (the real ``huggingface_hub`` client talks to it); URLs are served by a
plain ``http.server`` on 127.0.0.1. Caches (the Hub cache, timm's download cache) live under ``tmp_path``.
"""
import functools
import hashlib
import http.server
import json
import shutil
import threading
from pathlib import Path

import pytest
from huggingface_hub import constants

from porting.cli import main
from porting.sources import download_dir, resolve_source, url_cache_path
from timm_vit_variants.errors import ViTVariantsError

import checkpoint_fixtures as F
from hub_server import FakeHub, keep_client_local

REF = Path(__file__).parent / 'data' / 'reference'
NPZ = REF / 'bigvision_learn_tok.npz'
REPO = 'org/tiny-vit'


@pytest.fixture(autouse=True)
def caches(monkeypatch, tmp_path):
    """Fresh Hub and download caches; online unless a test says otherwise; the client stays on loopback."""
    keep_client_local(monkeypatch, tmp_path)
    monkeypatch.setattr(constants, 'HF_HUB_CACHE', str(tmp_path / 'hub-cache'))
    monkeypatch.setattr(constants, 'HF_HUB_OFFLINE', False)
    monkeypatch.delenv('HF_HUB_OFFLINE', raising=False)
    monkeypatch.delenv('HF_TOKEN', raising=False)
    monkeypatch.setenv('TORCH_HOME', str(tmp_path / 'torch-home'))


def offline(monkeypatch):
    monkeypatch.setenv('HF_HUB_OFFLINE', '1')
    monkeypatch.setattr(constants, 'HF_HUB_OFFLINE', True)


@pytest.fixture(scope='module')
def timm_folder(tmp_path_factory):
    return F.write_timm_folder(tmp_path_factory.mktemp('timm'))


@pytest.fixture
def hub(timm_folder):
    """A Hub repo holding a timm folder, plus a second weight file that must not be downloaded."""
    with FakeHub() as server:
        files = {p.name: p.read_bytes() for p in timm_folder.iterdir()}
        server.add_repo(REPO, {**files, 'pytorch_model.bin': b'not read', 'tf_model.h5': b'not read'})
        yield server


@pytest.fixture
def web(tmp_path):
    """A plain HTTP server on 127.0.0.1 serving ``tmp_path / 'www'``."""
    root = tmp_path / 'www'
    root.mkdir()
    shutil.copy(NPZ, root / 'vit_tiny.npz')
    requests = []
    server = http.server.ThreadingHTTPServer(
        ('127.0.0.1', 0), functools.partial(_QuietHandler, directory=str(root), log=requests))
    server.requests = requests
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server, f'http://127.0.0.1:{server.server_address[1]}'
    server.shutdown()
    server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *args, log=None, **kwargs):
        self.log = log
        super().__init__(*args, **kwargs)

    def log_message(self, *args):
        self.log.append(self.path)


def _downloads(hub):
    return sorted(r.path.rsplit('/', 1)[-1] for r in hub.requests if r.method == 'GET' and '/resolve/' in r.path)


def _conversion(out):
    return json.loads((out / 'config.json').read_text())['conversion']


@pytest.mark.parametrize('spelling', [f'hf-hub:{REPO}', REPO])
def test_convert_a_hub_id(hub, tmp_path, capsys, spelling):
    out = tmp_path / 'out'
    assert main(['convert', spelling, str(out), '--endpoint', hub.url]) == 0, capsys.readouterr().err
    assert capsys.readouterr().out.splitlines()[1].startswith('verification passed')
    assert _downloads(hub) == ['config.json', 'model.safetensors']  # one weight set, nothing else
    record = _conversion(out)
    head = hub.history(REPO)[0].oid
    assert record['source'] == f'hf-hub:{REPO}' and record['source_revision'] == head
    card = (out / 'README.md').read_text()
    assert f'**Source:** `hf-hub:{REPO}`' in card and head in card and str(tmp_path) not in card


def test_a_revision_pins_the_snapshot(hub, timm_folder, tmp_path, capsys):
    first = hub.history(REPO)[0].oid
    hub.add_repo('org/other')  # a second repo, so the cache holds more than one
    with hub._lock:
        repo = hub.repos[REPO]
        hub._commit(repo, 'main', {**hub.files(REPO), 'config.json': b'{"broken": true}'}, 'break it', '')
    out = tmp_path / 'out'
    assert main(['convert', f'{REPO}@{first}', str(out), '--endpoint', hub.url]) == 0, capsys.readouterr().err
    assert _conversion(out)['source'] == f'hf-hub:{REPO}@{first}' and _conversion(out)['source_revision'] == first


def test_offline_uses_the_cache_and_says_when_it_cannot(hub, tmp_path, capsys, monkeypatch):
    assert main(['convert', REPO, str(tmp_path / 'a'), '--endpoint', hub.url]) == 0
    seen = len(hub.requests)
    offline(monkeypatch)
    assert main(['convert', REPO, str(tmp_path / 'b'), '--endpoint', hub.url]) == 0, capsys.readouterr().err
    assert len(hub.requests) == seen  # not one request
    assert (tmp_path / 'b' / 'model.safetensors').read_bytes() == (tmp_path / 'a' / 'model.safetensors').read_bytes()
    capsys.readouterr()
    assert main(['convert', 'hf-hub:org/never-fetched', str(tmp_path / 'c'), '--endpoint', hub.url]) == 1
    err = capsys.readouterr().err
    assert err.startswith('error: ') and 'not in the local Hub cache and HF_HUB_OFFLINE is set' in err
    assert len(hub.requests) == seen and not (tmp_path / 'c').exists()


def test_a_bare_id_that_is_neither_says_both_readings(hub, tmp_path, capsys):
    assert main(['convert', 'ckpts/vit-typo', str(tmp_path / 'out'), '--endpoint', hub.url]) == 1
    err = capsys.readouterr().err
    assert "'ckpts/vit-typo' is not a local file or folder, so it was read as a Hub model id" in err
    assert 'does not exist, or is private' in err and './ckpts/vit-typo' in err and 'hf-hub:ckpts/vit-typo' in err
    assert 'Traceback' not in err and not (tmp_path / 'out').exists()


def test_a_local_path_wins_over_the_hub(hub, timm_folder, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copytree(timm_folder, tmp_path / 'org' / 'tiny-vit')
    assert main(['convert', REPO, 'out', '--endpoint', hub.url]) == 0, capsys.readouterr().err
    assert hub.requests == [] and _conversion(tmp_path / 'out')['source'] == 'tiny-vit'


def test_a_file_name_is_never_taken_for_a_hub_id(hub, tmp_path, capsys):
    assert main(['convert', 'ckpts/missing.npz', str(tmp_path / 'out'), '--endpoint', hub.url]) == 1
    assert 'source not found' in capsys.readouterr().err and hub.requests == []


def test_inspect_and_verify_take_hub_ids(hub, tmp_path, capsys):
    out = tmp_path / 'out'
    assert main(['inspect', f'hf-hub:{REPO}', '--endpoint', hub.url]) == 0
    assert 'format: timm' in capsys.readouterr().out
    assert main(['convert', f'hf-hub:{REPO}', str(out), '--endpoint', hub.url, '--no-verify']) == 0
    capsys.readouterr()
    assert main(['verify', f'hf-hub:{REPO}', str(out), '--endpoint', hub.url]) == 0
    assert capsys.readouterr().out.startswith('verification passed')


def test_convert_a_url(web, tmp_path, capsys, monkeypatch):
    server, base = web
    url = f'{base}/vit_tiny.npz'
    out = tmp_path / 'out'
    assert main(['convert', url, str(out)]) == 0
    err = capsys.readouterr().err
    assert '%|' not in err  # no progress bar off a terminal
    cached = url_cache_path(url)
    assert cached.name.startswith('vit_tiny.url-') and cached.suffix == '.npz'
    assert cached.read_bytes() == NPZ.read_bytes() and cached.parent == tmp_path / 'torch-home' / 'hub' / 'checkpoints'
    record = _conversion(out)
    assert record['source'] == url and record['source_url'] == url
    assert record['source_sha256'] == hashlib.sha256(NPZ.read_bytes()).hexdigest()
    card = (out / 'README.md').read_text()
    assert f'**Source:** `{url}`' in card and record['source_sha256'] in card
    # cached: a second conversion, offline, downloads nothing
    fetched = list(server.requests)
    offline(monkeypatch)
    assert main(['convert', url, str(tmp_path / 'again')]) == 0 and server.requests == fetched
    assert list(cached.parent.iterdir()) == [cached]  # no partial download left beside it


def test_url_failures_are_one_line_and_leave_no_partial(web, tmp_path, capsys, monkeypatch):
    _, base = web
    assert main(['convert', f'{base}/missing.npz', str(tmp_path / 'out')]) == 1
    err = capsys.readouterr().err
    assert err.startswith('error: ') and 'HTTP 404' in err and 'missing.npz' in err
    assert not download_dir().exists() or list(download_dir().iterdir()) == []
    offline(monkeypatch)
    assert main(['convert', f'{base}/vit_tiny.npz', str(tmp_path / 'out')]) == 1
    assert 'not in the download cache' in capsys.readouterr().err


def test_a_registered_tag_resolves_through_its_pretrained_cfg(tmp_path, capsys, monkeypatch):
    # The tag's url is big_vision's published file; a copy in timm's download cache stands in for it (offline).
    import timm

    tag = 'simple_vit_small_patch16_224.bv_i1k_300ep'
    url = timm.models.get_pretrained_cfg(tag).url
    download_dir().mkdir(parents=True)
    shutil.copy(NPZ, download_dir() / url.rsplit('/', 1)[-1])
    offline(monkeypatch)
    out = tmp_path / 'out'
    assert main(['convert', tag, str(out)]) == 0, capsys.readouterr().err
    assert _conversion(out)['source'] == tag and _conversion(out)['source_url'] == url
    with pytest.raises(ViTVariantsError, match='no such pretrained tag'):
        resolve_source('simple_vit_small_patch16_224.no_such_tag')


def test_a_tag_with_a_hub_id_downloads_from_the_hub(hub, tmp_path, monkeypatch):
    import timm

    real = timm.models.get_pretrained_cfg

    def with_hub_id(name, *args, **kwargs):
        cfg = real(name, *args, **kwargs)
        if name.startswith('simple_vit_small_patch16_224'):
            cfg.hf_hub_id, cfg.url = REPO, ''
        return cfg

    monkeypatch.setattr(timm.models, 'get_pretrained_cfg', with_hub_id)
    resolved = resolve_source('simple_vit_small_patch16_224.bv_i1k_300ep', endpoint=hub.url)
    assert resolved.kind == 'tag' and resolved.provenance['hf_hub_id'] == REPO
    assert sorted(p.name for p in Path(resolved.path).iterdir()) == ['config.json', 'model.safetensors']
