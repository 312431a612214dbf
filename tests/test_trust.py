"""A "verification passed" that is earned, and hostile input bounded on every command (issue 16).

One test (or a few) per reproduced case; each failed on the code before the fix.
"""
import argparse
import contextlib
import io
import json
import os
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

import timm_vit_variants  # noqa: F401
from model_probes import load_like_user
from porting.cli import main
from porting.hub_folder import load_folder, save_pretrained_folder
from timm_vit_variants import SimpleVisionTransformer
from porting.output import OLD, PARTIAL
from timm_vit_variants import ViTVariantsError

import _porting_fixtures as F
from ckpt_fixtures import open_checkpoint

REPO = Path(__file__).resolve().parents[1]
REF = REPO / 'tests' / 'data' / 'reference'


def _run(capsys, argv):
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def _bare_timm(path, width=192, heads=6, depth=1, seed=0):
    """A bare timm state dict whose head count is not the standard one for its width."""
    torch.manual_seed(seed)
    model = timm.create_model('vit_tiny_patch16_224', embed_dim=width, num_heads=heads, depth=depth, num_classes=5,
                              img_size=32, patch_size=8)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.2)
    torch.save(model.state_dict(), path)
    return model.eval()


def _leftovers(folder):
    return [p.name for p in Path(folder).iterdir() if PARTIAL in p.name or OLD in p.name]


# -- 1. a check that shares an assumption says so -------------------------------------------------------

def test_an_assumed_head_count_is_stated_everywhere(tmp_path, capsys):
    true = _bare_timm(tmp_path / 'ti6.pth')
    code, out, err = _run(capsys, ['convert', str(tmp_path / 'ti6.pth'), str(tmp_path / 'out')])
    assert code == 0  # width 192 is the standard Ti, whose 3 heads are assumed: allowed, but said
    assert "passed, but the architecture 'VisionTransformer', head count 3" in out and 'assumed' in out
    assert 'a wrong value would pass too' in out
    card = (tmp_path / 'out' / 'README.md').read_text()
    assert "**passed**, but the architecture 'VisionTransformer', head count 3" in card and '`num_heads` = `3`: the standard ViT of width 192' in card
    conversion = json.loads((tmp_path / 'out' / 'config.json').read_text())['conversion']
    assert conversion['assumed']['num_heads'] == {'value': 3, 'why': 'the standard ViT of width 192'}
    assert conversion['verification']['caveats']
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():  # the assumption is wrong here, and the output shows it is another network
        assert (load_like_user(tmp_path / 'out')(x) - true(x)).abs().max() > 1e-3
    code, out, _ = _run(capsys, ['convert', str(tmp_path / 'ti6.pth'), str(tmp_path / 'out6'), '--num-heads', '6'])
    assert code == 0 and 'the head count 6 was given, not read from the source' in out
    with torch.no_grad():
        torch.testing.assert_close(load_like_user(tmp_path / 'out6')(x), true(x), atol=1e-5, rtol=0)


def test_a_non_standard_width_is_refused_unless_asked(tmp_path, capsys):
    _bare_timm(tmp_path / 'w128.pth', width=128, heads=2)
    code, _, err = _run(capsys, ['convert', str(tmp_path / 'w128.pth'), str(tmp_path / 'out')])
    assert code == 1 and 'no count can be assumed safely' in err and '--num-heads N' in err
    assert not (tmp_path / 'out').exists()
    code, out, _ = _run(capsys, ['convert', str(tmp_path / 'w128.pth'), str(tmp_path / 'out'), '--assume-heads'])
    assert code == 0 and "passed, but the architecture 'VisionTransformer', head count 2, " in out and 'were assumed' in out
    assert json.loads((tmp_path / 'out' / 'config.json').read_text())['model_args']['num_heads'] == 2


