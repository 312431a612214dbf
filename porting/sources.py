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
to fetch one says that it was read as a Hub id, and how to say either meaning exactly. This module reads the
name; ``hub_download.py`` fetches Hub repos and ``url_download.py`` URLs.
"""
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Optional, Union

from timm_vit_variants.errors import ViTVariantsError

from .hub_download import HUB_PREFIX, download_repo
from .url_download import (
    DEFAULT_DOWNLOAD_TIMEOUT, DEFAULT_STALL_TIMEOUT, DownloadBounds, download_dir, fetch_url, url_cache_path)

__all__ = ['ResolvedSource', 'resolve_source', 'download_dir', 'url_cache_path', 'HUB_PREFIX',
           'DEFAULT_DOWNLOAD_TIMEOUT', 'DEFAULT_STALL_TIMEOUT']

_LOCAL_PREFIX = 'local-dir:'
# A name ending like a checkpoint file is a path, never a Hub id.
_FILE_SUFFIXES = ('.npz', '.pth', '.pt', '.bin', '.safetensors', '.tar', '.ckpt', '.json')
_REPO_RE = re.compile(r'^[A-Za-z0-9][\w.-]*/[\w.-]+(@[\w./-]+)?$')
_TAG_RE = re.compile(r'^[a-z][a-z0-9_]*(\.[\w]+)?$')


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
    bounds = DownloadBounds(_seconds(download_timeout, DEFAULT_DOWNLOAD_TIMEOUT, 'download_timeout'),
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


# -- the Hub and plain URLs --------------------------------------------------------------------------------

def _from_hub(spec: str, endpoint: Optional[str], token: Optional[str], progress: bool, typed: str,
              filename: Optional[str] = None) -> ResolvedSource:
    """A snapshot of the repo's config and one set of weights (or the one file ``filename``), from the cache."""
    repo_id, _, revision = spec.partition('@')
    path = download_repo(repo_id, revision or None, endpoint=endpoint, token=token, progress=progress, typed=typed,
                         filename=filename)
    snapshot = Path(path) if os.path.isdir(path) else Path(path).parent
    return ResolvedSource(path, f'{HUB_PREFIX}{repo_id}' + (f'@{revision}' if revision else ''), 'hub',
                          {'revision': snapshot.name})


def _from_url(url: str, progress: bool, bounds: DownloadBounds, reuse: Optional[Path] = None) -> ResolvedSource:
    """One file, downloaded once; the label and provenance hold the URL without credentials."""
    path, address = fetch_url(url, progress, bounds, reuse)
    return ResolvedSource(path, address, 'url', {'url': address})


# -- registered tags ----------------------------------------------------------------------------------------

def _from_tag(name: str, endpoint: Optional[str], token: Optional[str], progress: bool,
              bounds: DownloadBounds) -> Optional[ResolvedSource]:
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
