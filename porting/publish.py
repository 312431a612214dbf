"""Push a converted model folder to the Hugging Face Hub with ``huggingface_hub``.

One commit per push (or one pull request with ``create_pr``). Files the Hub already holds byte for byte are
left out, so pushing an unchanged folder makes no commit. An existing card on the Hub that differs from ours
is kept unless ``overwrite_card``. The token is never printed, logged or put into an error message; every
client error comes back as ``ViTVariantsError``. Nothing in the local folder is changed.

What is uploaded: the regular files under the folder (hidden names left out) whose real path is inside it. A
symlink leading out of the folder, a FIFO or device, and a file holding a Hub token are refused, naming the file,
before any request. The folder must be a vit-port output (a simple_vit ``config.json`` and safetensors weights
holding the tensors it implies) unless ``force``.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

import timm
from huggingface_hub import CommitOperationAdd, HfApi, get_token
from huggingface_hub.errors import HfHubHTTPError, HFValidationError, RevisionNotFoundError
from huggingface_hub.utils import validate_repo_id
from tqdm import tqdm

from timm_vit_variants.checkpoints.files import CONFIG_FILE, read_json, weight_files
from timm_vit_variants.config import is_family_architecture
from timm_vit_variants.errors import ViTVariantsError, first_line, reraised_as

from .card import REPO_PLACEHOLDER, build_model_card, fill_repo_id
from .hub_access import full_repo_id, is_offline
from .redact import holds_token, known_tokens, redact
from .hub_folder import CARD_FILE, check_config_fields, read_config
from .safetensors_writer import INDEX_FILE, SINGLE_FILE

DEFAULT_BRANCH = 'main'
_CHUNK = 8 << 20


@dataclass
class UploadFile:
    """One file as it will be sent: where it lives in the repo, its bytes on disk (or in memory), its hashes."""
    path_in_repo: str
    size: int
    sha256: str
    git_sha1: str  # the git blob id, which the Hub reports as the oid of a regular file
    local_path: Optional[Path] = None
    data: Optional[bytes] = None  # set when the uploaded bytes differ from the disk (card with repo id filled in)
    note: str = ''

    def source(self):
        return self.data if self.data is not None else str(self.local_path)


@dataclass
class PushResult:
    repo_id: str
    revision: str
    files: list  # every UploadFile considered
    uploaded: list = field(default_factory=list)   # paths sent in the commit
    unchanged: list = field(default_factory=list)  # paths the Hub already held
    kept_remote_card: bool = False
    commit_url: Optional[str] = None
    commit_oid: Optional[str] = None
    pr_url: Optional[str] = None
    dry_run: bool = False
    create_pr: bool = False
    notes: list = field(default_factory=list)  # things to tell the user on stderr
    planned: list = field(default_factory=list)  # a dry run's lines

    @property
    def changed(self) -> bool:
        return bool(self.uploaded)

    def report(self) -> List[Tuple[str, bool]]:
        """(line, is_a_note) pairs for the command layer: the URL, or the dry-run listing, or "nothing changed"."""
        lines = [(note, True) for note in self.notes]
        if self.dry_run:
            return lines + [(line, False) for line in self.planned]
        if not self.uploaded:
            return lines + [(f'nothing changed: {self.repo_id}@{self.revision} already holds these '
                             f'{len(self.unchanged)} files (commit {self.commit_oid}); no commit made', False)]
        return lines + [(self.pr_url if self.create_pr else self.commit_url, False)]


def resolve_token(token: Optional[str] = None) -> Optional[str]:
    """``token`` if given, else ``HF_TOKEN``, else the login cache (``huggingface_hub.get_token`` order)."""
    return token or get_token()


def require_token(token: Optional[str] = None) -> str:
    """The token ``resolve_token`` finds; a clear error (before any request) when there is none."""
    resolved = resolve_token(token)
    if not resolved:
        raise ViTVariantsError('no Hub token: pass --token, set HF_TOKEN or log in with `hf auth login`')
    return resolved


def check_repo_id(repo_id: str) -> None:
    """A Hub model id as ``huggingface_hub`` validates it: ``ORG/NAME``, or a bare ``NAME`` for the token's own
    namespace (``target_repo_id``)."""
    try:
        validate_repo_id(repo_id)
    except HFValidationError as e:
        raise ViTVariantsError(f'invalid repo id {repo_id!r}: {e}', key='repo_id') from None


def target_repo_id(repo_id: str, token: Optional[str], endpoint: Optional[str] = None, dry_run: bool = False) -> str:
    """The ``ORG/NAME`` a push goes to: a bare name under the token's namespace, asked of the Hub (``whoami``).

    A dry run sends nothing, so it cannot ask: a bare name there is refused with what to give instead.
    """
    if '/' in repo_id:
        return repo_id
    if dry_run:
        raise ViTVariantsError(f'repo id {repo_id!r} has no namespace, and --dry-run sends no request to ask the Hub '
                               "for the token's: give ORG/NAME", key='repo_id')
    return full_repo_id(repo_id, token, endpoint)


def collect_folder(folder, repo_id: str, force: bool = False) -> list[UploadFile]:
    """Check ``folder`` is a converted model and hash every file that would be uploaded.

    Refused, naming the file: a symlink whose target is outside the folder, anything that is not a regular file,
    a file holding a Hub token, and (unless ``force``) a folder vit-port did not write: a ``config.json`` naming
    another architecture, or weights that are not safetensors holding the tensors the config implies.
    A card still carrying the ``ORG/NAME`` placeholder is uploaded with ``repo_id`` filled in; a folder without
    a card gets one built from ``config.json`` (a simple_vit one only). Both happen in memory: the folder itself
    is only read.
    """
    root = Path(folder)
    if not root.is_dir():
        raise ViTVariantsError('the folder to push does not exist or is not a folder (push takes REPO_ID, then FOLDER, '
                               'as `hf upload`)', path=root)
    paths = list(_walk(root))  # every symlink and special file checked before anything is opened
    config = _read_config(root)
    if not force:
        _check_vit_port_folder(root)
    weight_files(str(root))  # complete weights: the single file, or every shard the index names

    tokens = known_tokens()
    files = [_hash_file(p, p.relative_to(root).as_posix(), tokens) for p in paths]
    by_path = {f.path_in_repo: f for f in files}
    card = by_path.get(CARD_FILE)
    if card is None:
        if not is_family_architecture(config['architecture']):
            raise ViTVariantsError(f'no {CARD_FILE} in the folder, and vit-port builds cards only for simple_vit '
                                   f'models (config.json names {config["architecture"]!r}): add a {CARD_FILE}',
                                   path=root / CARD_FILE)
        text = str(build_model_card(architecture=config['architecture'], model_args=config.get('model_args') or {},
                                    num_classes=config.get('num_classes', 0), repo_id=repo_id,
                                    label_names=config.get('label_names')))
        files.append(_hash_bytes(CARD_FILE, text.encode(), 'no README.md in folder: card built from config.json'))
    else:
        text = card.local_path.read_text(encoding='utf-8')
        if f'hf-hub:{REPO_PLACEHOLDER}' in text:
            filled = _hash_bytes(CARD_FILE, fill_repo_id(text, repo_id).encode(), f'{REPO_PLACEHOLDER} filled in')
            filled.local_path = card.local_path
            files[files.index(card)] = filled
    return sorted(files, key=lambda f: f.path_in_repo)


def push_folder(
        folder,
        repo_id: str,
        *,
        private: bool = False,
        revision: Optional[str] = None,
        create_pr: bool = False,
        commit_message: Optional[str] = None,
        token: Optional[str] = None,
        endpoint: Optional[str] = None,
        dry_run: bool = False,
        overwrite_card: bool = False,
        force: bool = False,
) -> PushResult:
    """Upload ``folder`` to ``repo_id`` in one commit (or pull request); ``PushResult.report()`` says what happened.

    Args:
        repo_id: ``ORG/NAME``, or a bare ``NAME`` for the token's own namespace (as ``hf upload``).
        revision: branch to commit to (created from ``main`` when missing), or ``refs/pr/N`` to add to an open
            pull request; the pull request's target branch with ``create_pr``.
        token: Hub token; defaults to ``HF_TOKEN``, then the login cache.
        endpoint: Hub URL; defaults to ``HF_ENDPOINT`` or https://huggingface.co.
        dry_run: list what would be uploaded (path, size, sha256) and make no request at all.
        overwrite_card: replace a different ``README.md`` already on the Hub (kept otherwise).
        force: push a folder vit-port did not write (another architecture, other weights); the symlink, special
            file and token refusals still hold.
    """
    check_repo_id(repo_id)
    if not dry_run and is_offline():
        raise ViTVariantsError('HF_HUB_OFFLINE is set, so nothing is pushed (unset it, or use --dry-run to list the '
                               'files)', path=folder)
    if '/' not in repo_id:
        repo_id = target_repo_id(repo_id, None if dry_run else resolve_token(token), endpoint, dry_run)
    branch = revision or DEFAULT_BRANCH
    files = collect_folder(folder, repo_id, force)
    result = PushResult(repo_id=repo_id, revision=branch, files=files, dry_run=dry_run, create_pr=create_pr)
    if any(f.path_in_repo == INDEX_FILE for f in files):
        result.notes.append(f'note: sharded weights; timm {timm.__version__} loads hf-hub: repos only from a single '
                            f'{SINGLE_FILE}, so `timm.create_model("hf-hub:{repo_id}")` will not find these')
    if dry_run:
        result.planned = _describe_plan(result, private, create_pr)
        return result
    token = require_token(token)
    api = HfApi(endpoint=endpoint, token=token)
    where = f'{api.endpoint}/{repo_id}'
    with _translated('creating the repo', where, token):
        api.create_repo(repo_id, private=private, exist_ok=True)
    if branch != DEFAULT_BRANCH and not branch.startswith('refs/pr/'):  # a PR ref already exists; push onto it
        with _translated(f'creating branch {branch!r}', where, token):
            api.create_branch(repo_id, branch=branch, exist_ok=True)
    to_send = _changed_files(api, result, where, token, overwrite_card)
    if not to_send:
        with _translated('reading the repo head', where, token):
            result.commit_oid = api.repo_info(repo_id, revision=branch).sha
        return result
    message = commit_message or f'Upload {Path(folder).name} with vit-port'
    ops = [CommitOperationAdd(path_in_repo=f.path_in_repo, path_or_fileobj=f.source()) for f in to_send]
    with _translated('opening a pull request' if create_pr else 'committing', where, token, committing=True):
        info = api.create_commit(repo_id, operations=ops, commit_message=message,
                                 revision=branch, create_pr=create_pr)
    result.uploaded = [f.path_in_repo for f in to_send]
    result.commit_url, result.commit_oid, result.pr_url = str(info.commit_url), info.oid, info.pr_url
    return result


def _changed_files(api: HfApi, result: PushResult, where: str, token: str, overwrite_card: bool) -> list:
    """The files the Hub does not hold yet; records the unchanged ones, and a remote card kept."""
    with _translated('listing the files already on the Hub', where, token):
        remote = _remote_files(api, result.repo_id, result.revision, [f.path_in_repo for f in result.files])
    to_send = []
    for f in result.files:
        held = remote.get(f.path_in_repo)
        if held is not None and _same(f, held):
            result.unchanged.append(f.path_in_repo)
        elif f.path_in_repo == CARD_FILE and held is not None and not overwrite_card:
            result.kept_remote_card = True
            result.notes.append(f'kept the README.md already on {result.repo_id}@{result.revision} (it differs from '
                                'the local card); pass --overwrite-card to replace it')
        else:
            to_send.append(f)
    return to_send


def _describe_plan(result: PushResult, private: bool, create_pr: bool) -> list[str]:
    """Lines listing every file a push would send, with size and sha256."""
    target = f'{result.repo_id}@{result.revision}' + (' as a pull request' if create_pr else '')
    total = sum(f.size for f in result.files)
    lines = [f'dry run: would push {len(result.files)} files ({total} bytes) to {target}'
             + (' (private repo if created)' if private else '')]
    width = max(len(f.path_in_repo) for f in result.files)
    for f in result.files:
        note = f'  ({f.note})' if f.note else ''
        lines.append(f'  {f.path_in_repo:<{width}}  {f.size:>12d}  sha256:{f.sha256}{note}')
    lines.append('nothing was sent; files the Hub already holds are skipped at push time')
    return lines


def _read_config(root: Path) -> dict:
    """``config.json`` with its fields of the right types (``--force``: any architecture)."""
    path = root / CONFIG_FILE
    if not path.is_file():
        raise ViTVariantsError(f'missing {CONFIG_FILE}: not a converted model folder', path=path)
    return check_config_fields(read_json(str(path)), str(path))


def _check_vit_port_folder(root: Path) -> None:
    """Refuse a folder vit-port did not write: it has a simple_vit architecture, and safetensors weights holding
    exactly the tensors (names and shapes) of the model its ``config.json`` describes."""
    from timm_vit_variants import SimpleVisionTransformer
    from timm_vit_variants.checkpoints.stores import SafetensorsStore

    forced = ' (pass --force to push it anyway)'
    try:
        config, _ = read_config(root)
    except ViTVariantsError as e:
        if e.key != 'architecture':
            raise
        raise ViTVariantsError(f'not a vit-port output: {e.reason}{forced}', path=e.path, key=e.key) from None
    files = weight_files(str(root))
    if not all(f.endswith('.safetensors') for f in files):
        raise ViTVariantsError(f'not a vit-port output: its weights are not safetensors{forced}', path=files[0])
    try:
        store = SafetensorsStore(files)
    except ViTVariantsError as e:
        raise ViTVariantsError(f'the weights do not open as safetensors ({e.reason}){forced}', path=e.path,
                               key=e.key) from None
    try:
        held = {name: tuple(store.shape(name)) for name in store.names()}
    finally:
        store.close()
    expected = {name: shape for name, shape, _ in SimpleVisionTransformer.state_layout(config)}
    missing, extra = sorted(set(expected) - set(held)), sorted(set(held) - set(expected))
    if missing or extra:
        raise ViTVariantsError(f'the weights do not match config.json: {len(missing)} missing (e.g. {missing[:3]}), '
                               f'{len(extra)} unexpected (e.g. {extra[:3]}){forced}', path=files[0])
    for name, shape in expected.items():
        if held[name] != shape:
            raise ViTVariantsError(f'the weights do not match config.json: shape {list(held[name])}, config.json '
                                   f'implies {list(shape)}{forced}', path=files[0], key=name)


def _walk(root: Path) -> Iterator[Path]:
    """The files to upload under ``root``: hidden names (``.git``, ``.cache``, temp files) are left out; a symlink
    whose target is outside ``root`` and anything that is not a regular file are refused, naming it.

    A symlink to a file inside ``root`` is uploaded under the link's name; a symlinked folder inside ``root`` is
    not descended (its files are already under their own path).
    """
    real_root = root.resolve()
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames:
            if os.path.islink(os.path.join(dirpath, name)) and not name.startswith('.'):
                _check_inside(Path(dirpath) / name, real_root)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith('.'))
        for name in sorted(filenames):
            if name.startswith('.'):
                continue
            path = Path(dirpath) / name
            _check_inside(path, real_root)
            if not path.is_file():
                raise ViTVariantsError('not a regular file (a FIFO, socket or device, or a broken symlink): push '
                                       'uploads regular files only; remove it from the folder', path=path)
            yield path


def _check_inside(path: Path, real_root: Path) -> None:
    if path.is_symlink() and not path.resolve().is_relative_to(real_root):
        raise ViTVariantsError(f'a symlink to {os.readlink(path)}, outside the folder: push uploads only files '
                               'inside FOLDER; replace the link with the file, or remove it', path=path)


def _hash_file(path: Path, path_in_repo: str, tokens: list) -> UploadFile:
    """The file's hashes, computed in one read that also refuses a file holding a Hub token."""
    size = path.stat().st_size
    sha256, sha1 = hashlib.sha256(), hashlib.sha1(b'blob %d\0' % size)
    overlap = max([64, *(len(t) for t in tokens)])  # a token cut by a chunk boundary is still seen whole
    tail = b''
    with open(path, 'rb') as fh, tqdm(total=size, unit='B', unit_scale=True, desc=f'hashing {path_in_repo}',
                                      disable=not sys.stderr.isatty() or size < _CHUNK, leave=False) as bar:
        while chunk := fh.read(_CHUNK):
            if holds_token(tail + chunk, tokens):
                raise ViTVariantsError('looks like it holds a Hugging Face token (hf_...): nothing was pushed; '
                                       'remove the token from the file', path=path)
            tail = chunk[-overlap:]
            sha256.update(chunk)
            sha1.update(chunk)
            bar.update(len(chunk))
    return UploadFile(path_in_repo, size, sha256.hexdigest(), sha1.hexdigest(), local_path=path)