def test_a_training_checkpoint_records_its_head_count(tmp_path, capsys):
    model = _bare_timm(tmp_path / 'unused.pth')
    args = argparse.Namespace(model='vit_tiny_patch16_224', model_kwargs=dict(
        embed_dim=192, num_heads=6, depth=1, img_size=32, patch_size=8), num_classes=5, mean=[0.1, 0.2, 0.3],
        std=[0.5, 0.5, 0.5], interpolation='bicubic', crop_pct=0.95)
    torch.save({'epoch': 3, 'arch': 'vit_tiny_patch16_224', 'state_dict': model.state_dict(), 'args': args},
               tmp_path / 'checkpoint.pth.tar')
    code, out, err = _run(capsys, ['convert', str(tmp_path / 'checkpoint.pth.tar'), str(tmp_path / 'out')])
    assert code == 0 and 'but' not in out.split(' vs ')[0], out
    raw = json.loads((tmp_path / 'out' / 'config.json').read_text())
    assert raw['model_args']['num_heads'] == 6 and 'num_heads' not in raw['conversion']['assumed']
    assert raw['pretrained_cfg']['mean'] == [0.1, 0.2, 0.3] and raw['pretrained_cfg']['crop_pct'] == 0.95


def test_preprocessing_not_recorded_is_assumed_out_loud_and_set_by_flags(tmp_path, capsys):
    src = F.write_npz(tmp_path, 'bv.npz', F.bigvision_arrays('sincos', 'gap'))
    code, _, err = _run(capsys, ['convert', str(src), str(tmp_path / 'a')])
    assert code == 0 and 'note: not recorded in the source, assumed:' in err and "interpolation='bilinear'" in err
    assert 'img_size=224' in err and '--source-img-size' in err
    assumed = json.loads((tmp_path / 'a' / 'config.json').read_text())['conversion']['assumed']
    assert {'mean', 'std', 'interpolation', 'crop_pct', 'img_size'} <= set(assumed)
    code, _, err = _run(capsys, ['convert', str(src), str(tmp_path / 'b'), '--mean', '0.1', '0.2', '0.3', '--std',
                                 '0.2', '0.2', '0.2', '--interpolation', 'bicubic', '--crop-pct', '0.9', '--crop-mode', 'center',
                                 '--source-img-size', '32'])
    assert code == 0 and 'assumed' not in err
    raw = json.loads((tmp_path / 'b' / 'config.json').read_text())
    assert raw['pretrained_cfg']['mean'] == [0.1, 0.2, 0.3] and raw['pretrained_cfg']['interpolation'] == 'bicubic'
    assert raw['conversion']['assumed'] == {}
    assert _run(capsys, ['convert', str(src), str(tmp_path / 'c'), '--crop-pct', '1.5'])[0] == 2  # a usage error


# -- 2. sources as sound as their own library demands ---------------------------------------------------

def _flip_member_byte(path, member):
    """Flip one data byte of a stored zip member in place (its CRC-32 in the directory stays the old one)."""
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(member)
    with open(path, 'r+b') as fh:
        fh.seek(info.header_offset + 26)
        name_len, extra_len = struct.unpack('<HH', fh.read(4))
        at = info.header_offset + 30 + name_len + extra_len + info.file_size - 3
        fh.seek(at)
        byte = fh.read(1)
        fh.seek(at)
        fh.write(bytes([byte[0] ^ 0x40]))


def test_an_npz_with_a_bad_crc_is_refused(tmp_path, capsys):
    src = F.write_npz(tmp_path, 'bv.npz', F.bigvision_arrays('sincos', 'gap'))
    _flip_member_byte(src, 'Transformer/encoderblock_0/MlpBlock_0/Dense_0/kernel.npy')
    with np.load(src, allow_pickle=False) as official, pytest.raises(zipfile.BadZipFile, match='CRC'):
        official['Transformer/encoderblock_0/MlpBlock_0/Dense_0/kernel']  # numpy refuses it too
    code, _, err = _run(capsys, ['convert', str(src), str(tmp_path / 'out')])
    assert code == 1 and 'bad CRC-32' in err and 'MlpBlock_0/Dense_0/kernel' in err
    assert not (tmp_path / 'out').exists() and _leftovers(tmp_path) == []
    with open_checkpoint(src) as ckpt, pytest.raises(ViTVariantsError, match='CRC-32'):
        ckpt.state_dict()


