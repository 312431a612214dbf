"""Sources by name: turn what the user typed as SRC into a local file or folder the readers can open.

Resolved in this order:

1. an existing local path (a file or folder; ``local-dir:PATH`` too) wins, whatever it looks like;
2. ``hf-hub:ORG/NAME[@REV]``, or a bare ``ORG/NAME[@REV]`` that is not a local path: a Hub model repo,
   downloaded with ``huggingface_hub.snapshot_download`` into its cache (``HF_HUB_CACHE``, ``HF_HUB_OFFLINE``,
   ``HF_ENDPOINT`` or ``endpoint=``, the token), only the config, preprocessor config and one set of weights;
3. ``https://...`` (or ``http://``): one file, downloaded once into timm's own download cache
   (``torch.hub.get_dir()/checkpoints``), in an entry keyed by the whole URL; the pipeline records its sha256.
   A progress bar shows on a terminal, and elsewhere one line every few seconds (none for a quick download).
   The download has an overall deadline and a stall timeout (``download_timeout``, ``stall_timeout``); a web
   page (by its content type, or by first bytes that are no checkpoint format) is refused before anything is
   cached, and a failed or cut transfer leaves nothing in the cache. Credentials in the URL
   (``https://USER:PASSWORD@HOST/...``) are sent as HTTP basic auth, from the first request and only to that
   host (as pip and curl use them); they are never printed, recorded or part of the cache key. Basic auth is
   not encrypted, so with ``http://`` they are refused, unless the host is this machine (loopback);
4. a registered timm name or tag (``simple_vit_small_patch16_224.bv_i1k_300ep``): the ``hf_hub_id`` or ``url``
   of its ``pretrained_cfg`` (a file timm itself downloaded for that URL, ``checkpoints/NAME``, is reused).

What a card and ``config.json`` record is the ``label``: the Hub id, the URL or the tag; a local path only by
its file name. A bare ``ORG/NAME`` is ambiguous (a mistyped relative path reads the same), so every failure
to fetch one says that it was read as a Hub id, and how to say either meaning exactly.
"""
import contextlib
import hashlib
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple, Union

from timm_vit_variants.checkpoints.files import CONFIG_FILE, INDEX_FILES, SINGLE_WEIGHT_FILES
from timm_vit_variants.errors import ViTVariantsError, first_line, reraised_as

from .hub_access import is_offline
from .redact import redact, register_token, without_credentials

__all__ = ['ResolvedSource', 'resolve_source', 'download_dir', 'url_cache_path', 'HUB_PREFIX',
           'DEFAULT_DOWNLOAD_TIMEOUT', 'DEFAULT_STALL_TIMEOUT']

HUB_PREFIX = 'hf-hub:'
_LOCAL_PREFIX = 'local-dir:'
# Besides the weights, what a reader may look at in a Hub repo.
_SIDE_FILES = (CONFIG_FILE, 'preprocessor_config.json', 'open_clip_config.json')
_SHARD_PATTERNS = ('model-*-of-*.safetensors', 'pytorch_model-*-of-*.bin')
# The weight sets a repo may hold, in the readers' order (``checkpoints.files``): one file, an index and its
# shards, or a single .npz.
_WEIGHT_SETS = (*((name,) for name in SINGLE_WEIGHT_FILES), *zip(INDEX_FILES, _SHARD_PATTERNS), ('*.npz',))
# A name ending like a checkpoint file is a path, never a Hub id.
_FILE_SUFFIXES = ('.npz', '.pth', '.pt', '.bin', '.safetensors', '.tar', '.ckpt', '.json')
_REPO_RE = re.compile(r'^[A-Za-z0-9][\w.-]*/[\w.-]+(@[\w./-]+)?$')
_TAG_RE = re.compile(r'^[a-z][a-z0-9_]*(\.[\w]+)?$')
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
class ResolvedSource:
    """Where a source's bytes are on this machine, and how a card names it.

    Attributes:
        path: The local file or folder the readers open.
        label: What the card and ``config.json`` record: ``hf-hub:ORG/NAME[@REV]``, the URL, the tag, or a
            local path's file name.
        kind: ``'local'``, ``'hub'``, ``'url'`` or ``'tag'``.
        provenance: Extra facts to record: ``url`` (the file a tag or URL names), ``revision`` (the Hub commit
            the snapshot holds).
    """
    path: str
    label: str
    kind: str
    provenance: Dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Bounds:
    """How long an https:// download may take in all, and may go without making progress (seconds)."""
    deadline: float
    stall: float