def _hash_bytes(path_in_repo: str, data: bytes, note: str) -> UploadFile:
    return UploadFile(path_in_repo, len(data), hashlib.sha256(data).hexdigest(),
                      hashlib.sha1(b'blob %d\0' % len(data) + data).hexdigest(), data=data, note=note)


def _remote_files(api: HfApi, repo_id: str, revision: str, paths: list[str]) -> dict:
    """Path -> RepoFile for those of ``paths`` the Hub holds at ``revision`` (none on a revision not yet made)."""
    try:
        entries = api.get_paths_info(repo_id, paths, revision=revision)
    except RevisionNotFoundError:
        return {}
    return {e.path: e for e in entries if hasattr(e, 'blob_id')}


def _same(local: UploadFile, remote) -> bool:
    """Content equality against the Hub's record: LFS sha256 + size for LFS files, git blob id otherwise."""
    if remote.lfs is not None:
        return remote.lfs.sha256 == local.sha256 and remote.lfs.size == local.size
    return remote.blob_id == local.git_sha1


@contextlib.contextmanager
def _translated(action: str, where: str, token: Optional[str], committing: bool = False):
    """Turn any client failure into one ViTVariantsError with a plain message and no token in it."""
    with reraised_as(lambda e: ViTVariantsError(redact(f'{where}: ' + _client_failure(e, action, committing),
                                                       [token]))):
        yield