def test_a_safetensors_file_with_overlapping_offsets_is_refused(tmp_path, capsys):
    from safetensors import SafetensorError, safe_open

    folder = F.write_timm_folder(tmp_path)
    weights = folder / 'model.safetensors'
    raw = weights.read_bytes()
    (length,) = struct.unpack('<Q', raw[:8])
    header = json.loads(raw[8:8 + length])
    names = [n for n in header if n != '__metadata__']
    first, second = sorted(names, key=lambda n: header[n]['data_offsets'])[:2]
    if header[first]['data_offsets'][1] - header[first]['data_offsets'][0] == \
            header[second]['data_offsets'][1] - header[second]['data_offsets'][0]:
        header[second]['data_offsets'] = header[first]['data_offsets']  # two tensors on the same bytes
    else:
        begin, end = header[second]['data_offsets']
        header[second]['data_offsets'] = [begin - 4, end - 4]  # shifted back into the one before
    blob = json.dumps(header, separators=(',', ':')).encode()
    blob += b' ' * (-len(blob) % 8)
    weights.write_bytes(struct.pack('<Q', len(blob)) + blob + raw[8 + length:])
    with pytest.raises(SafetensorError):
        with safe_open(str(weights), framework='pt') as f:  # the library refuses it too
            f.get_tensor(second)
    code, _, err = _run(capsys, ['convert', str(folder), str(tmp_path / 'out')])
    assert code == 1 and 'invalid tensor offsets' in err, err


def test_a_reference_that_cannot_load_the_source_fails_the_conversion(tmp_path, capsys, monkeypatch):
    from porting.verification import networks, references

    def refuse(path, model_args):
        raise zipfile.BadZipFile('Bad CRC-32 for file embedding/kernel.npy\n(and a second line)')

    monkeypatch.setitem(references.REFERENCES, 'bigvision', networks.timm_network(refuse))
    src = F.write_npz(tmp_path, 'bv.npz', F.bigvision_arrays('sincos', 'gap'))
    code, _, err = _run(capsys, ['convert', str(src), str(tmp_path / 'out')])
    assert code == 1 and 'could not load or run the source: BadZipFile: Bad CRC-32' in err
    assert 'second line' not in err and not (tmp_path / 'out').exists()


def test_a_huge_depth_in_config_json_is_refused_by_every_loader(tmp_path, capsys):
    model = timm.create_model('simple_vit_tiny', depth=1, embed_dim=32, num_heads=2, num_classes=3)
    folder = save_pretrained_folder(model, tmp_path / 'f')
    cfg = json.loads((folder / 'config.json').read_text())
    cfg['model_args']['depth'] = 100_000
    (folder / 'config.json').write_text(json.dumps(cfg))
    with pytest.raises(ViTVariantsError, match='depth 100000 exceeds the limit') as refused:
        timm.create_model(f'local-dir:{folder}', pretrained=True)
    assert str(folder) in str(refused.value)
    with pytest.raises(ViTVariantsError, match='depth 100000'):
        load_folder(folder)
    for argv in (['export', str(folder), str(tmp_path / 'm.onnx')], ['verify', str(folder), str(folder)],
                 ['resize', str(folder), str(tmp_path / 'r'), '--img-size', '64'], ['inspect', str(folder)]):
        code, _, err = _run(capsys, argv)
        assert code == 1 and 'depth 100000 exceeds the limit' in err and '--limit depth=100000' in err, argv


# -- 3. a check that fails is a failure ---------------------------------------------------------------

def _prelogits_folder(tmp_path):
    model = timm.create_model('simple_vit_small_patch16_224', embed_dim=64, depth=1, num_heads=2, rep_size=32,
                              num_classes=5, img_size=32, patch_size=8)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.2)
    return save_pretrained_folder(model, tmp_path / 'pl'), model.eval()