def resolve_source(source: Union[str, os.PathLike], endpoint: Optional[str] = None, token: Optional[str] = None,
                   progress: bool = False, download_timeout: Optional[float] = None,
                   stall_timeout: Optional[float] = None) -> ResolvedSource:
    """The local file or folder behind ``source`` (see the module docstring); downloads what is not cached.

    ``download_timeout`` and ``stall_timeout`` (seconds; ``--download-timeout``, ``--stall-timeout``) bound an
    https:// download: default ``DEFAULT_DOWNLOAD_TIMEOUT`` in all, and ``DEFAULT_STALL_TIMEOUT`` for less than
    1 KiB to arrive. Hub downloads keep ``huggingface_hub``'s own timeouts (``HF_HUB_DOWNLOAD_TIMEOUT``).

    Raises ViTVariantsError naming the source and the reason: not found locally (and not a name), not on the
    Hub, offline and not cached, a download that failed.
    """
    bounds = _Bounds(_seconds(download_timeout, DEFAULT_DOWNLOAD_TIMEOUT, 'download_timeout'),
                     _seconds(stall_timeout, DEFAULT_STALL_TIMEOUT, 'stall_timeout'))
    text = os.fspath(source)
    local = text[len(_LOCAL_PREFIX):] if text.startswith(_LOCAL_PREFIX) else text
    if os.path.lexists(local):
        return ResolvedSource(local, os.path.basename(os.path.abspath(local)) or local, 'local')
    if text.startswith(HUB_PREFIX):
        return _from_hub(text[len(HUB_PREFIX):], endpoint, token, progress, typed=text)
    if text.startswith(('https://', 'http://')):
        return _from_url(text, progress, bounds)
    if _looks_like_repo(text):
        return _from_hub(text, endpoint, token, progress, typed=text)
    if _TAG_RE.match(text) and not text.lower().endswith(_FILE_SUFFIXES):
        tagged = _from_tag(text, endpoint, token, progress, bounds)
        if tagged is not None:
            return tagged
    raise ViTVariantsError('source not found: no such local file or folder, and not a Hub id (hf-hub:ORG/NAME), '
                           'an https:// URL or a registered model tag', path=local)


def _seconds(value: Optional[float], default: float, key: str) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float('inf'):
        raise ViTVariantsError(f'{key} must be a positive number of seconds, got {value!r}', key=key)
    return float(value)


def _looks_like_repo(text: str) -> bool:
    """``ORG/NAME[@REV]`` that cannot be meant as a checkpoint path (no leading ./ or /, no file suffix)."""
    name = text.split('@', 1)[0]
    return bool(_REPO_RE.match(text)) and not name.lower().endswith(_FILE_SUFFIXES)


# -- the Hub ------------------------------------------------------------------------------------------------

def _split_revision(spec: str) -> Tuple[str, Optional[str]]:
    repo_id, _, revision = spec.partition('@')
    return repo_id, revision or None


def _from_hub(spec: str, endpoint: Optional[str], token: Optional[str], progress: bool, typed: str,
              filename: Optional[str] = None) -> ResolvedSource:
    """A snapshot of the repo's config and one set of weights (or the one file ``filename``), from the cache."""
    from huggingface_hub.utils import validate_repo_id

    repo_id, revision = _split_revision(spec)
    try:
        validate_repo_id(repo_id)
    except Exception as e:  # noqa: BLE001  (HFValidationError: the message says what is wrong)
        raise ViTVariantsError(f'not a Hub model id: {e}', path=typed) from None
    label = f'{HUB_PREFIX}{repo_id}' + (f'@{revision}' if revision else '')
    with _hub_errors(typed, repo_id, revision, token, bare=not typed.startswith(HUB_PREFIX)), \
            _progress_bars(progress):
        path = _the_npz_of(_download_from_hub(repo_id, revision, endpoint, token, filename))
    snapshot = Path(path) if os.path.isdir(path) else Path(path).parent
    return ResolvedSource(path, label, 'hub', {'revision': snapshot.name})


