"""Hostile files and requests (issue 32, build item 5): each case a file or request that went wrong before.

Each case ends in the correct result or in one clear refusal: one ``error:`` line naming the file, key and
reason, a non-zero exit, and nothing left behind. Each test failed on the code before its fix.
"""
import base64
import http.server
import json
import time
import zipfile
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest
import torch
from huggingface_hub import constants

import timm_vit_variants  # noqa: F401  (registers simple_vit_*)
from porting.cli import main
from porting.pipeline import all_finite as pipeline_all_finite
from porting.redact import redact, without_credentials
from porting.sources import download_dir

import checkpoint_fixtures as F
from hub_server import serving
from model_probes import load_like_user


def _refused(capsys, src, out, *extra) -> str:
    """``convert`` exits 1 with one ``error:`` line, no traceback, and writes nothing; the line is returned."""
    code = main(['convert', str(src), str(out), *extra])
    captured = capsys.readouterr()
    assert code == 1, captured.out + captured.err
    errors = [line for line in captured.err.splitlines() if line.startswith('error:')]
    assert len(errors) == 1, captured.err
    assert 'Traceback' not in captured.err and 'verification passed' not in captured.out
    assert not Path(out).exists()
    return errors[0]


def _x(seed: int = 1) -> torch.Tensor:
    return torch.randn(2, 3, F.IMG, F.IMG, generator=torch.Generator().manual_seed(seed))


# -- 1. a .pth whose zip members are deflate-compressed ------------------------------------------------------

def _rezip(src: Path, dst: Path, compression: int = zipfile.ZIP_DEFLATED) -> Path:
    """The same members as ``src``, re-zipped with ``compression`` (a legal zip that ``torch.load`` reads)."""
    with zipfile.ZipFile(src) as old, zipfile.ZipFile(dst, 'w', compression=compression) as new:
        for info in old.infolist():
            new.writestr(info.filename, old.read(info))
    return dst


def test_a_deflated_pth_converts_to_the_right_weights(tmp_path, capsys, max_delta):
    model = F.timm_vit()
    plain = tmp_path / 'plain.pth'
    torch.save(model.state_dict(), plain)
    src = _rezip(plain, tmp_path / 'deflated.pth')
    assert torch.equal(torch.load(src, weights_only=True)['cls_token'], model.cls_token.detach())
    out = tmp_path / 'out'
    assert main(['convert', str(src), str(out), '--num-heads', str(F.HEADS)]) == 0, capsys.readouterr().err
    assert capsys.readouterr().out.splitlines()[1].startswith('verification passed')
    loaded = load_like_user(out)
    assert loaded.num_classes == F.CLASSES
    with torch.no_grad():
        max_delta('deflated .pth: logits of the folder vs timm', loaded(_x()), model(_x()), 2e-5)


def test_a_deflate_bomb_in_a_pth_is_refused_before_inflating(tmp_path, capsys):
    plain = tmp_path / 'plain.pth'
    torch.save({'cls_token': torch.zeros(1, 1, 32), 'big': torch.zeros(16 << 20)}, plain)  # 64 MB of zeros
    src = _rezip(plain, tmp_path / 'bomb.pth')
    assert src.stat().st_size < 1 << 20
    line = _refused(capsys, src, tmp_path / 'out')
    assert 'bomb.pth' in line and 'decompression bomb' in line and "key 'plain/data/" in line


