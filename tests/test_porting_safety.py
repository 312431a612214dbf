"""Hardening of ``vit-port``: sources and user folders are never destroyed, tokens never leak, hostile
files cost bounded memory and time, and every failure is one clean ``error:`` line with nothing left behind.

Each test reproduces one case that broke before (see issue 8) and checks the refusal or the fix.
"""
import contextlib
import errno
import fcntl
import hashlib
import io
import json
import os
import resource
import shutil
import socket
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from porting.cli import main
from porting.output import OLD, PARTIAL

import checkpoint_fixtures as F

REPO = Path(__file__).resolve().parents[1]
SECRET = 'hf_' + 'S3cr3tT0kenValue' * 2


def _sha(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _tree(folder):
    """{relative path: sha256} of every file under folder, to prove it is untouched."""
    folder = Path(folder)
    return {str(p.relative_to(folder)): _sha(p) for p in sorted(folder.rglob('*')) if p.is_file()}


def _leftovers(folder):
    return [p.name for p in Path(folder).iterdir() if PARTIAL in p.name or OLD in p.name]


def _fails(capsys, argv, code=1):
    assert main(argv) == code
    out = capsys.readouterr()
    assert out.err.strip().splitlines()[-1].startswith('error: '), out.err
    assert 'Traceback' not in out.err
    return out.err


@pytest.fixture()
def npz(tmp_path):
    return F.write_npz(tmp_path, 'model.npz', F.vitjax_arrays())


@pytest.fixture(autouse=True)
def _no_login_cache(monkeypatch, tmp_path):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, 'HF_TOKEN_PATH', str(tmp_path / 'no-login' / 'token'))
    monkeypatch.delenv('HF_TOKEN', raising=False)
    monkeypatch.delenv('HUGGING_FACE_HUB_TOKEN', raising=False)


# -- 1. the source and user data are sacred ----------------------------------------------------------

def test_dotdot_out_cannot_delete_the_source_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ckpts = tmp_path / 'ckpts'
    ckpts.mkdir()
    F.write_npz(ckpts, 'model.npz', F.vitjax_arrays())
    (ckpts / 'other.bin').write_bytes(b'precious')
    before = _tree(ckpts)
    err = _fails(capsys, ['convert', 'ckpts/model.npz', 'x/../ckpts', '--overwrite'])
    assert 'replace or contain the source' in err
    assert _tree(ckpts) == before and not (tmp_path / 'x').exists()


def test_symlinked_source_cannot_be_replaced(tmp_path, capsys):
    folder = F.write_hf_folder(tmp_path)
    link = tmp_path / 'src_link'
    link.symlink_to(folder)
    before = _tree(folder)
    err = _fails(capsys, ['convert', str(link), str(folder), '--overwrite'])
    assert 'replace or contain the source' in err
    assert _tree(folder) == before


def test_out_inside_a_source_folder_is_refused(tmp_path, capsys):
    folder = F.write_hf_folder(tmp_path)
    before = _tree(folder)
    err = _fails(capsys, ['convert', str(folder), str(folder / 'converted')])
    assert 'inside the source folder' in err
    assert _tree(folder) == before


def test_out_next_to_a_source_file_is_allowed(npz, tmp_path, capsys):
    assert main(['convert', str(npz), str(tmp_path / 'out')]) == 0
    assert (tmp_path / 'out' / 'model.safetensors').is_file() and npz.is_file()


def test_symlink_out_is_replaced_as_a_link(npz, tmp_path, capsys):
    target = tmp_path / 'elsewhere'
    target.mkdir()
    (target / 'notes.txt').write_text('not ours')
    out = tmp_path / 'out'
    out.symlink_to(target)
    assert main(['convert', str(npz), str(out)]) == 1  # exists: needs --overwrite
    assert main(['convert', str(npz), str(out), '--overwrite']) == 0
    assert not out.is_symlink() and (out / 'model.safetensors').is_file()
    assert _tree(target) == {'notes.txt': hashlib.sha256(b'not ours').hexdigest()}
    assert _leftovers(tmp_path) == []