def _download_from_hub(repo_id: str, revision: Optional[str], endpoint: Optional[str], token: Optional[str],
                       filename: Optional[str]) -> str:
    from huggingface_hub import HfApi, hf_hub_download, snapshot_download
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

    where = dict(revision=revision, endpoint=endpoint, token=token)
    if filename is not None:
        return hf_hub_download(repo_id, filename, local_files_only=is_offline(), **where)
    if is_offline():
        return _cached_snapshot(repo_id, where)
    try:
        names = [s.rfilename for s in HfApi(endpoint=endpoint, token=token).model_info(repo_id, revision=revision).siblings]
    except (GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError):
        raise
    except Exception as unreachable:  # noqa: BLE001  (a connection or server failure: the cache may still serve)
        try:
            return _cached_snapshot(repo_id, where)
        except Exception:  # noqa: BLE001  (not cached either: the first failure is the one to report)
            raise unreachable from None
    wanted = _wanted_files(names)
    if wanted is None:
        raise ViTVariantsError(f'the Hub repo holds no weights vit-port reads (looked for {", ".join(SINGLE_WEIGHT_FILES)}, '
                               f'a shard index, or one .npz; it has: {", ".join(sorted(names)[:12]) or "no files"})',
                               path=f'{HUB_PREFIX}{repo_id}')
    if len(wanted) == 1 and wanted[0].endswith('.npz'):
        return hf_hub_download(repo_id, wanted[0], **where)
    return snapshot_download(repo_id, allow_patterns=wanted, **where)


def _cached_snapshot(repo_id: str, where: Dict[str, Optional[str]]) -> str:
    """The cached snapshot holding the side files and one complete weight set, tried in the readers' order.

    ``snapshot_download`` refuses a cached snapshot that misses a file its patterns match, so each weight set
    is asked for on its own: a cache holding ``model.safetensors`` is complete for that set even when the repo
    also lists a ``pytorch_model.bin`` that was never downloaded.
    """
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    first_error: Optional[Exception] = None
    for weights in _WEIGHT_SETS:
        try:
            return snapshot_download(repo_id, local_files_only=True, allow_patterns=[*_SIDE_FILES, *weights], **where)
        except LocalEntryNotFoundError as e:  # IncompleteSnapshotError too
            first_error = first_error or e
    raise first_error


def _the_npz_of(path: str) -> str:
    """A snapshot folder that holds one ``.npz`` and no Hub-folder weights is that file (readers take it as one)."""
    if not os.path.isdir(path) or any(os.path.exists(os.path.join(path, n)) for n in (*SINGLE_WEIGHT_FILES, *INDEX_FILES)):
        return path
    npz = [n for n in os.listdir(path) if n.endswith('.npz')]
    return os.path.join(path, npz[0]) if len(npz) == 1 else path


def _wanted_files(names: List[str]) -> Optional[List[str]]:
    """The side files plus the first weight set the readers would pick (``checkpoints.files`` order), or None."""
    present = set(names)
    side = [n for n in _SIDE_FILES if n in present]
    for name in SINGLE_WEIGHT_FILES:
        if name in present:
            return side + [name]
    for index, pattern in zip(INDEX_FILES, _SHARD_PATTERNS):
        if index in present:
            return side + [index, pattern]
    npz = [n for n in names if n.endswith('.npz')]
    if len(npz) > 1:
        raise ViTVariantsError(f'the Hub repo holds {len(npz)} .npz files ({", ".join(sorted(npz)[:6])}); name one '
                               'by its URL, https://HUB/ORG/NAME/resolve/REV/FILE')
    return npz or None


@contextlib.contextmanager
def _hub_errors(typed: str, repo_id: str, revision: Optional[str], token: Optional[str], bare: bool) -> Iterator[None]:
    """Turn a client failure into one ViTVariantsError that says what SRC was read as, and why it failed."""
    def refusal(error: Exception) -> ViTVariantsError:
        reason = _hub_reason(error, f'the Hub model {repo_id}' + (f' at revision {revision!r}' if revision else ''))
        if bare:
            reason = (f'{typed!r} is not a local file or folder, so it was read as a Hub model id, and {reason}. '
                      f'For a local path, check it (./{typed} says so); for the Hub, {HUB_PREFIX}{typed} does')
        return ViTVariantsError(redact(reason, [token]), path=typed)

    with reraised_as(refusal):
        yield


