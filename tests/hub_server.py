"""A loopback Hugging Face Hub for tests: a real HTTP server that the real ``huggingface_hub`` client talks to.

It implements the calls the client makes to say whose token it holds (``whoami-v2``), create a repo, validate a
card, pre-upload and commit files (regular, base64 in the NDJSON commit body; no LFS), branch, open pull requests,
list and describe files, and download (``HEAD``/``GET /{repo}/resolve/{rev}/{file}``, which ``snapshot_download``
uses after the repo info and tree). Repos live in memory with 40-hex commit ids. Every request is
recorded (method, path, query, headers, body) and failures can be injected per route: HTTP 500/401/403 or a
dropped connection.

Use it through the ``FakeHub`` context manager (``with FakeHub(token=...) as hub: hub.url``). The server binds
127.0.0.1 on an ephemeral port and shuts itself down after ``max_lifetime`` seconds if a test forgets to.
"""
from __future__ import annotations

import base64
import contextlib
import hashlib
import itertools
import json
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator, Optional
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

EMPTY_AGENT_REGISTRY = {'standardEnvVars': [], 'harnesses': {}}
GITATTRIBUTES = b'*.safetensors filter=lfs diff=lfs merge=lfs -text\n*.bin filter=lfs diff=lfs merge=lfs -text\n'
FAILURE_KINDS = (500, 401, 403, 'drop')
_API_REPO_RE = re.compile(r'^/api/models/([^/]+)/([^/]+)(?:/(.*))?$')