def test_resizing_a_pre_logits_folder_is_checked_at_the_target(tmp_path, capsys):
    folder, _ = _prelogits_folder(tmp_path)
    code, out, err = _run(capsys, ['resize', str(folder), str(tmp_path / 'r'), '--img-size', '48'])
    assert code == 0 and 'target geometry (48x48, patch 8) passed' in out
    assert 'Error' not in out + err and 'Unexpected key' not in out + err
    assert 'explicit numpy head(tanh(pre_logits(x)))' in out


def test_a_target_check_that_fails_fails_the_conversion(tmp_path, capsys, monkeypatch):
    from porting.verification import target

    folder, _ = _prelogits_folder(tmp_path)
    monkeypatch.setattr(target, 'bigvision_posemb_sincos_2d', lambda h, w, d, t=1e4: np.zeros((1, h * w, d),
                                                                                                np.float32))
    code, _, err = _run(capsys, ['resize', str(folder), str(tmp_path / 'r'), '--img-size', '48'])
    assert code == 1 and 'target geometry (48x48, patch 8) failed' in err
    assert not (tmp_path / 'r').exists()


# -- 4. verify works on resized and re-headed outputs -------------------------------------------------------

def test_verify_checks_resized_and_reheaded_folders(tmp_path, capsys):
    src = F.write_npz(tmp_path, 'vj.npz', F.vitjax_arrays())
    outputs = {}
    for name, extra in (('same', []), ('big', ['--img-size', '48']), ('p4', ['--patch-size', '4']),
                        ('head', ['--num-classes', '3']), ('nonsquare', ['--img-size', '40', '24'])):
        assert main(['convert', str(src), str(tmp_path / name), *extra, '--no-verify']) == 0
        capsys.readouterr()
        code, outputs[name], err = _run(capsys, ['verify', str(src), str(tmp_path / name)])
        assert code == 0 and 'verification passed' in outputs[name], (name, outputs[name], err)
    assert all("checked at the folder's geometry" in outputs[n] for n in ('big', 'p4', 'head', 'nonsquare'))
    assert 'max|dlogits|' in outputs['big'] and 'max|dlogits|' not in outputs['head']
    assert 'logits not compared: the output has a new, zero-initialised head' in outputs['head']
    other = F.write_npz(tmp_path, 'other.npz', F.vitjax_arrays(seed=3))
    code, _, err = _run(capsys, ['verify', str(other), str(tmp_path / 'big')])
    assert code == 1 and 'verification failed' in err and 'records another source' in err



def test_a_lifted_limit_holds_through_verification(tmp_path, capsys):
    """--limit lifts a limit for the whole run: the written folder is loaded for the check under it too."""
    # built directly: create_model's gate applies the default limits
    save_pretrained_folder(SimpleVisionTransformer(embed_dim=32, depth=1, num_heads=2, img_size=32, patch_size=16,
                                                   num_classes=100_001), tmp_path / 'src')
    for out, extra in (('same', []), ('big', ['--img-size', '48'])):
        code, printed, err = _run(capsys, ['convert', str(tmp_path / 'src'), str(tmp_path / out), '--limit',
                                           'classes=200000', *extra])
        assert code == 0 and 'verification passed' in printed, err
    code, _, err = _run(capsys, ['convert', str(tmp_path / 'src'), str(tmp_path / 'refused')])
    assert code == 1 and 'classes 100001 exceeds the limit' in err

# -- 6. target sizes from flags are bounded -----------------------------------------------------------