def _hub_reason(error: Exception, where: str) -> str:
    from huggingface_hub.errors import (
        GatedRepoError, HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError)

    if isinstance(error, GatedRepoError):
        return f'{where} is gated: accept its terms on the Hub, then give a token (HF_TOKEN or --token)'
    if isinstance(error, RepositoryNotFoundError):
        return f'{where} does not exist, or is private (give a token: HF_TOKEN or --token)'
    if isinstance(error, RevisionNotFoundError):
        return f'{where}: no such revision'
    if isinstance(error, LocalEntryNotFoundError):
        if is_offline():
            return f'{where} is not in the local Hub cache and HF_HUB_OFFLINE is set (unset it to download)'
        return f'{where} could not be reached and is not in the local Hub cache ({first_line(error, typed=False)})'
    if isinstance(error, HfHubHTTPError):
        status = error.response.status_code if error.response is not None else None
        return f'{where}: HTTP {status}: {first_line(error, typed=False)}'
    return f'{where} could not be downloaded: {type(error).__name__}: {first_line(error, typed=False)}'


@contextlib.contextmanager
def _progress_bars(show: bool) -> Iterator[None]:
    """huggingface_hub's bars on stderr only when asked for (a terminal); the previous setting is restored."""
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    was_disabled = are_progress_bars_disabled()
    if not show:
        disable_progress_bars()
    try:
        yield
    finally:
        if not show and not was_disabled:
            enable_progress_bars()


# -- plain URLs ---------------------------------------------------------------------------------------------

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


def _from_url(url: str, progress: bool, bounds: _Bounds, reuse: Optional[Path] = None) -> ResolvedSource:
    """One file, downloaded once (atomically: a partial download never looks cached). ``reuse``: a file already
    downloaded for this URL elsewhere (timm's own entry for a tag's URL), taken when present. Errors name the URL
    with its password masked; the label and provenance hold it without credentials."""
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
    return ResolvedSource(str(path), address, 'url', {'url': address})


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
              bounds: _Bounds) -> None:
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

    def __init__(self, url: str, response, out, start: float, bounds: _Bounds, progress: bool) -> None:
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


# -- registered tags ----------------------------------------------------------------------------------------

def _from_tag(name: str, endpoint: Optional[str], token: Optional[str], progress: bool,
              bounds: _Bounds) -> Optional[ResolvedSource]:
    """The weights a registered timm name or tag points at; None when it is not one."""
    import timm

    import timm_vit_variants  # noqa: F401  (registers the simple_vit_* tags)

    if not timm.is_model(name.split('.', 1)[0]):
        return None
    try:
        cfg = timm.models.get_pretrained_cfg(name)
    except RuntimeError:  # timm: "Invalid pretrained tag (...) for ..."
        cfg = None
    if cfg is None:
        raise ViTVariantsError(f'{name!r} is a registered model, but no such pretrained tag (registered: '
                               f'{", ".join(timm.list_pretrained(name.split(".", 1)[0] + ".*")) or "none"})',
                               path=name)
    if cfg.hf_hub_id:
        hub = _from_hub(cfg.hf_hub_id, endpoint, token, progress, typed=f'{HUB_PREFIX}{cfg.hf_hub_id}',
                        filename=cfg.hf_hub_filename or None)
        return ResolvedSource(hub.path, name, 'tag', {**hub.provenance, 'hf_hub_id': cfg.hf_hub_id})
    if cfg.url:
        url = _from_url(cfg.url, progress, bounds, reuse=download_dir() / os.path.basename(cfg.url.split('?')[0]))
        return ResolvedSource(url.path, name, 'tag', url.provenance)
    raise ViTVariantsError(f'the tag {name!r} names no downloadable weights (its pretrained_cfg has neither '
                           'hf_hub_id nor url)', path=name)
