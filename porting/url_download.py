"""One file by URL: an ``https://`` (or ``http://``) checkpoint downloaded once into timm's download cache.

The cache is timm's own (``torch.hub.get_dir()/checkpoints``), in an entry keyed by the whole URL, so a file
``pretrained=True`` fetched is reused. A progress bar shows on a terminal, and elsewhere one line every few
seconds (none for a quick download). The download has an overall deadline and a stall timeout
(``DownloadBounds``); a web page (by its content type, or by first bytes that are no checkpoint format) is
refused before anything is cached, and a failed or cut transfer leaves nothing in the cache. Credentials in the
URL (``https://USER:PASSWORD@HOST/...``) are sent as HTTP basic auth, from the first request and only to that
host; they are never printed, recorded or part of the cache key, and over ``http://`` they are refused unless
the host is this machine. Part of resolving a source by name (``porting.sources``).
"""
import hashlib
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Tuple

from timm_vit_variants.errors import ViTVariantsError, first_line, reraised_as

from .hub_access import is_offline
from .redact import redact, register_token, without_credentials

__all__ = ['DownloadBounds', 'fetch_url', 'download_dir', 'url_cache_path', 'DEFAULT_DOWNLOAD_TIMEOUT',
           'DEFAULT_STALL_TIMEOUT']

_CHUNK = 1 << 20
# An https:// download gives up after this long in all (``--download-timeout``), and when less than
# ``_STALL_BYTES`` arrive in ``--stall-timeout`` seconds (a server dripping bytes is stalled as much as a silent one).
DEFAULT_DOWNLOAD_TIMEOUT = 7200.0
DEFAULT_STALL_TIMEOUT = 60.0
_STALL_BYTES = 1 << 10
_PROGRESS_EVERY = 5.0  # seconds between progress lines off a terminal
_MAGIC_BYTES = 16  # how many first bytes are checked against the checkpoint formats before any is written
# Content types no checkpoint is served as: a login, error or portal page.
_PAGE_TYPES = ('text/', 'application/json', 'application/xml', 'application/xhtml+xml')
_REDIRECTS = (301, 302, 303, 307, 308)


@dataclass(frozen=True)
class DownloadBounds:
    """How long an https:// download may take in all, and may go without making progress (seconds)."""
    deadline: float
    stall: float


def download_dir() -> Path:
    """timm's download cache (``torch.hub.get_dir()/checkpoints``), so a file ``pretrained=True`` fetched is reused."""
    import torch.hub

    return Path(torch.hub.get_dir()) / 'checkpoints'


def url_cache_path(url: str) -> Path:
    """The download cache entry of ``url``: its file name, tagged with a hash of the whole URL but its credentials
    (so two URLs ending in the same name never share an entry), in timm's download cache."""
    from urllib.parse import unquote, urldefrag, urlsplit

    url = without_credentials(urldefrag(url).url)  # a fragment is never sent to the server
    name = os.path.basename(unquote(urlsplit(url).path))
    if not name or name in ('.', '..'):
        raise ViTVariantsError('the URL names no file (expected .../NAME.npz or similar)', path=url)
    stem, suffix = os.path.splitext(name)
    return download_dir() / f'{stem}.url-{hashlib.sha256(url.encode()).hexdigest()[:16]}{suffix}'


def fetch_url(url: str, progress: bool, bounds: DownloadBounds, reuse: Optional[Path] = None) -> Tuple[str, str]:
    """(the cached file of ``url``, ``url`` without credentials): one file, downloaded once (atomically: a partial
    download never looks cached). ``reuse``: a file already downloaded for this URL elsewhere (timm's own entry
    for a tag's URL), taken when present. Errors name the URL with its password masked."""
    address, credentials = _credentials(url)
    shown = redact(url)
    path = url_cache_path(address)
    if reuse is not None and reuse.is_file() and not path.is_file():
        path = reuse
    if not path.is_file():
        if is_offline():
            raise ViTVariantsError(f'not in the download cache ({path}) and HF_HUB_OFFLINE is set (unset it to '
                                   'download)', path=shown)
        _download(address, credentials, shown, path, progress, bounds)
    return str(path), address