def test_target_sizes_from_flags_are_bounded(tmp_path, capsys):
    src = F.write_npz(tmp_path, 'vj.npz', F.vitjax_arrays())
    code, _, err = _run(capsys, ['convert', str(src), str(tmp_path / 'o'), '--img-size', '4096', '--patch-size',
                                 '4096'])  # a 16 GB PI-resize matrix from the stored 8x8 kernel
    assert code == 1 and 'tensor_bytes' in err and 'patch_embed.proj.weight' in err
    assert main(['convert', str(src), str(tmp_path / 'ok'), '--no-verify']) == 0
    code, _, err = _run(capsys, ['export', str(tmp_path / 'ok'), str(tmp_path / 'm.onnx'), '--static', '100000',
                                 '100000'])
    assert code == 1 and 'img_size 100000 exceeds the limit' in err
    for field, value in (('img_size', 10 ** 7), ('patch_size', 10 ** 9)):
        cfg = json.loads((tmp_path / 'ok' / 'config.json').read_text())
        cfg['model_args'][field] = value
        (tmp_path / 'ok' / 'config.json').write_text(json.dumps(cfg))
        code, _, err = _run(capsys, ['export', str(tmp_path / 'ok'), str(tmp_path / 'm.onnx')])
        assert code == 1 and 'exceeds the limit' in err and 'config.json' in err, err


# -- 7. stale partials are ours or are left alone ---------------------------------------------------------

def test_user_data_named_like_a_leftover_is_left_alone(tmp_path, capsys):
    src = F.write_npz(tmp_path, 'vj.npz', F.vitjax_arrays())
    mine = tmp_path / f'.out.{OLD}-backup12'  # 8 characters, like a real suffix
    mine.mkdir()
    (mine / 'thesis.tex').write_text('years of work')
    short = tmp_path / f'.out.{PARTIAL}-mydata'
    short.mkdir()
    (short / 'notes.txt').write_text('mine')
    code, _, err = _run(capsys, ['convert', str(src), str(tmp_path / 'out')])
    assert code == 0 and (mine / 'thesis.tex').read_text() == 'years of work' and (short / 'notes.txt').exists()
    assert 'left alone' in err and 'thesis.tex' in err


