"""Sources by URL under a careless or hostile server: deadlines, progress, pages, cache keys, cut transfers.

One loopback HTTP server (127.0.0.1) plays every misbehaviour; its slow routes are bounded loops that stop when
the client goes away. timm's download cache lives under ``tmp_path``. Each failure must be one ``error:`` line
naming the URL and leave nothing in the cache.
"""
import http.server
import socket
import time
from pathlib import Path

import pytest
from huggingface_hub import constants

import porting.sources as sources
import porting.url_download as url_download
from porting import api
from porting.cli import main
from porting.sources import download_dir, resolve_source, url_cache_path
from timm_vit_variants.errors import ViTVariantsError

from hub_server import serving

REF = Path(__file__).parent / 'data' / 'reference'
NPZ = (REF / 'bigvision_learn_tok.npz').read_bytes()
OTHER = (REF / 'bigvision_sincos_gap.npz').read_bytes()
PAGE = b'<!DOCTYPE html><html><head><title>Sign in</title></head><body>Please log in.</body></html>\n'


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    seen: list = []

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.seen.append(self.path)
        route = getattr(self, 'route_' + self.path.strip('/').split('/')[0].split('.')[0], None)
        if route is None:
            self.send_error(404)
            return
        try:
            route()
        except (BrokenPipeError, ConnectionResetError):  # the client gave up, as it should
            pass

    def _head(self, length, kind='application/octet-stream', status=200, **extra):
        self.send_response(status)
        self.send_header('Content-Type', kind)
        if length is not None:
            self.send_header('Content-Length', str(length))
        for name, value in extra.items():
            self.send_header(name.replace('_', '-'), value)
        self.end_headers()

    def _drip(self, data, pause, times):
        """Send ``data`` ``times`` times, ``pause`` s apart (bounded: stops when the client leaves)."""
        for _ in range(times):
            self.wfile.write(data)
            self.wfile.flush()
            time.sleep(pause)

    def route_a(self):  # /a/model.npz and /b/model.npz: one file name, two files
        self._head(len(NPZ))
        self.wfile.write(NPZ)

    def route_b(self):
        self._head(len(OTHER))
        self.wfile.write(OTHER)

    def route_quick(self):
        self._head(len(NPZ))
        self.wfile.write(NPZ)

    def route_slow(self):  # the whole file, in 8 pieces over ~1.6 s
        self._head(len(NPZ))
        step = -(-len(NPZ) // 8)
        for i in range(0, len(NPZ), step):
            self._drip(NPZ[i:i + step], 0.2, 1)

    def route_drip(self):  # one byte every 0.05 s of a claimed 100 kB: well under 1 KiB a second
        self._head(100_000)
        self.wfile.write(NPZ[:16])
        self._drip(b'\0', 0.05, 4000)

    def route_endless(self):  # 200 kB/s, never stalling, of a claimed 1 GiB
        self._head(1 << 30)
        self.wfile.write(NPZ[:16])
        self._drip(bytes(4096), 0.02, 30_000)

    def route_portal(self):  # a login page, served with 200
        self._head(len(PAGE), 'text/html; charset=utf-8')
        self.wfile.write(PAGE)

    def route_disguised(self):  # the same page, called a binary
        self._head(len(PAGE))
        self.wfile.write(PAGE)

    def route_cut(self):  # Content-Length promises more than is sent
        self._head(len(NPZ))
        self.wfile.write(NPZ[:len(NPZ) // 2])
        self._hang_up()

    def route_chunked(self):  # a chunked body cut in the middle of a chunk
        self._head(None, Transfer_Encoding='chunked')
        self.wfile.write(b'%x\r\n' % 4096 + NPZ[:1000])
        self._hang_up()

    def route_loop(self):
        self._head(0, status=302, Location=self.path)

    def _hang_up(self):
        self.wfile.flush()
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def web():
    handler = type('Handler', (_Handler,), {'seen': []})
    with serving(handler) as server:
        yield handler.seen, f'http://127.0.0.1:{server.server_address[1]}'


@pytest.fixture(autouse=True)
def caches(monkeypatch, tmp_path):
    monkeypatch.setenv('TORCH_HOME', str(tmp_path / 'torch-home'))
    monkeypatch.setattr(constants, 'HF_HUB_OFFLINE', False)
    monkeypatch.delenv('HF_HUB_OFFLINE', raising=False)


def cached():
    return sorted(p.name for p in download_dir().iterdir()) if download_dir().exists() else []


def convert_fails(capsys, argv, *needles):
    """``vit-port ARGV`` exits 1 with one error line naming each needle, and the cache holds nothing."""
    assert main(argv) == 1
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if not line.startswith('download ')]  # progress lines aside
    assert len(lines) == 1 and lines[0].startswith('error: ') and 'Traceback' not in err, err
    for needle in needles:
        assert needle in lines[0], err
    assert cached() == []
    return lines[0]


# -- deadlines ---------------------------------------------------------------------------------------------------

def test_a_dripping_server_is_a_stall(web, tmp_path, capsys):
    _, base = web
    url = f'{base}/drip/vit.npz'
    convert_fails(capsys, ['convert', url, str(tmp_path / 'out'), '--stall-timeout', '1'],
                  url, 'stalled', '--stall-timeout')
    with pytest.raises(ViTVariantsError, match='stalled'):  # the Python API, keyword spelled as the flag
        api.convert(url, tmp_path / 'out', stall_timeout=1)
    assert not (tmp_path / 'out').exists() and cached() == []


def test_an_endless_download_meets_its_deadline(web, tmp_path, capsys):
    _, base = web
    url = f'{base}/endless/vit.npz'
    convert_fails(capsys, ['convert', url, str(tmp_path / 'out'), '--download-timeout', '1'],
                  url, 'did not finish within 1 s', '--download-timeout')
    convert_fails(capsys, ['inspect', url, '--download-timeout', '1'], url, 'did not finish within 1 s')
    with pytest.raises(ViTVariantsError, match='did not finish within 1 s'):
        api.resolve_source(url, download_timeout=1)


def test_the_timeouts_are_checked_as_they_are_given(capsys):
    for flag in ('--stall-timeout', '--download-timeout'):
        for bad in ('0', '-1', 'inf', 'soon'):
            assert main(['inspect', 'x.npz', flag, bad]) == 2
            assert f'expected a number of seconds > 0, got {bad!r}' in capsys.readouterr().err
    with pytest.raises(ViTVariantsError, match='download_timeout must be a positive number of seconds'):
        resolve_source('https://127.0.0.1:9/x.npz', download_timeout=0)
    help_text = _help(capsys, 'convert')  # the defaults the help states are the ones in force
    assert f'default {sources.DEFAULT_DOWNLOAD_TIMEOUT:g}' in help_text
    assert f'default {sources.DEFAULT_STALL_TIMEOUT:g}' in help_text


def _help(capsys, command):
    assert main([command, '--help']) == 0
    return ' '.join(capsys.readouterr().out.split())


# -- progress off a terminal -------------------------------------------------------------------------------------

def test_progress_is_a_line_every_few_seconds_off_a_terminal(web, capsys, monkeypatch):
    _, base = web
    monkeypatch.setattr(url_download, '_PROGRESS_EVERY', 0.3)
    resolved = resolve_source(f'{base}/slow/vit_tiny.npz')
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) >= 2, lines
    assert all(line.startswith('download vit_tiny.npz: ') and f'of {len(NPZ) / 1000:.1f} kB' in line
               for line in lines), lines
    assert Path(resolved.path).read_bytes() == NPZ
    # a quick download says nothing
    resolve_source(f'{base}/quick/vit_tiny.npz')
    assert capsys.readouterr().err == ''


# -- what is cached ----------------------------------------------------------------------------------------------

def test_a_web_page_is_never_cached_as_weights(web, tmp_path, capsys):
    seen, base = web
    url = f'{base}/portal.npz'
    convert_fails(capsys, ['convert', url, str(tmp_path / 'out')], url, 'text/html', 'nothing was cached')
    convert_fails(capsys, ['convert', url, str(tmp_path / 'out')], url, 'text/html')
    assert seen.count('/portal.npz') == 2  # the rerun asks again: no page was kept as portal.npz
    url = f'{base}/disguised.npz'  # the page again, served as application/octet-stream: caught by its bytes
    convert_fails(capsys, ['convert', url, str(tmp_path / 'out')], url, "b'<!DOCTYPE html><'",
                  'no checkpoint format')


def test_cache_entries_are_keyed_by_the_whole_url(web):
    seen, base = web
    first = resolve_source(f'{base}/a/model.npz')
    second = resolve_source(f'{base}/b/model.npz')
    assert Path(first.path).read_bytes() == NPZ and Path(second.path).read_bytes() == OTHER
    assert first.path != second.path and seen == ['/a/model.npz', '/b/model.npz']
    again = resolve_source(f'{base}/b/model.npz#fragment')  # a fragment never reaches the server: same entry
    assert again.path == second.path and len(seen) == 2
    assert [Path(first.path).name, Path(second.path).name] == [url_cache_path(f'{base}/{d}/model.npz').name
                                                               for d in 'ab']


# -- cut transfers and redirect loops ----------------------------------------------------------------------------

@pytest.mark.parametrize('route', ['cut.npz', 'chunked.npz'])
def test_a_cut_transfer_is_one_line_naming_the_url(web, tmp_path, capsys, route):
    _, base = web
    url = f'{base}/{route}'
    convert_fails(capsys, ['convert', url, str(tmp_path / 'out')], url, 'cut short')


def test_a_redirect_loop_is_one_line(web, tmp_path, capsys):
    _, base = web
    url = f'{base}/loop.npz'
    convert_fails(capsys, ['convert', url, str(tmp_path / 'out')], url, 'redirect loop')


def test_a_failed_download_leaves_an_earlier_entry_alone(web, tmp_path, capsys):
    _, base = web
    good = resolve_source(f'{base}/a/model.npz')
    assert main(['convert', f'{base}/cut.npz', str(tmp_path / 'out')]) == 1
    assert 'cut short' in capsys.readouterr().err
    assert cached() == [Path(good.path).name] and Path(good.path).read_bytes() == NPZ


@pytest.mark.parametrize('url,shown', [
    ('http://user:pa55w0rd@example.com/models/vit.npz', 'http://user:REDACTED@example.com/models/vit.npz'),
    ('http://pa55w0rd@10.0.0.1:8080/vit.npz', 'http://REDACTED@10.0.0.1:8080/vit.npz'),  # a lone user name: a token
])
def test_credentials_in_an_http_url_are_refused_before_anything_is_sent(url, shown, tmp_path, capsys, monkeypatch):
    """HTTP basic auth is not encrypted: over http:// (to another machine) the credentials would cross the network
    readable by anyone on the way. (test_hostile_inputs sends them to a loopback server, which crosses none.)"""
    sent = []
    monkeypatch.setattr(url_download, '_download', lambda *args, **kwargs: sent.append(args))
    line = convert_fails(capsys, ['convert', url, str(tmp_path / 'out')], shown, 'clear text', 'https://')
    assert 'pa55w0rd' not in line and sent == [] and not (tmp_path / 'out').exists()