def _credentials(url: str) -> Tuple[str, Optional[Tuple[str, str]]]:
    """``url`` without its user info, and the (user, password) it held, percent-decoded (a lone user name has an
    empty password, as curl sends it). The password is registered so that no later message shows it."""
    from urllib.parse import unquote, urlsplit

    address = without_credentials(url)
    try:
        parts = urlsplit(url)
        user, password = parts.username, parts.password
    except ValueError as e:  # a malformed port or bracketed host
        raise ViTVariantsError(f'not a valid URL: {e}', path=redact(url)) from None
    if user is None:
        return address, None
    register_token(password)
    register_token(unquote(password or ''))
    if parts.scheme != 'https' and not _loopback(parts.hostname):
        raise ViTVariantsError(f'the URL holds credentials, and {parts.scheme}:// would send them across the network '
                               'in clear text (HTTP basic auth is not encrypted); nothing was sent. Use the https:// '
                               'address, or one without credentials', path=redact(url))
    return address, (unquote(user), unquote(password or ''))


def _loopback(host: Optional[str]) -> bool:
    """Whether ``host`` is this machine (``localhost``, 127.0.0.0/8, ``::1``): what is sent there crosses no network."""
    import ipaddress

    if host == 'localhost':
        return True
    try:
        return ipaddress.ip_address(host or '').is_loopback
    except ValueError:
        return False


def _opener(address: str, credentials: Optional[Tuple[str, str]]):
    """urllib's opener, sending ``credentials`` as basic auth from the first request, only to ``address``'s host
    (a redirect elsewhere gets none: the header is unredirected, and the password manager matches the host)."""
    import urllib.request
    from urllib.parse import urlsplit

    if credentials is None:
        return urllib.request.build_opener()
    parts = urlsplit(address)
    manager = urllib.request.HTTPPasswordMgrWithPriorAuth()
    manager.add_password(None, f'{parts.scheme}://{parts.netloc}/', *credentials, is_authenticated=True)
    return urllib.request.build_opener(urllib.request.HTTPBasicAuthHandler(manager))