# -- 2. secrets --------------------------------------------------------------------------------------

def _everything_written(out, captured):
    texts = [captured.out, captured.err]
    if out.exists():
        texts += [p.read_text(errors='replace') for p in out.iterdir() if p.suffix in ('.md', '.json')]
    return '\n'.join(texts)


def test_abbreviated_token_flag_is_refused_without_echoing_it(npz, tmp_path, capsys):
    assert main(['convert', str(npz), str(tmp_path / 'out'), '--tok', SECRET]) == 2
    err = capsys.readouterr().err
    assert '--tok' in err and SECRET not in err
    assert not (tmp_path / 'out').exists()


@pytest.mark.parametrize('spelling', ['flag', 'equals', 'env'])
def test_token_never_reaches_card_config_or_output(npz, tmp_path, capsys, monkeypatch, spelling):
    out = tmp_path / 'out'
    argv = ['convert', str(npz), str(out), '--license', f'see {SECRET}', '--dataset', SECRET]
    if spelling == 'flag':
        argv += ['--token', SECRET]
    elif spelling == 'equals':
        argv += [f'--token={SECRET}']
    else:
        monkeypatch.setenv('HF_TOKEN', SECRET)
    assert main(argv) == 0
    text = _everything_written(out, capsys.readouterr())
    assert SECRET not in text and 'REDACTED' in text
    card = (out / 'README.md').read_text()
    assert '--token' not in card and 'vit-port convert' in card


