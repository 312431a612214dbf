"""`vit-port push` against a loopback Hub: the real huggingface_hub client, a real HTTP server, no mocks of ours.

Checks: files arrive byte for byte with the commit message; branch and pull-request targets; the token goes out
only as an Authorization header and is printed, logged and written nowhere; --dry-run makes no request at all;
pushing unchanged files makes no commit; injected 500 / dropped connection / 401 / 403 give one clear error, a
non-zero exit and leave the local folder untouched.
"""
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import timm
import torch
from huggingface_hub import ModelCard, constants

import timm_vit_variants  # noqa: F401  (registers simple_vit_*)
from porting.commands.cmd_push import print_result
from porting.publish import collect_folder, push_folder
from porting.cli import main as cli_main
from timm_vit_variants.errors import ViTVariantsError

from hub_server import FakeHub, git_blob_sha1, keep_client_local

TOKEN = 'hf_' + 'LoopbackSecret' * 3
REPO = 'org/tiny-vit'
ROOT = Path(__file__).resolve().parents[1]
MODEL_ARGS = dict(embed_dim=32, depth=2, num_heads=2, img_size=32, patch_size=8, num_classes=5)


@pytest.fixture(scope='module')
def model_dir(tmp_path_factory):
    """A model folder in the writer's layout, made by timm itself, with a card still lacking its repo id."""
    from porting.card import build_model_card
    torch.manual_seed(0)
    model = timm.create_model('simple_vit_tiny', **MODEL_ARGS)
    folder = tmp_path_factory.mktemp('out') / 'tiny'
    timm.models.save_for_hf(model, folder, model_args=MODEL_ARGS, safe_serialization=True)
    card = build_model_card(architecture='simple_vit_tiny', model_args=MODEL_ARGS, num_classes=5,
                            conversion_command=f'vit-port convert x.npz out --token {TOKEN}')
    (folder / 'README.md').write_text(str(card))
    return folder


@pytest.fixture
def folder(model_dir, tmp_path):
    """A private copy of the model folder, so a test may change it."""
    return Path(shutil.copytree(model_dir, tmp_path / 'tiny'))


@pytest.fixture
def hub():
    with FakeHub(token=TOKEN) as server:
        yield server


@pytest.fixture(autouse=True)
def isolated_client(monkeypatch, tmp_path):
    """Tests decide the token (never the developer's HF_TOKEN or login cache) and the client stays on loopback."""
    keep_client_local(monkeypatch, tmp_path)
    monkeypatch.delenv('HF_TOKEN', raising=False)
    monkeypatch.delenv('HUGGING_FACE_HUB_TOKEN', raising=False)
    monkeypatch.setattr(constants, 'HF_TOKEN_PATH', str(tmp_path / 'no-login' / 'token'))


def snapshot(path: Path) -> dict:
    return {p.relative_to(path).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(path.rglob('*')) if p.is_file()}