@contextlib.contextmanager
def serving(handler) -> Iterator[ThreadingHTTPServer]:
    """A threading HTTP server on 127.0.0.1 (a free port) with ``handler``, shut down and closed on exit."""
    server = ThreadingHTTPServer(('127.0.0.1', 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def keep_client_local(monkeypatch, folder) -> None:
    """Stop in-process huggingface_hub from contacting huggingface.co on its own.

    On its first request the client fetches an agent registry from the *default* endpoint (not the one given to
    HfApi) unless a copy younger than a day is cached; point that cache at a fresh local copy.
    """
    from huggingface_hub import constants
    path = Path(folder) / 'agent_harnesses.json'
    path.write_text(json.dumps(EMPTY_AGENT_REGISTRY))
    monkeypatch.setattr(constants, 'AGENT_HARNESSES_PATH', str(path))


def git_blob_sha1(data: bytes) -> str:
    """The git object id of a blob, which the Hub reports as the ``oid`` of a regular file."""
    return hashlib.sha1(b'blob %d\0' % len(data) + data).hexdigest()


@dataclass
class Commit:
    oid: str
    parent: Optional[str]
    message: str
    description: str
    files: dict  # path -> bytes, the full tree at this commit


@dataclass
class Repo:
    repo_id: str
    private: bool
    commits: dict = field(default_factory=dict)   # oid -> Commit
    refs: dict = field(default_factory=dict)      # 'main', 'dev', 'refs/pr/1' -> oid
    pulls: list = field(default_factory=list)     # [{'num', 'target', 'ref'}]

    def resolve(self, revision: str) -> Optional[Commit]:
        oid = self.refs.get(revision)
        if oid is None and re.fullmatch(r'[0-9a-f]{40}', revision):
            oid = revision
        return self.commits.get(oid) if oid else None


@dataclass
class Recorded:
    method: str
    path: str
    query: dict
    headers: dict  # lower-case names
    body: bytes


@dataclass
class _Failure:
    route: str
    kind: object
    method: Optional[str]
    remaining: Optional[int]


class _HttpError(Exception):
    def __init__(self, status: int, message: str, code: Optional[str] = None, headers: Optional[dict] = None,
                 extra: Optional[dict] = None):
        super().__init__(message)
        self.status, self.message, self.code, self.headers = status, message, code, headers or {}
        self.extra = extra or {}


class FakeHub:
    """In-memory Hub behind a loopback HTTP server. ``token``: the one write token the server accepts; ``user``: the
    account ``/api/whoami-v2`` says it belongs to (the namespace of a bare repo name)."""

    def __init__(self, token: Optional[str] = None, max_lifetime: float = 120.0, user: str = 'loopback-user'):
        self.token = token
        self.user = user
        self.max_lifetime = max_lifetime
        self.repos: dict[str, Repo] = {}
        self.requests: list[Recorded] = []
        self._failures: list[_Failure] = []
        self._lock = threading.Lock()
        self._counter = itertools.count()
        self._server: Optional[ThreadingHTTPServer] = None
        self._thread: Optional[threading.Thread] = None
        self._timer: Optional[threading.Timer] = None

    # ----- lifecycle -----
    def start(self) -> 'FakeHub':
        hub = self

        class Handler(_Handler):
            pass
        Handler.hub = hub
        self._server = ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={'poll_interval': 0.05},
                                        name='fake-hub', daemon=True)
        self._thread.start()
        self._timer = threading.Timer(self.max_lifetime, self.stop)
        self._timer.daemon = True
        self._timer.start()
        return self

    def stop(self) -> None:
        if self._timer is not None and self._timer is not threading.current_thread():
            self._timer.cancel()
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    def __enter__(self) -> 'FakeHub':
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f'http://{host}:{port}'

    # ----- test helpers -----
    def fail(self, route: str, kind, *, times: Optional[int] = None, method: Optional[str] = None) -> None:
        """Make ``route`` fail with ``kind`` (500, 401, 403 or 'drop'), ``times`` times or forever."""
        if kind not in FAILURE_KINDS:
            raise ValueError(f'failure kind must be one of {FAILURE_KINDS}')
        self._failures.append(_Failure(route, kind, method, times))

    def clear_failures(self) -> None:
        self._failures.clear()

    def files(self, repo_id: str, revision: str = 'main') -> dict:
        """Path -> bytes of the tree at ``revision``."""
        commit = self.repos[repo_id].resolve(revision)
        return dict(commit.files) if commit else {}

    def history(self, repo_id: str, revision: str = 'main') -> list[Commit]:
        """Commits reachable from ``revision``, newest first."""
        repo = self.repos[repo_id]
        out, commit = [], repo.resolve(revision)
        while commit is not None:
            out.append(commit)
            commit = repo.commits.get(commit.parent) if commit.parent else None
        return out

    def routes_called(self) -> list[str]:
        return [f'{r.method} {r.path}' for r in self.requests]

    def add_repo(self, repo_id: str, files: Optional[dict] = None, private: bool = False) -> Repo:
        """Create a repo directly (no HTTP), optionally with a first commit holding ``files``."""
        with self._lock:
            repo = self._create_repo(repo_id, private)
            if files:
                self._commit(repo, 'main', {**self.files(repo_id), **files}, 'seed files', '')
            return repo

    # ----- state changes (callers hold the lock) -----
    def _new_oid(self, *parts: str) -> str:
        h = hashlib.sha1(str(next(self._counter)).encode())
        for p in parts:
            h.update(p.encode())
        return h.hexdigest()

    def _create_repo(self, repo_id: str, private: bool) -> Repo:
        repo = Repo(repo_id, private)
        self.repos[repo_id] = repo
        self._commit(repo, 'main', {'.gitattributes': GITATTRIBUTES}, 'initial commit', '')
        return repo

    def _commit(self, repo: Repo, ref: str, files: dict, message: str, description: str,
                parent: Optional[str] = None) -> Commit:
        parent = parent if parent is not None else repo.refs.get(ref)
        oid = self._new_oid(repo.repo_id, ref, message, *(f'{p}:{git_blob_sha1(b)}' for p, b in sorted(files.items())))
        commit = Commit(oid, parent, message, description, dict(files))
        repo.commits[oid] = commit
        repo.refs[ref] = oid
        return commit


class _Handler(BaseHTTPRequestHandler):
    hub: FakeHub
    protocol_version = 'HTTP/1.1'
    timeout = 600  # a stuck client connection cannot hold a handler thread forever (a slow one is served)

    def log_message(self, *args) -> None:  # keep test output clean
        pass

    def do_GET(self):
        self._handle('GET')

    def do_HEAD(self):
        self._handle('HEAD')

    def do_POST(self):
        self._handle('POST')

    # ----- dispatch -----
    def _handle(self, method: str) -> None:
        split = urlsplit(self.path)
        length = int(self.headers.get('Content-Length') or 0)
        body = self.rfile.read(length) if length else b''
        query = {k: v[-1] for k, v in parse_qs(split.query).items()}
        hub = self.hub
        hub.requests.append(Recorded(method, split.path, query, {k.lower(): v for k, v in self.headers.items()}, body))
        route, handler, args = self._route(method, split.path)
        failure = self._take_failure(route, method)
        if failure is not None:
            if failure == 'drop':
                self.close_connection = True
                return  # no status line at all: the client sees the connection close
            messages = {500: 'Internal Error - We\'re working hard to fix this as soon as possible!',
                        401: 'Invalid credentials in Authorization header', 403: 'You don\'t have the rights'}
            return self._send_json(failure, {'error': messages[failure]}, method)
        if handler is None:
            return self._send_json(404, {'error': f'no route for {method} {split.path}'}, method)
        try:
            with hub._lock:
                status, payload, headers = handler(*args, query=query, body=body, method=method)
        except _HttpError as e:
            headers = dict(e.headers)
            if e.code:
                headers['X-Error-Code'] = e.code
            headers['X-Error-Message'] = e.message
            return self._send_json(e.status, {'error': e.message, **e.extra}, method, headers)
        if isinstance(payload, bytes):
            self._send(status, payload, headers, method)
        else:
            self._send_json(status, payload, method, headers)

    def _route(self, method: str, path: str):
        m = _API_REPO_RE.match(path)
        if method == 'POST' and path == '/api/repos/create':
            return 'create', self._create, ()
        if method == 'POST' and path == '/api/validate-yaml':
            return 'validate-yaml', self._validate_yaml, ()
        if method == 'GET' and path == '/api/agent-harnesses':  # the client's daily, token-less registry fetch
            return 'agent-harnesses', lambda **_: (200, EMPTY_AGENT_REGISTRY, {}), ()
        if method == 'GET' and path == '/api/whoami-v2':
            return 'whoami', self._whoami, ()
        if m:
            repo_id = f'{unquote(m.group(1))}/{unquote(m.group(2))}'
            rest = [unquote(s) for s in (m.group(3) or '').split('/')] if m.group(3) else []
            action = rest[0] if rest else ''
            if method == 'POST' and action in ('preupload', 'commit', 'paths-info', 'branch') and len(rest) == 2:
                handler = {'preupload': self._preupload, 'commit': self._commit, 'paths-info': self._paths_info,
                           'branch': self._branch}[action]
                return action, handler, (repo_id, rest[1])
            if method == 'GET' and action == '':
                return 'info', self._info, (repo_id, 'main')
            if method == 'GET' and action == 'revision' and len(rest) == 2:
                return 'info', self._info, (repo_id, rest[1])
            if method == 'GET' and action == 'tree' and len(rest) >= 2:
                return 'tree', self._tree, (repo_id, rest[1], '/'.join(rest[2:]))
            if method == 'GET' and action == 'refs':
                return 'refs', self._refs, (repo_id,)
            return action or 'info', None, ()
        parts = path.lstrip('/').split('/')
        if method in ('GET', 'HEAD') and len(parts) >= 5 and parts[2] == 'resolve':
            repo_id = f'{unquote(parts[0])}/{unquote(parts[1])}'
            return 'resolve', self._resolve, (repo_id, unquote(parts[3]), unquote('/'.join(parts[4:])))
        return 'unknown', None, ()

    def _take_failure(self, route: str, method: str):
        for f in self.hub._failures:
            if f.route == route and (f.method is None or f.method == method) and f.remaining != 0:
                if f.remaining is not None:
                    f.remaining -= 1
                return f.kind
        return None

    # ----- auth and lookups -----
    def _authorized(self) -> bool:
        token = self.hub.token
        return token is None or self.headers.get('Authorization') == f'Bearer {token}'

    def _require_write(self) -> None:
        if not self._authorized():
            raise _HttpError(401, 'Invalid credentials in Authorization header')

    def _repo(self, repo_id: str) -> Repo:
        repo = self.hub.repos.get(repo_id)
        if repo is None or (repo.private and not self._authorized()):
            raise _HttpError(404, 'Repository not found', 'RepoNotFound')
        return repo

    def _commit_at(self, repo: Repo, revision: str) -> Commit:
        commit = repo.resolve(revision)
        if commit is None:
            raise _HttpError(404, f'Invalid rev id: {revision}', 'RevisionNotFound')
        return commit

    # ----- routes -----
    def _whoami(self, **_):
        if not self.headers.get('Authorization') or not self._authorized():
            raise _HttpError(401, 'Invalid credentials in Authorization header')
        return 200, {'type': 'user', 'name': self.hub.user, 'orgs': [],
                     'auth': {'type': 'access_token', 'accessToken': {'role': 'write'}}}, {}

    def _create(self, *, body, **_):
        self._require_write()
        data = json.loads(body or b'{}')
        if data.get('type', 'model') != 'model':
            raise _HttpError(400, 'only model repos are served here')
        name, org = data.get('name'), data.get('organization')
        if not name or not org:
            raise _HttpError(400, 'repo name and organization are required')
        repo_id = f'{org}/{name}'
        url = f'{self.hub.url}/{repo_id}'
        if repo_id in self.hub.repos:
            raise _HttpError(409, 'You already created this model repo', extra={'url': url})
        self.hub._create_repo(repo_id, data.get('visibility') == 'private')
        return 200, {'url': url, 'name': repo_id, 'id': self.hub.repos[repo_id].refs['main']}, {}

    def _validate_yaml(self, *, body, **_):
        data = json.loads(body or b'{}')
        content = data.get('content', '')
        m = re.match(r'^---\s*\n(.*?)\n---\s*\n', content, re.S)
        if m is None:
            return 200, {'errors': [], 'warnings': [{'message': 'empty or missing yaml metadata in repo card'}]}, {}
        try:
            meta = yaml.safe_load(m.group(1))
        except yaml.YAMLError as e:
            return 400, {'errors': [{'message': f'invalid YAML: {e}'}]}, {}
        errors = []
        if not isinstance(meta, dict):
            errors.append({'message': 'metadata must be a mapping'})
        else:
            tags = meta.get('tags', [])
            if not (isinstance(tags, list) and all(isinstance(t, str) for t in tags)):
                errors.append({'message': '"tags" must be an array of strings'})
            if 'library_name' in meta and not isinstance(meta['library_name'], str):
                errors.append({'message': '"library_name" must be a string'})
        return (400 if errors else 200), {'errors': errors, 'warnings': []}, {}

    def _preupload(self, repo_id, revision, *, body, **_):
        self._require_write()
        repo = self._repo(repo_id)
        commit = self._commit_at(repo, revision)
        files = json.loads(body)['files']
        out = []
        for f in files:
            existing = commit.files.get(f['path'])
            out.append({'path': f['path'], 'uploadMode': 'regular', 'shouldIgnore': False,
                        'oid': git_blob_sha1(existing) if existing is not None else None})
        return 200, {'files': out, 'commitOid': commit.oid}, {}

    def _commit(self, repo_id, revision, *, query, body, **_):
        self._require_write()
        repo = self._repo(repo_id)
        base = self._commit_at(repo, revision)
        if revision not in repo.refs or revision.startswith('refs/pr/') and query.get('create_pr'):
            raise _HttpError(400, f'can only commit to a branch, got {revision!r}', 'RevisionNotFound')
        lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
        if not lines or lines[0].get('key') != 'header':
            raise _HttpError(400, 'commit body must start with a header line')
        header = lines[0]['value']
        parent = header.get('parentCommit')
        if parent is not None and parent != base.oid:
            raise _HttpError(412, 'A commit has happened since. Please refresh and try again.')
        files = dict(base.files)
        for line in lines[1:]:
            key, value = line['key'], line['value']
            if key == 'file':
                if value.get('encoding') != 'base64':
                    raise _HttpError(400, f'unsupported encoding for {value.get("path")}')
                files[value['path']] = base64.b64decode(value['content'])
            elif key == 'deletedFile':
                if value['path'] not in files:
                    raise _HttpError(404, "A file with this name doesn't exist", 'EntryNotFound')
                del files[value['path']]
            else:
                raise _HttpError(400, f'operation {key!r} not supported here (preupload answered "regular")')
        summary = header.get('summary') or ''
        if not summary:
            raise _HttpError(400, 'commit summary is required')
        pr_url = None
        if query.get('create_pr') in ('1', 'true', 'True'):
            num = len(repo.pulls) + 1
            ref = f'refs/pr/{num}'
            commit = self.hub._commit(repo, ref, files, summary, header.get('description', ''), parent=base.oid)
            repo.pulls.append({'num': num, 'target': revision, 'ref': ref})
            pr_url = f'{self.hub.url}/{repo_id}/discussions/{num}'
        else:
            commit = self.hub._commit(repo, revision, files, summary, header.get('description', ''))
        payload = {'success': True, 'commitOid': commit.oid,
                   'commitUrl': f'{self.hub.url}/{repo_id}/commit/{commit.oid}'}
        if pr_url:
            payload['pullRequestUrl'] = pr_url
        return 200, payload, {}

    def _branch(self, repo_id, branch, *, body, **_):
        self._require_write()
        repo = self._repo(repo_id)
        if branch.startswith('refs/') or not branch:
            raise _HttpError(400, f'Invalid reference for a branch: {branch}')
        if branch in repo.refs:
            raise _HttpError(409, f'Reference already exists: refs/heads/{branch}')
        start = json.loads(body or b'{}').get('startingPoint') or 'main'
        repo.refs[branch] = self._commit_at(repo, start).oid
        return 200, {}, {}

    def _paths_info(self, repo_id, revision, *, body, **_):
        repo = self._repo(repo_id)
        commit = self._commit_at(repo, revision)
        form = parse_qs(body.decode())
        out = []
        for path in form.get('paths', []):
            if path in commit.files:
                out.append(self._file_entry(path, commit.files[path]))
            elif any(p.startswith(path.rstrip('/') + '/') for p in commit.files):
                out.append({'type': 'directory', 'path': path, 'oid': hashlib.sha1(path.encode()).hexdigest()})
        return 200, out, {}

    def _info(self, repo_id, revision, **_):
        repo = self._repo(repo_id)
        commit = self._commit_at(repo, revision)
        return 200, {'id': repo_id, 'modelId': repo_id, 'sha': commit.oid, 'private': repo.private,
                     'siblings': [{'rfilename': p} for p in sorted(commit.files)], 'tags': [],
                     'library_name': 'timm'}, {}

    def _tree(self, repo_id, revision, prefix, **_):
        commit = self._commit_at(self._repo(repo_id), revision)
        prefix = prefix.rstrip('/')
        entries = [self._file_entry(p, b) for p, b in sorted(commit.files.items())
                   if not prefix or p.startswith(prefix + '/')]
        return 200, entries, {}

    def _refs(self, repo_id, *, query, **_):
        repo = self._repo(repo_id)
        branches = [{'name': n, 'ref': f'refs/heads/{n}', 'targetCommit': o}
                    for n, o in repo.refs.items() if not n.startswith('refs/')]
        payload = {'branches': branches, 'converts': [], 'tags': []}
        if query.get('include_prs'):
            payload['pullRequests'] = [{'name': p['ref'], 'ref': p['ref'], 'targetCommit': repo.refs[p['ref']]}
                                       for p in repo.pulls]
        return 200, payload, {}

    def _resolve(self, repo_id, revision, path, *, method, **_):
        commit = self._commit_at(self._repo(repo_id), revision)
        data = commit.files.get(path)
        if data is None:
            raise _HttpError(404, 'Entry not found', 'EntryNotFound', {'X-Repo-Commit': commit.oid})
        headers = {'X-Repo-Commit': commit.oid, 'ETag': f'"{git_blob_sha1(data)}"',
                   'Content-Type': 'application/octet-stream', 'Accept-Ranges': 'none'}
        return 200, data, headers

    @staticmethod
    def _file_entry(path: str, data: bytes) -> dict:
        return {'type': 'file', 'path': path, 'size': len(data), 'oid': git_blob_sha1(data)}

    # ----- responses -----
    def _send_json(self, status: int, payload, method: str, headers: Optional[dict] = None) -> None:
        headers = {'Content-Type': 'application/json', **(headers or {})}
        self._send(status, json.dumps(payload).encode(), headers, method)

    def _send(self, status: int, data: bytes, headers: dict, method: str) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        if method != 'HEAD':
            self.wfile.write(data)
