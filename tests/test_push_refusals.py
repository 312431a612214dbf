"""Push stays inside its folder, refuses tokens and folders vit-port did not write; config.json values are typed.

Each case pushes to the loopback Hub of ``tests/hub_server.py`` (the real ``huggingface_hub`` client) or runs
``--dry-run``; a refusal must come before any request, as one ``error:`` line naming the file (and key).
"""
import json
import os
import shutil
from pathlib import Path

import pytest
import timm
import torch
from huggingface_hub import constants

import timm_vit_variants  # noqa: F401  (registers simple_vit_*)
from porting.cli import main
from porting.hub_folder import read_config
from timm_vit_variants.errors import ViTVariantsError

from hub_server import FakeHub, keep_client_local

TOKEN = 'hf_' + 'PushTrustSecret' * 3
# A token of someone else's, pasted into a file: not the one this process holds.
STRAY = 'hf_' + 'AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh'
REPO = 'org/tiny-vit'
MODEL_ARGS = dict(embed_dim=32, depth=1, num_heads=2, img_size=32, patch_size=8, num_classes=3)


@pytest.fixture(scope='module')
def model_dir(tmp_path_factory):
    """A folder in vit-port's layout (timm's own writer), with a card."""
    torch.manual_seed(0)
    model = timm.create_model('simple_vit_tiny', **MODEL_ARGS)
    folder = tmp_path_factory.mktemp('out') / 'tiny'
    timm.models.save_for_hf(model, folder, model_args=MODEL_ARGS, safe_serialization=True)
    (folder / 'README.md').write_text('# tiny\n')
    return folder


@pytest.fixture
def folder(model_dir, tmp_path):
    return Path(shutil.copytree(model_dir, tmp_path / 'tiny'))


@pytest.fixture
def hub():
    with FakeHub(token=TOKEN) as server:
        yield server


@pytest.fixture(autouse=True)
def isolated_client(monkeypatch, tmp_path):
    keep_client_local(monkeypatch, tmp_path)
    monkeypatch.delenv('HF_TOKEN', raising=False)
    monkeypatch.delenv('HUGGING_FACE_HUB_TOKEN', raising=False)
    monkeypatch.setattr(constants, 'HF_TOKEN_PATH', str(tmp_path / 'no-login' / 'token'))


def push(capsys, hub, folder, *extra):
    """(exit status, stdout, stderr) of ``vit-port push REPO FOLDER`` against the loopback Hub."""
    code = main(['push', REPO, str(folder), '--endpoint', hub.url, '--token', TOKEN, *extra])
    out, err = capsys.readouterr()
    return code, out, err


def dry_run(capsys, folder, *extra):
    code = main(['push', REPO, str(folder), '--dry-run', *extra])
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_error(code, err, *needles):
    assert code == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith('error: '), err
    assert 'Traceback' not in err
    for needle in needles:
        assert needle in err, err


def edit_config(folder, **changes):
    cfg = json.loads((folder / 'config.json').read_text())
    cfg.update(changes)
    (folder / 'config.json').write_text(json.dumps(cfg))


# -- the folder's edge ------------------------------------------------------------------------------------------

def test_a_symlink_out_of_the_folder_is_refused_before_any_request(hub, folder, tmp_path, capsys):
    secret = tmp_path / 'elsewhere' / 'passwd'
    secret.parent.mkdir()
    secret.write_text('root:x:0:0:root:/root:/bin/bash\n')
    os.symlink(secret, folder / 'notes.txt')
    code, out, err = push(capsys, hub, folder)
    assert_one_error(code, err, 'notes.txt', 'outside the folder')
    assert hub.requests == [] and REPO not in hub.repos and out == ''
    # /etc/passwd, as the issue tried it, and a relative link climbing out: the same refusal
    for target in ('/etc/passwd', '../elsewhere/passwd'):
        (folder / 'notes.txt').unlink()
        os.symlink(target, folder / 'notes.txt')
        assert_one_error(*dry_run(capsys, folder)[::2], 'notes.txt', target)


def test_a_symlinked_folder_out_of_the_folder_is_refused(folder, tmp_path, capsys):
    (tmp_path / 'home').mkdir()
    (tmp_path / 'home' / 'id_rsa').write_text('key\n')
    os.symlink(tmp_path / 'home', folder / 'extra')
    assert_one_error(*dry_run(capsys, folder)[::2], 'extra', 'outside the folder')


def test_a_symlink_inside_the_folder_is_uploaded_under_its_name(folder, capsys):
    (folder / 'docs').mkdir()
    (folder / 'docs' / 'usage.md').write_text('how to use it\n')
    os.symlink('docs/usage.md', folder / 'USAGE.md')
    code, out, err = dry_run(capsys, folder)
    assert code == 0, err
    listed = [line.split()[0] for line in out.splitlines()[1:-1]]
    assert listed == ['README.md', 'USAGE.md', 'config.json', 'docs/usage.md', 'model.safetensors']


def test_a_fifo_in_the_folder_is_refused_not_read(folder, capsys):
    os.mkfifo(folder / 'pipe')
    assert_one_error(*dry_run(capsys, folder)[::2], 'pipe', 'not a regular file')


