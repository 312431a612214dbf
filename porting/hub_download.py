"""Hub model repos as local files: a snapshot of one repo's config and one set of weights, from the Hub cache.

``download_repo`` fetches with ``huggingface_hub`` into its own cache (``HF_HUB_CACHE``, ``HF_HUB_OFFLINE``,
``HF_ENDPOINT`` or ``endpoint=``, the token): only the side files a reader looks at (config, preprocessor config)
and the first weight set the readers would pick (``checkpoints.files`` order). Offline, or with the Hub out of
reach, a cached snapshot holding one complete weight set serves. Every client failure becomes one
ViTVariantsError that says what SRC was read as (a bare ``ORG/NAME`` may be a mistyped path) and why it failed.
Part of resolving a source by name (``porting.sources``).
"""
import contextlib
import os
from typing import Dict, Iterator, List, Optional

from timm_vit_variants.checkpoints.files import CONFIG_FILE, INDEX_FILES, SINGLE_WEIGHT_FILES
from timm_vit_variants.errors import ViTVariantsError, first_line, reraised_as

from .hub_access import is_offline
from .redact import redact

__all__ = ['HUB_PREFIX', 'download_repo']

HUB_PREFIX = 'hf-hub:'
# Besides the weights, what a reader may look at in a Hub repo.
_SIDE_FILES = (CONFIG_FILE, 'preprocessor_config.json', 'open_clip_config.json')
_SHARD_PATTERNS = ('model-*-of-*.safetensors', 'pytorch_model-*-of-*.bin')
# The weight sets a repo may hold, in the readers' order (``checkpoints.files``): one file, an index and its
# shards, or a single .npz.
_WEIGHT_SETS = (*((name,) for name in SINGLE_WEIGHT_FILES), *zip(INDEX_FILES, _SHARD_PATTERNS), ('*.npz',))


def download_repo(repo_id: str, revision: Optional[str], *, endpoint: Optional[str], token: Optional[str],
                  progress: bool, typed: str, filename: Optional[str] = None) -> str:
    """The local snapshot folder of the repo's config and one set of weights (or the one file ``filename``; a
    snapshot of one ``.npz`` is that file), downloaded unless cached. ``typed`` is SRC as the user gave it.

    Raises ViTVariantsError naming ``typed``: not a repo id, not on the Hub, gated, offline and not cached.
    """
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo_id)
    except Exception as e:  # noqa: BLE001  (HFValidationError: the message says what is wrong)
        raise ViTVariantsError(f'not a Hub model id: {e}', path=typed) from None
    with _hub_errors(typed, repo_id, revision, token, bare=not typed.startswith(HUB_PREFIX)), \
            _progress_bars(progress):
        return _the_npz_of(_download_from_hub(repo_id, revision, endpoint, token, filename))


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