def run_cli(args, endpoint, token_env=None, tmp_home=None):
    """The push command in a fresh interpreter, configured through the environment like a user would."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(('HF_', 'HUGGING'))}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS='1', HF_ENDPOINT=endpoint, HF_HOME=str(tmp_home))
    if token_env:
        env['HF_TOKEN'] = token_env
    return subprocess.run([sys.executable, '-m', 'porting', 'push', *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=600)


def push_main(args) -> int:
    """``vit-port push ARGS`` in this process (exit status back)."""
    return cli_main(['push', *args])


def write_requests(hub):
    return [r for r in hub.requests if r.path.startswith('/api/') and r.method == 'POST']


def test_cli_push_uploads_files_byte_for_byte(hub, folder, tmp_path):
    before = snapshot(folder)
    proc = run_cli([REPO, str(folder), '--commit-message', 'Add tiny ViT'], hub.url, token_env=TOKEN,
                   tmp_home=tmp_path / 'home')
    assert proc.returncode == 0, proc.stderr
    head = hub.history(REPO)[0]
    assert proc.stdout.strip() == f'{hub.url}/{REPO}/commit/{head.oid}'
    assert head.message == 'Add tiny ViT'
    assert len(hub.history(REPO)) == 2  # the repo's initial commit + ours

    remote = hub.files(REPO)
    for name in ('model.safetensors', 'config.json'):
        assert remote[name] == (folder / name).read_bytes()
    card = remote['README.md'].decode()
    assert f"timm.create_model('hf-hub:{REPO}', pretrained=True)" in card
    assert card == (folder / 'README.md').read_text().replace('hf-hub:ORG/NAME', f'hf-hub:{REPO}').replace(
        "'ORG/NAME'", f"'{REPO}'").replace('\nReplace `ORG/NAME` with the repository this card lives in.\n', '')
    assert f"AutoModelForImageClassification.from_pretrained('{REPO}')" in card
    assert ModelCard(card).data.to_dict()['library_name'] == 'timm'

    writes = write_requests(hub)
    assert {r.path for r in writes} >= {'/api/repos/create', '/api/validate-yaml',
                                        f'/api/models/{REPO}/preupload/main', f'/api/models/{REPO}/commit/main'}
    for r in hub.requests:  # the token rides on every Hub call, and only in the Authorization header
        expected = None if r.path == '/api/agent-harnesses' else f'Bearer {TOKEN}'
        assert r.headers.get('authorization') == expected, r.path
        assert TOKEN not in r.path + json.dumps(r.query) and TOKEN.encode() not in r.body
    assert TOKEN not in proc.stdout + proc.stderr
    assert not any(TOKEN.encode() in b for b in remote.values())
    assert snapshot(folder) == before


def test_cli_dry_run_lists_files_and_sends_nothing(hub, folder, tmp_path):
    before = snapshot(folder)
    proc = run_cli([REPO, str(folder), '--dry-run'], hub.url, token_env=TOKEN, tmp_home=tmp_path / 'home')
    assert proc.returncode == 0, proc.stderr
    assert hub.requests == []  # no HTTP at all, not even the client's own housekeeping calls
    assert TOKEN not in proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    for name in ('config.json', 'model.safetensors'):
        data = (folder / name).read_bytes()
        row = next(line for line in lines if line.split()[0] == name)
        assert row.split()[1] == str(len(data))
        assert f'sha256:{hashlib.sha256(data).hexdigest()}' in row
    card_row = next(line for line in lines if line.split()[0] == 'README.md')
    assert 'ORG/NAME filled in' in card_row
    assert 'nothing was sent' in proc.stdout
    assert snapshot(folder) == before


def test_dry_run_needs_no_token(folder, capsys):
    # No token anywhere and no server at all: still lists the files.
    assert push_main([REPO, str(folder), '--dry-run', '--endpoint', 'http://127.0.0.1:9']) == 0
    assert 'model.safetensors' in capsys.readouterr().out


def test_second_identical_push_makes_no_commit(hub, folder, capsys):
    push_folder(folder, REPO, token=TOKEN, endpoint=hub.url)
    commits = len(hub.history(REPO))
    n_requests = len(hub.requests)
    result = push_folder(folder, REPO, token=TOKEN, endpoint=hub.url)
    print_result(result)
    out = capsys.readouterr().out
    assert not result.changed and sorted(result.unchanged) == ['README.md', 'config.json', 'model.safetensors']
    assert len(hub.history(REPO)) == commits
    assert 'nothing changed' in out and hub.history(REPO)[0].oid in out
    second = [f'{r.method} {r.path}' for r in hub.requests[n_requests:]]
    assert not any('/commit/' in r or '/preupload/' in r for r in second)


def test_only_changed_files_are_sent(hub, folder):
    push_folder(folder, REPO, token=TOKEN, endpoint=hub.url)
    config = folder / 'config.json'
    config.write_text(config.read_text().replace('"num_classes": 5', '"num_classes": 5 '))
    push_folder(folder, REPO, token=TOKEN, endpoint=hub.url, commit_message='Touch config')
    commit_body = [r for r in hub.requests if r.path.endswith('/commit/main')][-1].body.decode()
    assert '"config.json"' in commit_body and 'model.safetensors' not in commit_body
    assert hub.files(REPO)['config.json'] == config.read_bytes()
    assert hub.history(REPO)[0].message == 'Touch config'


def test_revision_commits_to_branch(hub, folder, capsys):
    hub.add_repo(REPO)
    main_before = hub.files(REPO)
    result = push_folder(folder, REPO, token=TOKEN, endpoint=hub.url, revision='v1')
    print_result(result)
    assert hub.files(REPO) == main_before
    assert hub.files(REPO, 'v1')['model.safetensors'] == (folder / 'model.safetensors').read_bytes()
    assert result.commit_oid == hub.repos[REPO].refs['v1']
    assert capsys.readouterr().out.strip() == result.commit_url


@pytest.mark.parametrize('revision', [None, 'v1'])
def test_create_pr_prints_pr_url_and_leaves_target_alone(hub, folder, capsys, revision):
    hub.add_repo(REPO)
    if revision:
        push_folder(folder, REPO, token=TOKEN, endpoint=hub.url, revision=revision, commit_message='first')
        (folder / 'config.json').write_text((folder / 'config.json').read_text() + '\n')
        capsys.readouterr()
    target = revision or 'main'
    target_before = hub.files(REPO, target)
    result = push_folder(folder, REPO, token=TOKEN, endpoint=hub.url, create_pr=True, revision=revision)
    print_result(result)
    out = capsys.readouterr().out.strip()
    assert out == f'{hub.url}/{REPO}/discussions/1' == result.pr_url
    assert hub.files(REPO, target) == target_before
    assert hub.repos[REPO].pulls == [{'num': 1, 'target': target, 'ref': 'refs/pr/1'}]
    assert hub.files(REPO, 'refs/pr/1')['config.json'] == (folder / 'config.json').read_bytes()
    assert any(r.query.get('create_pr') == '1' for r in hub.requests if '/commit/' in r.path)


def test_existing_card_is_kept_unless_overwrite(hub, folder, capsys):
    theirs = b'---\nlicense: mit\n---\n# Hand-written card\n'
    hub.add_repo(REPO, {'README.md': theirs})
    result = push_folder(folder, REPO, token=TOKEN, endpoint=hub.url)
    print_result(result)
    err = capsys.readouterr().err
    assert result.kept_remote_card and 'README.md' not in result.uploaded
    assert hub.files(REPO)['README.md'] == theirs
    assert hub.files(REPO)['model.safetensors'] == (folder / 'model.safetensors').read_bytes()
    assert '--overwrite-card' in err

    result = push_folder(folder, REPO, token=TOKEN, endpoint=hub.url, overwrite_card=True)
    assert result.uploaded == ['README.md']
    assert b'timm-vit-variants' in hub.files(REPO)['README.md']


def test_folder_without_card_gets_one_from_config(hub, folder):
    (folder / 'README.md').unlink()
    push_folder(folder, REPO, token=TOKEN, endpoint=hub.url)
    card = ModelCard(hub.files(REPO)['README.md'].decode())
    assert card.data.to_dict()['tags'] == ['image-classification', 'timm', 'timm-vit-variants']
    assert f"hf-hub:{REPO}'" in card.text
    assert not (folder / 'README.md').exists()


def test_token_precedence_flag_env_login_cache(hub, folder, monkeypatch, tmp_path):
    login = tmp_path / 'home' / 'token'
    login.parent.mkdir()
    monkeypatch.setattr(constants, 'HF_TOKEN_PATH', str(login))

    def sent_tokens(**kw):
        hub.requests.clear()
        try:
            push_folder(folder, REPO, endpoint=hub.url, **kw)
        except ViTVariantsError:
            pass
        return {r.headers.get('authorization') for r in hub.requests}

    login.write_text('hf_fromLoginCache000')
    monkeypatch.setenv('HF_TOKEN', 'hf_fromEnvironment000')
    assert sent_tokens(token=TOKEN) == {f'Bearer {TOKEN}'}
    assert sent_tokens() == {'Bearer hf_fromEnvironment000'}
    monkeypatch.delenv('HF_TOKEN')
    assert sent_tokens() == {'Bearer hf_fromLoginCache000'}
    login.unlink()
    with pytest.raises(ViTVariantsError, match='no Hub token'):
        push_folder(folder, REPO, endpoint=hub.url)


def test_token_absent_from_logs(hub, folder, caplog):
    caplog.set_level(logging.DEBUG)
    hub.fail('preupload', 500, times=1)  # one retry: the client logs the failed request
    push_folder(folder, REPO, token=TOKEN, endpoint=hub.url)
    assert 'HTTP Error 500' in caplog.text
    assert TOKEN not in caplog.text


def test_private_repo(hub, folder):
    push_folder(folder, REPO, token=TOKEN, endpoint=hub.url, private=True)
    assert hub.repos[REPO].private
    create = next(r for r in hub.requests if r.path == '/api/repos/create')
    assert json.loads(create.body)['visibility'] == 'private'


@pytest.mark.parametrize('route, kind, words', [
    ('create', 500, 'HTTP 500'),
    ('create', 'drop', 'connection failed'),
    ('paths-info', 401, 'HTTP 401'),
    ('commit', 500, 'HTTP 500'),
    ('commit', 'drop', 'connection failed'),
    ('commit', 401, 'HTTP 401'),
    ('commit', 403, 'HTTP 403'),
    ('branch', 403, 'HTTP 403'),
])
def test_injected_failures(hub, folder, capsys, route, kind, words):
    hub.fail(route, kind)
    before = snapshot(folder)
    args = [REPO, str(folder), '--endpoint', hub.url, '--token', TOKEN]
    if route == 'branch':
        args += ['--revision', 'dev']
    assert push_main(args) == 1
    out = capsys.readouterr()
    assert out.err.startswith('error: ') and words in out.err and 'Traceback' not in out.err
    assert TOKEN not in out.out + out.err
    assert snapshot(folder) == before
    repo = hub.repos.get(REPO)
    assert repo is None or len(hub.history(REPO)) == 1 and not repo.pulls


def test_transient_preupload_error_is_retried(hub, folder):
    hub.fail('preupload', 500, times=1)
    result = push_folder(folder, REPO, token=TOKEN, endpoint=hub.url)
    assert result.changed and hub.files(REPO)['config.json'] == (folder / 'config.json').read_bytes()
    assert sum(r.path.endswith('/preupload/main') for r in hub.requests) == 2


def test_wrong_token_is_rejected_and_not_echoed(hub, folder, capsys):
    wrong = 'hf_' + 'WrongWrongWrong' * 2
    assert push_main([REPO, str(folder), '--endpoint', hub.url, '--token', wrong]) == 1
    out = capsys.readouterr()
    assert 'HTTP 401' in out.err and wrong not in out.out + out.err


@pytest.mark.parametrize('repo_id, words', [('a/b/c', 'invalid repo id'),
                                            ('org/bad name!', 'invalid repo id')])
def test_bad_repo_id(hub, folder, capsys, repo_id, words):
    assert push_main([repo_id, str(folder), '--endpoint', hub.url, '--token', TOKEN]) == 1
    assert words in capsys.readouterr().err
    assert hub.requests == []


def test_bare_repo_name_goes_to_the_tokens_namespace(hub, folder, capsys):
    # As `hf upload NAME PATH`: the namespace is the token's own, asked of the Hub with whoami.
    assert push_main(['tiny-vit', str(folder), '--endpoint', hub.url, '--token', TOKEN]) == 0
    out = capsys.readouterr()
    full = f'{hub.user}/tiny-vit'
    assert out.out.strip() == f'{hub.url}/{full}/commit/{hub.history(full)[0].oid}' and out.err == ''
    assert hub.files(full)['model.safetensors'] == (folder / 'model.safetensors').read_bytes()
    assert f"hf-hub:{full}" in hub.files(full)['README.md'].decode()
    whoami = [r for r in hub.requests if r.path == '/api/whoami-v2']
    assert len(whoami) == 1 and whoami[0].headers['authorization'] == f'Bearer {TOKEN}'


@pytest.mark.parametrize('extra, words', [(['--dry-run'], '--dry-run sends no request'),
                                          ([], 'no Hub token to take one from')])
def test_bare_repo_name_needs_a_token_and_a_request(hub, folder, capsys, extra, words):
    assert push_main(['tiny-vit', str(folder), '--endpoint', hub.url, *extra]) == 1
    err = capsys.readouterr().err
    assert words in err and 'give ORG/NAME' in err
    assert hub.requests == []


def test_old_argument_order_works_with_one_deprecation_line(hub, folder, capsys):
    assert push_main([str(folder), REPO, '--endpoint', hub.url, '--token', TOKEN]) == 0
    out = capsys.readouterr()
    assert out.out.strip() == f'{hub.url}/{REPO}/commit/{hub.history(REPO)[0].oid}'
    lines = out.err.splitlines()
    assert len(lines) == 1 and 'deprecated' in lines[0] and f'vit-port push {REPO} {folder}' in lines[0]


def test_swapped_or_missing_folder_says_the_order(hub, tmp_path, capsys):
    assert push_main([REPO, str(tmp_path / 'nope'), '--endpoint', hub.url, '--token', TOKEN]) == 1
    err = capsys.readouterr().err
    assert 'does not exist' in err and 'REPO_ID, then FOLDER' in err
    assert hub.requests == []


def test_missing_folder_and_files(hub, folder, tmp_path, capsys):
    assert push_main([REPO, str(tmp_path / 'nope'), '--endpoint', hub.url, '--token', TOKEN]) == 1
    assert 'does not exist' in capsys.readouterr().err
    (folder / 'model.safetensors').unlink()
    assert push_main([REPO, str(folder), '--endpoint', hub.url, '--token', TOKEN]) == 1
    err = capsys.readouterr().err
    assert 'no weight file found' in err and 'model.safetensors,' in err and 'model.safetensors.index.json' in err
    (folder / 'config.json').unlink()
    assert push_main([REPO, str(folder), '--endpoint', hub.url, '--token', TOKEN]) == 1
    assert 'missing config.json' in capsys.readouterr().err
    assert hub.requests == []


def test_blob_ids_match_git(folder):
    # The no-op check compares git blob ids (ours and the server's) with the Hub's; `git hash-object` is the truth.
    git = shutil.which('git')
    if git is None:
        pytest.skip('git not installed')
    for f in collect_folder(folder, REPO):
        if f.data is None:  # as on disk (the card may be sent with its repo id filled in)
            out = subprocess.run([git, 'hash-object', str(f.local_path)], capture_output=True, text=True, check=True)
            assert f.git_sha1 == out.stdout.strip() == git_blob_sha1(f.local_path.read_bytes())


@pytest.mark.parametrize('extra, words', [(['--push-to', 'a/b/c'], 'invalid repo id'),
                                          (['--push-to', REPO], 'no Hub token'),
                                          (['--push-to', 'tiny', '--dry-run'], '--dry-run sends no request')])
def test_convert_push_to_fails_before_converting(model_dir, tmp_path, capsys, extra, words):
    out_dir = tmp_path / 'converted'
    assert cli_main(['convert', str(model_dir), str(out_dir), *extra]) == 1
    assert words in capsys.readouterr().err
    assert not out_dir.exists()


def test_push_onto_open_pull_request(hub, folder):
    hub.add_repo(REPO)
    push_folder(folder, REPO, token=TOKEN, endpoint=hub.url, create_pr=True)
    main_before = hub.files(REPO)
    (folder / 'config.json').write_text((folder / 'config.json').read_text() + '\n')
    push_folder(folder, REPO, token=TOKEN, endpoint=hub.url, revision='refs/pr/1', commit_message='Fix config')
    assert hub.files(REPO, 'refs/pr/1')['config.json'] == (folder / 'config.json').read_bytes()
    assert hub.history(REPO, 'refs/pr/1')[0].message == 'Fix config'
    assert hub.files(REPO) == main_before and len(hub.repos[REPO].pulls) == 1


def test_client_own_noop_detection_agrees_with_server(hub, folder):
    # huggingface_hub 2.4 drops files whose preupload `oid` equals their git blob id and skips an empty commit.
    # The loopback server must answer preupload the way the client relies on.
    from huggingface_hub import CommitOperationAdd, HfApi
    push_folder(folder, REPO, token=TOKEN, endpoint=hub.url)
    head = hub.history(REPO)[0].oid
    n_requests = len(hub.requests)
    api = HfApi(endpoint=hub.url, token=TOKEN)
    ops = [CommitOperationAdd('config.json', str(folder / 'config.json'))]
    info = api.create_commit(REPO, operations=ops, commit_message='same again')
    assert info.oid == head and hub.history(REPO)[0].oid == head
    calls = [f'{r.method} {r.path}' for r in hub.requests[n_requests:]]
    assert calls == [f'POST /api/models/{REPO}/preupload/main', f'GET /api/models/{REPO}/revision/main']


def test_convert_then_push_in_one_command(hub, model_dir, tmp_path, capsys):
    out_dir = tmp_path / 'converted'
    rc = cli_main(['convert', str(model_dir), str(out_dir), '--push-to', REPO, '--endpoint', hub.url,
                   '--token', TOKEN, '--commit-message', 'Convert and push'])
    out = capsys.readouterr()
    assert rc == 0, out.err
    head = hub.history(REPO)[0]
    assert f'{hub.url}/{REPO}/commit/{head.oid}' in out.out.splitlines()
    assert head.message == 'Convert and push'
    remote = hub.files(REPO)
    for name in ('model.safetensors', 'config.json'):
        assert remote[name] == (out_dir / name).read_bytes()
    card = remote['README.md'].decode()
    assert f"timm.create_model('hf-hub:{REPO}', pretrained=True)" in card
    # the recorded command keeps only allow-listed options: no token, no endpoint, no commit message
    assert TOKEN not in card and '--token' not in card and '--endpoint' not in card and 'passed' in card
    # local paths only by their names: the card does not show where the files lay on this machine
    assert f'vit-port convert {model_dir.name} {out_dir.name} --push-to {REPO}' in card
    assert str(tmp_path) not in card and str(model_dir.parent) not in card
    assert TOKEN not in out.out + out.err + card + (out_dir / 'README.md').read_text()


def test_convert_push_to_a_bare_name(hub, model_dir, tmp_path, capsys):
    out_dir = tmp_path / 'converted'
    assert cli_main(['convert', str(model_dir), str(out_dir), '--push-to', 'tiny', '--endpoint', hub.url,
                     '--token', TOKEN]) == 0
    assert hub.files(f'{hub.user}/tiny')['config.json'] == (out_dir / 'config.json').read_bytes()


def test_sharded_folder(hub, model_dir, tmp_path, capsys):
    out_dir = tmp_path / 'sharded'
    assert cli_main(['convert', str(model_dir), str(out_dir), '--max-shard-size', '100KB', '--no-verify']) == 0
    shards = sorted(p.name for p in out_dir.glob('model-*-of-*.safetensors'))
    assert len(shards) > 1
    capsys.readouterr()
    result = push_folder(out_dir, REPO, token=TOKEN, endpoint=hub.url)
    print_result(result)
    assert 'note: sharded weights' in capsys.readouterr().err
    assert set(result.uploaded) == {*shards, 'model.safetensors.index.json', 'config.json', 'README.md'}
    for name in shards:
        assert hub.files(REPO)[name] == (out_dir / name).read_bytes()
    (out_dir / shards[-1]).unlink()
    with pytest.raises(ViTVariantsError, match=f"{shards[-1]}': shard named by the index is missing"):
        push_folder(out_dir, REPO, token=TOKEN, endpoint=hub.url)