def test_token_value_is_masked_in_errors(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv('HF_TOKEN', SECRET)
    err = _fails(capsys, ['convert', str(tmp_path / f'{SECRET}.npz'), str(tmp_path / 'out')])
    assert SECRET not in err and 'not found' in err


# -- 3. bounds before allocation (subprocess, address-space limit, timeout) -------------------------

_AS_LIMIT = None


def _address_limit():
    """Import baseline of a converting process plus 1.5 GB: a hostile file may not cost more."""
    global _AS_LIMIT
    if _AS_LIMIT is None:
        probe = subprocess.run(
            [sys.executable, '-c', 'import porting.pipeline, porting.verification, porting.cli; '
                                   'print(open("/proc/self/status").read().split("VmPeak:")[1].split()[0])'],
            capture_output=True, text=True, cwd=REPO, check=True)
        _AS_LIMIT = int(probe.stdout.strip()) * 1024 + (3 << 29)
    return _AS_LIMIT


def _run_bounded(argv):
    """``vit-port ARGV`` in a process capped at ``_address_limit()`` bytes of address space: a refusal must fit in
    that bound. The timeout only guards a hang, far beyond what a refusal takes even on a busy machine."""
    limit = _address_limit()

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return subprocess.run([sys.executable, '-m', 'porting', *argv], capture_output=True, text=True, cwd=REPO,
                          preexec_fn=cap, timeout=600)


def _stream_member(archive, name, header_shape, payload_bytes, compress=zipfile.ZIP_DEFLATED):
    """Write a .npy member whose header claims ``header_shape`` float32, followed by ``payload_bytes`` zeros."""
    info = zipfile.ZipInfo(name + '.npy')
    info.compress_type = compress
    with archive.open(info, 'w', force_zip64=True) as fh:
        np.lib.format.write_array_header_2_0(fh, {'descr': '<f4', 'fortran_order': False, 'shape': header_shape})
        chunk = bytes(1 << 22)
        left = payload_bytes
        while left > 0:
            fh.write(chunk[:min(left, len(chunk))])
            left -= len(chunk)


def _hostile_npz(path, members):
    arrays = F.bigvision_arrays('sincos', 'gap')
    with zipfile.ZipFile(path, 'w', compression=zipfile.ZIP_DEFLATED, allowZip64=True) as archive:
        for name, value in arrays.items():
            if name in members:
                continue
            with archive.open(name + '.npy', 'w') as fh:
                np.lib.format.write_array(fh, value)
        for name, (shape, nbytes) in members.items():
            _stream_member(archive, name, shape, nbytes)
    return path


def _assert_clean_refusal(proc, *needles):
    """Refused with one clear error inside the address-space cap (a MemoryError would mean it tried to allocate)."""
    assert proc.returncode == 1, proc.stderr
    assert 'Traceback' not in proc.stderr and 'MemoryError' not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith('error: ')
    for needle in needles:
        assert needle in proc.stderr, proc.stderr


def test_inflating_head_members_are_refused_before_inflating(tmp_path):
    # ~1 GB of zeros deflated to ~1 MB in two head members: the 3.4 GB bomb at a CI-friendly scale.
    classes = 700_000
    src = _hostile_npz(tmp_path / 'bomb.npz', {
        'head/kernel': ((F.WIDTH, classes), F.WIDTH * classes * 4), 'head/bias': ((classes,), classes * 4)})
    assert src.stat().st_size < 8 << 20
    proc = _run_bounded(['convert', str(src), str(tmp_path / 'out')])
    _assert_clean_refusal(proc, 'bomb.npz', 'head/kernel')
    assert 'decompression bomb' in proc.stderr or 'classes' in proc.stderr
    assert not (tmp_path / 'out').exists() and _leftovers(tmp_path) == []


def test_inflate_ratio_is_checked_on_its_own(tmp_path):
    # 64 MB of deflated zeros under a name no reader would use: refused when the archive is opened.
    src = _hostile_npz(tmp_path / 'ratio.npz', {'opt/state': ((16 << 20,), 64 << 20)})
    proc = _run_bounded(['convert', str(src), str(tmp_path / 'out')])
    _assert_clean_refusal(proc, 'ratio.npz', 'decompression bomb', '--limit inflate_ratio')


def test_claimed_scan_depth_is_refused_before_planning(tmp_path):
    arrays = {'embedding/kernel': np.zeros((F.PATCH, F.PATCH, 3, F.WIDTH), np.float32),
              'embedding/bias': np.zeros((F.WIDTH,), np.float32),
              'Transformer/encoderblock/LayerNorm_0/scale': np.zeros((100_000, F.WIDTH), np.float32)}
    src = F.write_npz(tmp_path, 'deep.npz', arrays)
    proc = _run_bounded(['convert', str(src), str(tmp_path / 'out')])
    _assert_clean_refusal(proc, 'deep.npz', 'depth 100000 exceeds the limit of 256', '--limit depth=')


def test_many_member_archive_is_refused_before_reading_headers(tmp_path):
    arrays = F.bigvision_arrays('sincos', 'gap')
    for i in range(2, 7000):
        arrays[f'Transformer/encoderblock_{i}/LayerNorm_0/scale'] = np.zeros((1,), np.float32)
    src = F.write_npz(tmp_path, 'wide.npz', arrays)
    proc = _run_bounded(['convert', str(src), str(tmp_path / 'out')])
    _assert_clean_refusal(proc, 'wide.npz', 'arrays')


def test_config_depth_is_refused_before_building(tmp_path):
    folder = F.write_timm_folder(tmp_path)
    cfg = json.loads((folder / 'config.json').read_text())
    cfg['model_args'] = dict(cfg.get('model_args') or {}, depth=100_000)
    (folder / 'config.json').write_text(json.dumps(cfg))
    proc = _run_bounded(['convert', str(folder), str(tmp_path / 'out')])
    _assert_clean_refusal(proc, 'config.json', 'model_args.depth', 'exceeds the limit')


def test_hf_config_depth_is_refused(tmp_path):
    folder = F.write_hf_folder(tmp_path)
    cfg = json.loads((folder / 'config.json').read_text())
    cfg['num_hidden_layers'] = 100_000
    (folder / 'config.json').write_text(json.dumps(cfg))
    proc = _run_bounded(['convert', str(folder), str(tmp_path / 'out')])
    _assert_clean_refusal(proc, 'config.json', 'num_hidden_layers')


def test_device_source_is_refused_whatever_the_format(tmp_path):
    proc = _run_bounded(['convert', '/dev/zero', str(tmp_path / 'out'), '--from', 'timm'])
    _assert_clean_refusal(proc, '/dev/zero', 'not a regular file')


def test_fifo_source_is_refused(tmp_path, capsys):
    fifo = tmp_path / 'pipe.npz'
    os.mkfifo(fifo)
    err = _fails(capsys, ['inspect', str(fifo)])
    assert 'not a regular file' in err


def _patch_central_sizes(path, member, size):
    """Rewrite the zip's central directory so ``member`` claims ``size`` bytes (zip64), data unchanged."""
    with zipfile.ZipFile(path, 'a') as archive:
        info = archive.getinfo(member)
        info.file_size = size
        info.compress_size = size
        archive._didModify = True  # rewrite the central directory on close


def test_member_claiming_64_gb_is_refused_by_a_size_check(tmp_path):
    src = F.write_npz(tmp_path, 'huge.npz', F.bigvision_arrays('learn', 'tok'))
    _patch_central_sizes(src, 'pos_embedding.npy', 64 << 30)
    proc = _run_bounded(['convert', str(src), str(tmp_path / 'out')])
    _assert_clean_refusal(proc, 'huge.npz', 'pos_embedding', 'tensor_bytes')


def test_huge_target_size_is_refused(npz, tmp_path):
    proc = _run_bounded(['convert', str(npz), str(tmp_path / 'out'), '--img-size', '100000'])
    _assert_clean_refusal(proc, 'img_size 100000 exceeds the limit')
    proc = _run_bounded(['convert', str(npz), str(tmp_path / 'out'), '--img-size', '16000',
                                  '--patch-size', '1'])
    _assert_clean_refusal(proc, 'tokens')


def test_limits_can_be_lifted(tmp_path, capsys):
    src = F.write_npz(tmp_path, 'bv.npz', F.bigvision_arrays('sincos', 'gap'))
    err = _fails(capsys, ['convert', str(src), str(tmp_path / 'out'), '--limit', 'width=16'])
    assert 'width 32 exceeds the limit of 16' in err
    assert main(['convert', str(src), str(tmp_path / 'out'), '--limit', 'depth=512']) == 0
    err = _fails(capsys, ['convert', str(src), str(tmp_path / 'out2'), '--limit', 'depht=5'], code=2)  # usage error
    assert "expected NAME=N with NAME one of depth" in err and "'depht=5'" in err


# -- 4. clean failure everywhere ---------------------------------------------------------------------

def test_disk_full_is_one_clear_error(npz, tmp_path, capsys, monkeypatch):
    def full(fd, offset, length):  # what posix_fallocate reports on a full disk, before any byte is written
        raise OSError(errno.ENOSPC, 'No space left on device')

    monkeypatch.setattr(os, 'posix_fallocate', full)
    err = _fails(capsys, ['convert', str(npz), str(tmp_path / 'out')])
    assert 'no space left on the device' in err and 'nothing was written' in err and 'out' in err
    assert not (tmp_path / 'out').exists() and _leftovers(tmp_path) == []


def test_disk_full_on_a_real_tiny_filesystem(npz, tmp_path):
    if shutil.which('unshare') is None:
        pytest.skip('unshare is not available')
    mnt = tmp_path / 'tiny'
    mnt.mkdir()
    script = (f'mount -t tmpfs -o size=64k tmpfs {mnt} && '
              f'{sys.executable} -m porting convert {npz} {mnt}/out; echo "rc=$?"; ls -A {mnt}')
    proc = subprocess.run(['unshare', '--user', '--map-root-user', '--mount', 'sh', '-c', script],
                          capture_output=True, text=True, cwd=REPO, timeout=600)
    if 'rc=' not in proc.stdout:
        pytest.skip(f'cannot mount a tmpfs here: {proc.stderr.strip()[:200]}')
    assert 'rc=1' in proc.stdout, proc.stdout + proc.stderr
    assert 'no space left on the device' in proc.stderr and 'Traceback' not in proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == 'rc=1'  # nothing listed: no partial folder left


def test_safetensors_entry_without_offsets(tmp_path, capsys):
    from porting.hub_folder import save_pretrained_folder
    from timm_vit_variants import SimpleVisionTransformer

    folder = save_pretrained_folder(SimpleVisionTransformer(img_size=16, patch_size=8, embed_dim=32, depth=1,
                                                            num_heads=2, num_classes=3), tmp_path / 'src')
    weights = folder / 'model.safetensors'
    data = weights.read_bytes()
    (length,) = struct.unpack('<Q', data[:8])
    header = json.loads(data[8:8 + length])
    del header['norm.weight']['data_offsets']
    blob = json.dumps(header, separators=(',', ':')).encode()
    blob += b' ' * (length - len(blob))
    weights.write_bytes(data[:8] + blob + data[8 + length:])
    for argv in (['resize', str(folder), str(tmp_path / 'out'), '--img-size', '24'],
                 ['convert', str(folder), str(tmp_path / 'out2')]):
        err = _fails(capsys, argv)
        assert 'model.safetensors' in err and ('norm.weight' in err or 'data_offsets' in err)


def test_deeply_nested_config(tmp_path, capsys):
    folder = F.write_timm_folder(tmp_path)
    (folder / 'config.json').write_text('[' * 100_000 + ']' * 100_000)
    err = _fails(capsys, ['convert', str(folder), str(tmp_path / 'out')])
    assert 'config.json' in err and 'nests too deeply' in err


def test_overflowing_shard_size_is_a_usage_error(npz, tmp_path, capsys):
    assert main(['convert', str(npz), str(tmp_path / 'out'), '--max-shard-size', '1e400GB']) == 2
    err = capsys.readouterr().err
    assert "cannot read size '1e400GB'" in err and 'Traceback' not in err


def test_non_utf8_file_names(tmp_path):
    raw = os.fsencode(tmp_path) + b'/model_\xff.npz'
    F.write_npz(tmp_path, 'tmp.npz', F.vitjax_arrays()).rename(os.fsdecode(raw))
    out = os.fsdecode(os.fsencode(tmp_path) + b'/out_\xfe')
    proc = subprocess.run([sys.executable, '-m', 'porting', 'convert', os.fsdecode(raw), out],
                          capture_output=True, cwd=REPO, env=dict(os.environ, LC_ALL='C.UTF-8', PYTHONIOENCODING='utf-8'))
    assert proc.returncode == 0, proc.stderr.decode(errors='replace')
    assert b'Traceback' not in proc.stderr
    card = Path(out, 'README.md').read_text(encoding='utf-8')  # valid UTF-8 whatever the file name
    assert 'model_\ufffd.npz' in card


def test_local_folder_never_touches_the_network(tmp_path, capsys, monkeypatch):
    folder = F.write_timm_folder(tmp_path)
    cfg = json.loads((folder / 'config.json').read_text())
    cfg['architecture'] = 'hf-hub:org/model'
    (folder / 'config.json').write_text(json.dumps(cfg))
    attempts = []

    def no_network(self, *args, **kwargs):
        attempts.append(args)
        raise OSError('network access attempted')

    monkeypatch.setattr(socket.socket, 'connect', no_network)
    err = _fails(capsys, ['convert', str(folder), str(tmp_path / 'out')])
    assert 'not a registered timm model name' in err and attempts == []


def test_nonfinite_weights_are_refused_even_without_verification(tmp_path, capsys):
    arrays = F.vitjax_arrays()
    arrays['Transformer/encoderblock_1/MlpBlock_3/Dense_0/bias'][3] = np.nan
    src = F.write_npz(tmp_path, 'nan.npz', arrays)
    err = _fails(capsys, ['convert', str(src), str(tmp_path / 'out'), '--no-verify'])
    assert 'NaN or Inf' in err and 'blocks.1.mlp.fc1.bias' in err and '--allow-nonfinite' in err
    assert not (tmp_path / 'out').exists()
    assert main(['convert', str(src), str(tmp_path / 'out'), '--no-verify', '--allow-nonfinite']) == 0
    err = capsys.readouterr().err
    assert 'warning:' in err and 'blocks.1.mlp.fc1.bias' in err


def test_stale_partial_folders_are_removed_but_live_ones_kept(npz, tmp_path, capsys):
    out = tmp_path / 'out'
    stale = tmp_path / f'.out.{PARTIAL}-deadbeef'
    stale.mkdir()
    (stale / 'model.safetensors').write_bytes(b'x' * 1000)
    stale_old = tmp_path / f'.out.{OLD}-cafe0123'  # token_hex(4): 8 characters, as mkdtemp's
    stale_old.mkdir()
    live = tmp_path / f'.out.{PARTIAL}-alive_12'
    live.mkdir()
    fd = os.open(live, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as a conversion still running would hold it
    try:
        assert main(['convert', str(npz), str(out)]) == 0
        assert not stale.exists() and not stale_old.exists() and live.exists()
    finally:
        os.close(fd)


def test_push_respects_hf_hub_offline(npz, tmp_path, capsys, monkeypatch):
    out = tmp_path / 'out'
    assert main(['convert', str(npz), str(out)]) == 0
    capsys.readouterr()
    attempts = []
    monkeypatch.setattr(socket.socket, 'connect', lambda self, *a: attempts.append(a))
    monkeypatch.setenv('HF_HUB_OFFLINE', '1')
    err = _fails(capsys, ['push', 'org/name', str(out), '--token', SECRET, '--endpoint', 'http://127.0.0.1:9'])
    assert 'HF_HUB_OFFLINE' in err and SECRET not in err and attempts == []


_HOSTILE = st.sampled_from(['nan', 'deep_json', 'huge_classes', 'arch_path', 'fifo_weights', 'loading_arg'])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=_HOSTILE, no_verify=st.booleans())
def test_hostile_sources_end_in_one_clean_error(tmp_path_factory, kind, no_verify):
    """Each class of hostile input above, through the whole CLI: exit 1, one error line, nothing left."""
    work = tmp_path_factory.mktemp('hostile')
    if kind in ('nan', 'huge_classes'):
        arrays = F.vitjax_arrays()
        if kind == 'nan':
            arrays['head/bias'][0] = np.inf
        else:
            arrays['head/kernel'] = np.zeros((F.WIDTH, 100_001), np.float32)
            arrays['head/bias'] = np.zeros((100_001,), np.float32)
        src = F.write_npz(work, 'src.npz', arrays)
    else:
        src = F.write_timm_folder(work)
        cfg = json.loads((src / 'config.json').read_text())
        if kind == 'deep_json':
            (src / 'config.json').write_text('{"a":' * 50_000 + '1' + '}' * 50_000)
        elif kind == 'arch_path':
            cfg['architecture'] = 'local-dir:/etc'
            (src / 'config.json').write_text(json.dumps(cfg))
        elif kind == 'loading_arg':
            cfg['model_args'] = dict(cfg.get('model_args') or {}, checkpoint_path='/etc/passwd')
            (src / 'config.json').write_text(json.dumps(cfg))
        else:
            (src / 'model.safetensors').unlink()
            os.mkfifo(src / 'model.safetensors')
    argv = ['convert', str(src), str(work / 'out')] + (['--no-verify'] if no_verify else [])
    captured = io.StringIO()
    with contextlib.redirect_stderr(captured), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    err = captured.getvalue()
    assert code == 1, err
    assert err.strip().splitlines()[-1].startswith('error: ') and 'Traceback' not in err
    assert not (work / 'out').exists() and _leftovers(work) == []