def test_a_compressed_npz_converts_to_the_right_weights(tmp_path, capsys, max_delta):
    """``np.savez_compressed`` members are inflated one at a time (the npz store already did; kept so)."""
    arrays = F.bigvision_arrays('learn', 'tok')
    plain, src = F.write_npz(tmp_path, 'plain.npz', arrays), tmp_path / 'compressed.npz'
    np.savez_compressed(src, **arrays)
    plain_out, packed_out = tmp_path / 'plain', tmp_path / 'packed'
    assert main(['convert', str(plain), str(plain_out)]) == 0
    assert main(['convert', str(src), str(packed_out)]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith('verification passed')
    with torch.no_grad():
        max_delta('compressed .npz: logits vs the stored .npz', load_like_user(packed_out)(_x()),
                  load_like_user(plain_out)(_x()), 0.0)


# -- 2. a URL with credentials ---------------------------------------------------------------------------------

PASSWORD = 'pa55:w0rd@secret'  # a ':' and an '@' of its own, percent-encoded in the URL as users must


class _Private(http.server.BaseHTTPRequestHandler):
    """One file behind HTTP basic auth (``user`` / ``PASSWORD``); every request's Authorization is recorded."""
    protocol_version = 'HTTP/1.1'
    body = b''
    seen: list = []

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.seen.append(self.headers.get('Authorization'))
        expected = 'Basic ' + base64.b64encode(f'user:{PASSWORD}'.encode()).decode()
        if self.headers.get('Authorization') != expected:
            self.send_response(401)
            self.send_header('WWW-Authenticate', 'Basic realm="models"')
            self.send_header('Content-Length', '0')
            self.end_headers()
            return
        self.send_response(200)
        self.send_header('Content-Type', 'application/octet-stream')
        self.send_header('Content-Length', str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)


@pytest.fixture
def private(tmp_path, monkeypatch):
    monkeypatch.setenv('TORCH_HOME', str(tmp_path / 'torch-home'))  # timm's download cache, under tmp_path
    monkeypatch.setattr(constants, 'HF_HUB_OFFLINE', False)
    monkeypatch.delenv('HF_HUB_OFFLINE', raising=False)
    arrays = F.bigvision_arrays('learn', 'tok')
    handler = type('Handler', (_Private,), {'seen': [], 'body': F.write_npz(tmp_path, 'vit.npz', arrays).read_bytes()})
    with serving(handler) as server:
        yield handler.seen, f'127.0.0.1:{server.server_address[1]}'


def _everything_written(*folders: Path) -> str:
    """Every file name under ``folders``, and every text file's content."""
    files = [p for folder in folders if folder.exists() for p in folder.rglob('*') if p.is_file()]
    return ' '.join(p.name + (p.read_text() if p.suffix in ('.json', '.md') else '') for p in files)


def test_url_credentials_are_basic_auth_and_never_shown(private, tmp_path, capsys):
    seen, host = private
    url = f'http://user:{quote(PASSWORD, safe="")}@{host}/models/vit.npz'
    out = tmp_path / 'out'
    assert main(['convert', url, str(out)]) == 0, capsys.readouterr().err
    captured = capsys.readouterr()
    assert captured.out.splitlines()[1].startswith('verification passed')
    assert seen == ['Basic ' + base64.b64encode(f'user:{PASSWORD}'.encode()).decode()]  # sent from the first request
    written = _everything_written(out, download_dir())
    for secret in (PASSWORD, quote(PASSWORD, safe=''), 'w0rd'):
        assert secret not in captured.out + captured.err + written
    config = json.loads((out / 'config.json').read_text())
    assert config['conversion']['source'] == f'http://{host}/models/vit.npz'  # the URL, without the credentials
    assert f'http://{host}/models/vit.npz' in (out / 'README.md').read_text()
    assert load_like_user(out).num_classes == config['num_classes']


def test_a_wrong_url_password_is_one_masked_error(private, tmp_path, capsys):
    seen, host = private
    url = f'http://user:not-the-{quote(PASSWORD, safe="")}@{host}/models/vit.npz'
    line = _refused(capsys, url, tmp_path / 'out')
    assert 'HTTP 401' in line and f'http://user:REDACTED@{host}/models/vit.npz' in line and 'w0rd' not in line
    assert len(seen) == 1  # sent with the first request; the same credentials are not tried again
    assert not _everything_written(download_dir())


def test_redact_masks_url_credentials_wherever_they_appear():
    assert redact('failed: https://u:pw@h:8/a/b.npz, then http://tok@h/x and https://h/q?x=a@b') == \
        'failed: https://u:REDACTED@h:8/a/b.npz, then http://REDACTED@h/x and https://h/q?x=a@b'
    assert without_credentials('https://u:p@ss@h/x@y.npz') == 'https://h/x@y.npz'


# -- 3. a CLIP tag's cached file that is another tower ------------------------------------------------------------

CLIP_REF = Path(__file__).resolve().parent / 'data' / 'reference_clip'
BIGG_TAG = 'simple_vit_gigantic_patch14_clip_224.laion2b_s39b_b160k'


def test_a_clip_tags_file_of_another_tower_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    """A tiny L/14 file in the Hub cache under the bigG tag's repo: refused before a weight is written, naming the
    file and the first tensor that does not fit the tag's architecture. Before, the reference built open_clip's whole
    bigG network on the heap (~10 GB, far past --memory-budget) after the weights were written, to refuse it then."""
    import porting.pipeline as pipeline
    from hub_server import FakeHub, keep_client_local

    keep_client_local(monkeypatch, tmp_path)
    monkeypatch.setattr(constants, 'HF_HUB_CACHE', str(tmp_path / 'hub-cache'))
    monkeypatch.setattr(constants, 'HF_HUB_OFFLINE', False)
    monkeypatch.delenv('HF_HUB_OFFLINE', raising=False)
    written = []
    monkeypatch.setattr(pipeline, 'write_weights', lambda *args, **kwargs: written.append(args) or 1)
    lone = (CLIP_REF / 'openclip_l14_gelu_tiny' / 'open_clip_pytorch_model.bin').read_bytes()
    with FakeHub() as hub:
        hub.add_repo('laion/CLIP-ViT-bigG-14-laion2B-39B-b160k', {'open_clip_pytorch_model.bin': lone})
        line = _refused(capsys, BIGG_TAG, tmp_path / 'out', '--endpoint', hub.url, '--memory-budget', '1GB')
    assert written == []
    assert 'models--laion--CLIP-ViT-bigG-14-laion2B-39B-b160k' in line and 'open_clip_pytorch_model.bin' in line
    assert "key 'visual.class_embedding'" in line and "open_clip's packaged ViT-bigG-14 config" in line
    assert BIGG_TAG in line and 'the file holds (64,), the model needs (1664,)' in line


# -- 4. --dtype float16 of weights past float16's range ------------------------------------------------------------

def test_a_float16_overflow_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    """One weight of 7e4 (float16's largest finite value is 65504): refused before a weight is written, naming the
    tensor and the overflow. Before, the cast wrote Inf and the verification failed with a mismatch."""
    import porting.pipeline as pipeline

    state = F.timm_vit().state_dict()
    state['blocks.1.mlp.fc2.weight'][3, 5] = -7e4
    src = tmp_path / 'big.pth'
    torch.save(state, src)
    written = []
    real = pipeline.write_weights
    monkeypatch.setattr(pipeline, 'write_weights', lambda *a, **k: written.append(a) or real(*a, **k))
    line = _refused(capsys, src, tmp_path / 'out', '--num-heads', str(F.HEADS), '--dtype', 'float16')
    assert written == [] and "key 'blocks.1.mlp.fc2.weight'" in line and 'big.pth' in line
    assert '-70000' in line and 'largest finite float16 value 65504' in line


def test_a_cast_to_inf_is_never_written_silently():
    assert pipeline_all_finite(torch.tensor([1.0, 7e4]))
    assert not pipeline_all_finite(torch.tensor([1.0, 7e4]), torch.float16)
    assert pipeline_all_finite(torch.tensor([1.0, 65519.0]), torch.float16)  # rounds to 65504, not to Inf
    assert pipeline_all_finite(torch.tensor([1.0, 7e4]), torch.bfloat16)


def test_bfloat16_and_in_range_float16_still_convert(tmp_path, capsys):
    state = F.timm_vit().state_dict()
    src = tmp_path / 'plain.pth'
    torch.save(state, src)
    for dtype in ('float16', 'bfloat16'):
        assert main(['convert', str(src), str(tmp_path / dtype), '--num-heads', str(F.HEADS), '--dtype', dtype]) == 0
        assert capsys.readouterr().out.splitlines()[1].startswith('verification passed')


# -- 5. a NaFlex dict of 10^6 patches on a 1000x1000 grid ------------------------------------------------------------

def _pixel_model():
    from timm_vit_variants import SimpleVisionTransformer
    return SimpleVisionTransformer(embed_dim=8, depth=1, num_heads=1, mlp_dim=16, patch_size=1, img_size=100,
                                   in_chans=1, patch_embed='linear', num_classes=0).eval()


def _grid(rows: int, cols: int) -> torch.Tensor:
    return torch.stack(torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing='ij'), -1).reshape(-1, 2)