def _download(url: str, credentials: Optional[Tuple[str, str]], shown: str, path: Path, progress: bool,
              bounds: DownloadBounds) -> None:
    """Fetch ``url`` into ``path`` through a temp file beside it, renamed only once complete and checked; errors
    name ``shown``, the URL as typed with its password masked."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(dir=path.parent, prefix=f'.{path.name}.', suffix='.partial')
    try:
        with reraised_as(lambda e: _download_failure(e, shown, min(bounds.stall, bounds.deadline))):
            with os.fdopen(fd, 'wb') as out:
                start = time.monotonic()
                opener = _opener(url, credentials)
                with opener.open(url, timeout=min(bounds.stall, bounds.deadline)) as response:
                    _check_content_type(response.headers.get('Content-Type'), shown)
                    _Transfer(shown, response, out, start, bounds, progress).run()
                out.flush()
                os.fsync(out.fileno())
            os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)


def _download_failure(error: Exception, url: str, stall: float) -> Exception:
    """The ViTVariantsError a failed download means (an error of no known kind as it is)."""
    import http.client
    import urllib.error

    if isinstance(error, urllib.error.HTTPError):
        if error.code in _REDIRECTS:
            return ViTVariantsError(f'download failed: too many redirects (HTTP {error.code} again and again: a '
                                    'redirect loop)', path=url)
        return ViTVariantsError(f'download failed: HTTP {error.code} {first_line(error.reason, typed=False)}', path=url)
    if isinstance(error, TimeoutError):  # a read that waited the whole stall timeout for one byte
        return ViTVariantsError(f'download stalled: no data for {stall:g} s (raise --stall-timeout)', path=url)
    if isinstance(error, http.client.HTTPException):  # IncompleteRead of a cut chunk, a malformed response
        return ViTVariantsError(f'download failed: the transfer was cut short or malformed ({type(error).__name__})',
                                path=url)
    if isinstance(error, (urllib.error.URLError, OSError, ValueError)):
        reason = getattr(error, 'reason', None) or getattr(error, 'strerror', None) or error
        if isinstance(reason, TimeoutError):
            reason = f'no answer from the server within {stall:g} s (raise --stall-timeout)'
        return ViTVariantsError(f'download failed: {first_line(reason, typed=False)}', path=url)
    return error


def _check_content_type(content_type: Optional[str], url: str) -> None:
    """Refuse a response the server itself calls a page (HTML, text, JSON), before a byte is kept."""
    kind = (content_type or '').split(';', 1)[0].strip().lower()
    if kind and kind.startswith(_PAGE_TYPES):
        raise ViTVariantsError(f'download refused: the server sent {kind}, a page rather than a checkpoint (a login, '
                               'error or portal page?); nothing was cached', path=url)


def _check_magic(head: bytes, url: str) -> None:
    """Refuse first bytes that are none of the containers the readers open: zip (.npz, torch.save), safetensors
    (8-byte header length, then ``{``), or a pickle of protocol 2 or later (legacy torch.save)."""
    if head.startswith(b'PK\x03\x04') or (len(head) >= 9 and head[8:9] == b'{') \
            or (len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5):
        return
    raise ViTVariantsError(f'download refused: its first bytes {head[:_MAGIC_BYTES]!r} are no checkpoint format vit-port reads '
                           '(.npz, safetensors, torch.save); nothing was cached', path=url)


class _Transfer:
    """Copy one response body to ``out``: first bytes checked, length checked, deadline and stall enforced,
    progress shown (a bar on a terminal, else a line every ``_PROGRESS_EVERY`` seconds)."""

    def __init__(self, url: str, response, out, start: float, bounds: DownloadBounds, progress: bool) -> None:
        self.url, self.response, self.out, self.start, self.bounds, self.progress = (
            url, response, out, start, bounds, progress)
        total = response.headers.get('Content-Length')
        self.total = int(total) if total and total.isdigit() else None
        self.name = os.path.basename(url.split('?', 1)[0].split('#', 1)[0].rstrip('/')) or url
        self.done = 0

    def run(self) -> None:
        from tqdm import tqdm

        head = b''  # the first bytes, held back until they are known to be a checkpoint
        mark, mark_bytes, said = self.start, 0, self.start
        with tqdm(total=self.total, unit='B', unit_scale=True, desc=f'download {self.name}', file=sys.stderr,
                  disable=not self.progress, leave=False) as bar:
            while chunk := self.response.read1(_CHUNK):
                now = time.monotonic()
                self.done += len(chunk)
                bar.update(len(chunk))
                if head is not None:
                    head += chunk
                    if len(head) >= _MAGIC_BYTES:
                        _check_magic(head, self.url)
                        chunk, head = head, None
                if head is None:
                    self.out.write(chunk)
                if self.done - mark_bytes >= _STALL_BYTES:
                    mark, mark_bytes = now, self.done
                self._check_time(now, mark)
                if not self.progress and now - said >= _PROGRESS_EVERY:
                    said = now
                    print(self._line(now), file=sys.stderr, flush=True)
        if self.total is not None and self.done != self.total:
            raise ViTVariantsError(f'download incomplete: the transfer was cut short at {self.done} of {self.total} '
                                   'bytes', path=self.url)
        if head is not None:  # a body shorter than the magic
            _check_magic(head, self.url)
            self.out.write(head)

    def _check_time(self, now: float, mark: float) -> None:
        if now - self.start > self.bounds.deadline:
            raise ViTVariantsError(f'download did not finish within {self.bounds.deadline:g} s ({self._sofar()}; '
                                   'raise --download-timeout)', path=self.url)
        if now - mark > self.bounds.stall:
            raise ViTVariantsError(f'download stalled: less than {_STALL_BYTES} bytes in {self.bounds.stall:g} s '
                                   f'({self._sofar()}; raise --stall-timeout)', path=self.url)

    def _sofar(self) -> str:
        return f'{self.done} of {self.total} bytes' if self.total is not None else f'{self.done} bytes'

    def _line(self, now: float) -> str:
        rate = self.done / max(now - self.start, 1e-9)
        share = f' ({100 * self.done / self.total:.0f}%)' if self.total else ''
        return f'download {self.name}: {_human(self.done)}' + (f' of {_human(self.total)}' if self.total else '') \
            + f'{share}, {_human(rate)}/s'


def _human(n: float) -> str:
    """A byte count as people read it: 812 B, 12.3 MB."""
    unit = 'B'
    for unit in ('B', 'kB', 'MB', 'GB'):
        if n < 1000 or unit == 'GB':
            break
        n /= 1000
    return f'{n:.0f} B' if unit == 'B' else f'{n:.1f} {unit}'