def _client_failure(e: Exception, action: str, committing: bool) -> str:
    """What a Hub client failure while ``action`` means, and whether anything may have been committed."""
    if not isinstance(e, HfHubHTTPError):  # connection refused or dropped, timeouts, invalid card metadata, ...
        kind = 'connection failed' if type(e).__module__.split('.')[0].startswith('httpx') else 'failed'
        return _suffix(f'{kind} while {action}: {type(e).__name__}: {str(e).rstrip(".")}', committing)
    status = e.response.status_code if e.response is not None else None
    detail = (e.server_message or first_line(e, typed=False)).rstrip('.!')
    if status == 401:
        msg = (f'the Hub rejected the credentials (HTTP 401) while {action}: '
               'check the token (--token, HF_TOKEN or `hf auth login`)')
    elif status == 403:
        msg = f'permission denied (HTTP 403) while {action}: the token cannot write to this repo'
    elif status == 404:
        msg = f'not found (HTTP 404) while {action}: {detail}'
    elif status is not None and status >= 500:
        msg = f'the Hub failed (HTTP {status}) while {action}: {detail}'
    else:
        msg = f'HTTP {status} while {action}: {detail}'
    return _suffix(msg, committing and (status is None or status >= 500))  # the server may have committed anyway


def _suffix(msg: str, unsure: bool) -> str:
    if unsure:
        return msg + '. Run the push again: files already on the Hub are skipped'
    return msg + '. Nothing was committed'