# -- tokens -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize('name,text', [
    ('notes.txt', f'my token, for later: {STRAY}\n'),
    ('README.md', f'# tiny\n\n```\nHF_TOKEN={STRAY} vit-port push ...\n```\n'),
    ('sub/env.sh', f'export HF_TOKEN="{STRAY}"\n'),
])
def test_a_file_holding_a_token_is_refused_without_printing_it(hub, folder, capsys, name, text):
    (folder / name).parent.mkdir(exist_ok=True)
    (folder / name).write_text(text)
    code, out, err = push(capsys, hub, folder)
    assert_one_error(code, err, name, 'token')
    assert STRAY not in out + err and STRAY[3:] not in err and TOKEN not in err
    assert hub.requests == [] and REPO not in hub.repos


def test_the_pushing_token_itself_is_refused_in_a_file(folder, capsys, monkeypatch):
    # A token of any shape: the one this process was given is looked for by value.
    monkeypatch.setenv('HF_TOKEN', 'plainsecretvalue42')
    (folder / 'notes.txt').write_text('token = plainsecretvalue42\n')
    code, out, err = dry_run(capsys, folder)
    assert_one_error(code, err, 'notes.txt', 'token')
    assert 'plainsecretvalue42' not in out + err


def test_a_token_in_the_weights_is_found_across_chunks(folder, capsys, monkeypatch):
    import porting.publish as publish

    monkeypatch.setattr(publish, '_CHUNK', 4096)  # the token straddles a chunk boundary
    data = bytearray(os.urandom(3 * 4096))
    data[4096 - 11:4096 - 9 + len(STRAY)] = b'\0' + STRAY.encode() + b'\0'
    (folder / 'optimizer.bin').write_bytes(bytes(data))
    assert_one_error(*dry_run(capsys, folder)[::2], 'optimizer.bin', 'token')


# -- a vit-port output, or --force ------------------------------------------------------------------------------

def test_a_folder_vit_port_never_wrote_is_refused_unless_forced(hub, folder, capsys):
    edit_config(folder, architecture='resnet50', model_args={})
    (folder / 'model.safetensors').write_bytes(os.urandom(4096))
    code, _, err = push(capsys, hub, folder)
    assert_one_error(code, err, 'config.json', 'resnet50', 'not a simple_vit', '--force')
    assert hub.requests == []
    code, out, err = dry_run(capsys, folder, '--force')
    assert code == 0, err
    assert 'card built' not in out  # its own README.md goes up; no card of ours is made for it
    (folder / 'README.md').unlink()
    assert_one_error(*dry_run(capsys, folder, '--force')[::2], 'README.md', 'resnet50')


def test_weights_that_are_not_safetensors_are_refused(folder, capsys):
    (folder / 'model.safetensors').write_bytes(os.urandom(4096))
    assert_one_error(*dry_run(capsys, folder)[::2], 'model.safetensors', 'do not open as safetensors', '--force')
    (folder / 'model.safetensors').unlink()
    torch.save({'w': torch.zeros(2)}, folder / 'pytorch_model.bin')
    assert_one_error(*dry_run(capsys, folder)[::2], 'pytorch_model.bin', 'not safetensors')


def test_weights_of_another_model_are_refused(folder, capsys):
    edit_config(folder, num_classes=7, model_args=dict(MODEL_ARGS, num_classes=7))  # the file's head has 3 rows
    assert_one_error(*dry_run(capsys, folder)[::2], 'model.safetensors', 'head.weight', '[3, 32]', '[7, 32]')
    edit_config(folder, num_classes=3, model_args=dict(MODEL_ARGS, depth=2))
    assert_one_error(*dry_run(capsys, folder)[::2], 'do not match config.json', 'blocks.1')


# -- malformed config.json values -------------------------------------------------------------------------------

BAD_VALUES = [
    ('model_args', 'x'),
    ('model_args', [1, 2]),
    ('label_names', 5),
    ('label_names', [1, 2, 3]),
    ('label_names', ['a', 'b']),  # 2 names for 3 classes
    ('num_classes', 'x'),
    ('num_classes', -1),
    ('pretrained_cfg', 'x'),
    ('architecture', 5),
]


@pytest.mark.parametrize('key,value', BAD_VALUES)
def test_a_malformed_config_value_is_one_error_naming_the_key(folder, capsys, key, value):
    edit_config(folder, **{key: value})
    with pytest.raises(ViTVariantsError) as refused:
        read_config(folder)
    assert refused.value.key == key and refused.value.path.endswith('config.json')
    for force in ((), ('--force',)):
        (folder / 'README.md').unlink(missing_ok=True)  # push then reads every value to build the card
        assert_one_error(*dry_run(capsys, folder, *force)[::2], 'config.json', key)


def test_a_config_that_is_not_an_object_is_one_error(folder, capsys):
    (folder / 'config.json').write_text('[1, 2, 3]')
    assert_one_error(*dry_run(capsys, folder, '--force')[::2], 'config.json', 'JSON object')
    with pytest.raises(ViTVariantsError, match='JSON object'):
        read_config(folder)