def test_a_fifo_named_like_a_leftover_cannot_stall_a_conversion(tmp_path):
    src = F.write_npz(tmp_path, 'vj.npz', F.vitjax_arrays())
    fifo = tmp_path / f'.out.{PARTIAL}-abcdefgh'
    os.mkfifo(fifo)
    proc = subprocess.run([sys.executable, '-m', 'porting', 'convert', str(src), str(tmp_path / 'out'), '--no-verify'],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert fifo.exists() and 'not a regular file or folder' in proc.stderr


def test_a_lock_held_on_the_output_folder_is_waited_for_a_bounded_time(tmp_path, monkeypatch, capsys):
    import fcntl

    from porting import output

    monkeypatch.setattr(output, '_LOCK_PATIENCE', 0.3)
    src = F.write_npz(tmp_path, 'vj.npz', F.vitjax_arrays())
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as another process could, on a shared /tmp
    try:
        code, _, err = _run(capsys, ['convert', str(src), str(tmp_path / 'out'), '--no-verify'])
    finally:
        os.close(fd)
    assert code == 1 and 'locked by another process' in err and _leftovers(tmp_path) == []


# -- 8. a FlexiViT archive gets FlexiViT's rule -----------------------------------------------------------

def test_a_flexivit_archive_is_converted_with_flexivits_own_rule(tmp_path, capsys):
    io_ = np.load(REF / 'flexivit_tiny_io.npz')
    code, out, err = _run(capsys, ['convert', str(REF / 'flexivit_tiny.npz'), str(tmp_path / 'f16'), '--img-size',
                                   '240', '--patch-size', '16'])
    assert code == 0 and 'a FlexiViT archive' in err and 'target geometry (240x240, patch 16) passed' in out
    assert json.loads((tmp_path / 'f16' / 'config.json').read_text())['model_args']['pos_embed_resample'] == 'flexi'
    x = torch.from_numpy(io_['inputs_240']).permute(0, 3, 1, 2).contiguous()
    with torch.no_grad():  # big_vision's own FlexiViT model at patch 16
        got = load_like_user(tmp_path / 'f16')(x).numpy()
    assert np.abs(got - io_['logits_patch16']).max() <= 2e-5


# -- 9. named errors ----------------------------------------------------------------------------------------

def test_export_names_the_tensor_holding_nan(tmp_path, capsys):
    model = timm.create_model('simple_vit_tiny', depth=1, embed_dim=32, num_heads=2, num_classes=3, img_size=32)
    with torch.no_grad():
        model.blocks[0].mlp.fc2.bias[1] = float('nan')
    folder = save_pretrained_folder(model, tmp_path / 'f')
    code, _, err = _run(capsys, ['export', str(folder), str(tmp_path / 'm.pt2')])
    assert code == 1 and "key 'blocks.0.mlp.fc2.bias'" in err and 'NaN or Inf' in err


def test_vit_variants_run_runs_a_folder_with_main(tmp_path):
    pkg = tmp_path / 'tool'
    pkg.mkdir()
    (pkg / 'helper.py').write_text('VALUE = 7\n')
    (pkg / '__main__.py').write_text('import sys, timm, helper\n'
                                     'print(helper.VALUE, sys.argv[1:], "simple_vit_tiny" in timm.list_models())\n')
    proc = subprocess.run([sys.executable, '-m', 'timm_vit_variants.training.run', str(pkg), '--x', '1'], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip() == "7 ['--x', '1'] True", proc.stderr
    (pkg / '__main__.py').unlink()
    proc = subprocess.run([sys.executable, '-m', 'timm_vit_variants.training.run', str(pkg)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and 'without a __main__.py' in proc.stderr


def test_a_wrong_from_names_the_detected_format(tmp_path, capsys):
    src = F.write_timm_file(tmp_path)
    code, _, err = _run(capsys, ['convert', str(src), str(tmp_path / 'out'), '--from', 'hf'])
    assert code == 1 and "read as format 'hf', but its content is a 'timm' checkpoint" in err


# -- the fuzzing, across export, verify and resize ---------------------------------------------------------

def _hostile_folder(work, kind):
    model = timm.create_model('simple_vit_tiny', depth=1, embed_dim=32, num_heads=2, num_classes=3, img_size=32,
                              patch_size=8)
    folder = save_pretrained_folder(model, work / 'f')
    cfg = json.loads((folder / 'config.json').read_text())
    if kind == 'deep_json':
        (folder / 'config.json').write_text('{"a":' * 50_000 + '1' + '}' * 50_000)
        return folder
    if kind == 'fifo_weights':
        (folder / 'model.safetensors').unlink()
        os.mkfifo(folder / 'model.safetensors')
        return folder
    if kind == 'truncated':
        raw = (folder / 'model.safetensors').read_bytes()
        (folder / 'model.safetensors').write_bytes(raw[:len(raw) // 2])
        return folder
    changes = {'depth': {'depth': 100_000}, 'img_size': {'img_size': 10 ** 7}, 'patch_size': {'patch_size': 10 ** 9},
               'unknown_arg': {'evil': 1}, 'bad_pool': {'global_pool': 'map!'}}[kind]
    cfg['model_args'].update(changes)
    (folder / 'config.json').write_text(json.dumps(cfg))
    return folder


_KINDS = st.sampled_from(['deep_json', 'fifo_weights', 'truncated', 'depth', 'img_size', 'patch_size',
                          'unknown_arg', 'bad_pool'])
_COMMANDS = st.sampled_from(['export', 'verify', 'resize', 'inspect'])


@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=_KINDS, command=_COMMANDS)
def test_hostile_folders_end_in_one_clean_error_on_every_command(tmp_path_factory, kind, command):
    work = tmp_path_factory.mktemp('hostile')
    folder = _hostile_folder(work, kind)
    argv = {'export': ['export', str(folder), str(work / 'm.onnx')],
            'verify': ['verify', str(folder), str(folder)],
            'resize': ['resize', str(folder), str(work / 'out'), '--img-size', '48'],
            'inspect': ['inspect', str(folder)]}[command]
    captured = io.StringIO()
    with contextlib.redirect_stderr(captured), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    err = captured.getvalue()
    assert code == 1, (kind, command, err)
    assert err.strip().splitlines()[-1].startswith('error: ') and 'Traceback' not in err, err
    assert not (work / 'out').exists() and not (work / 'm.onnx').exists() and _leftovers(work) == []