def test_a_naflex_image_of_a_million_patches_is_refused_within_seconds():
    """Before, one image of 10^6 patches ran its attention over 10^12 token pairs: past 150 s."""
    from timm_vit_variants.errors import ViTVariantsError
    model = _pixel_model()
    batch = {'patches': torch.randn(1, 10 ** 6, 1), 'patch_coord': _grid(1000, 1000)[None]}
    start = time.monotonic()
    with pytest.raises(ViTVariantsError) as e, torch.no_grad():
        model(batch)
    assert time.monotonic() - start < 10
    message = str(e.value)
    assert e.value.key == 'patches' and len(message.splitlines()) == 1
    assert 'image 0 has 1000000 patch tokens (on a 1000x1000 grid)' in message and 'more than the 65536 one image may have' in message


def test_the_naflex_token_limit_can_be_lifted_per_model():
    from timm_vit_variants.errors import ViTVariantsError
    model = _pixel_model()
    model.max_image_tokens = 50
    images = [torch.randn(1, 10, 10), torch.randn(1, 4, 5)]
    with pytest.raises(ViTVariantsError, match=r'image 0 has 100 patch tokens.*model.max_image_tokens = 100'), \
            torch.no_grad():
        model(images)
    model.max_image_tokens = 100
    with torch.no_grad():
        assert model(images).shape == (2, 8)
