"""Bad input at the ``vit-port`` level: non-zero exit, one clear message, no partial output, source untouched."""
import hashlib
import os
from pathlib import Path

import pytest

from porting.cli import main
from porting.hub_folder import save_pretrained_folder
from timm_vit_variants import SimpleVisionTransformer

import checkpoint_fixtures as F


@pytest.fixture(scope='module')
def npz(tmp_path_factory):
    return F.write_npz(tmp_path_factory.mktemp('src'), 'vitjax.npz', F.vitjax_arrays())


def _sha(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _leftovers(folder):
    return [p.name for p in Path(folder).iterdir() if p.name.startswith('.')]


def _fails(capsys, argv, code=1):
    assert main(argv) == code
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].startswith('error: ')
    assert 'Traceback' not in err
    return err


def test_existing_output_needs_overwrite(npz, tmp_path, capsys):
    out = tmp_path / 'out'
    out.mkdir()
    err = _fails(capsys, ['convert', str(npz), str(out)])
    assert 'already exists' in err and '--overwrite' in err and str(out) in err
    assert main(['convert', str(npz), str(out), '--overwrite']) == 0  # an empty folder may be replaced
    assert sorted(os.listdir(out)) == ['README.md', 'config.json', 'model.safetensors']
    assert main(['convert', str(npz), str(out), '--overwrite']) == 0  # and so may our own earlier output
    assert sorted(os.listdir(out)) == ['README.md', 'config.json', 'model.safetensors']
    assert _leftovers(tmp_path) == []


def test_overwrite_never_replaces_a_folder_of_other_files(npz, tmp_path, capsys):
    out = tmp_path / 'thesis'
    out.mkdir()
    (out / 'keep.txt').write_text('mine')
    err = _fails(capsys, ['convert', str(npz), str(out), '--overwrite'])
    assert 'keep.txt' in err and 'written by vit-port' in err and 'nothing was changed' in err
    assert os.listdir(out) == ['keep.txt'] and (out / 'keep.txt').read_text() == 'mine'
    assert _leftovers(tmp_path) == []


def test_output_cannot_replace_source(tmp_path, capsys):
    folder = F.write_hf_folder(tmp_path)
    err = _fails(capsys, ['convert', str(folder), str(folder), '--overwrite'])
    assert 'replace or contain the source' in err
    assert (folder / 'config.json').is_file()


def test_unwritable_output(npz, tmp_path, capsys):
    blocker = tmp_path / 'a_file'
    blocker.write_text('x')
    err = _fails(capsys, ['convert', str(npz), str(blocker / 'out')])
    assert 'not a directory' in err
    if os.geteuid() != 0:  # root ignores permission bits
        locked = tmp_path / 'locked'
        locked.mkdir(mode=0o500)
        err = _fails(capsys, ['convert', str(npz), str(locked / 'out')])
        assert 'not writable' in err


def test_truncated_source(npz, tmp_path, capsys):
    bad = tmp_path / 'truncated.npz'
    data = npz.read_bytes()
    bad.write_bytes(data[:len(data) // 2])
    before = _sha(bad)
    out = tmp_path / 'out'
    err = _fails(capsys, ['convert', str(bad), str(out)])
    assert 'truncated.npz' in err
    assert not out.exists() and _leftovers(tmp_path) == []
    assert _sha(bad) == before


def test_unknown_format(tmp_path, capsys):
    junk = tmp_path / 'weights.bin'
    junk.write_bytes(os.urandom(256))
    err = _fails(capsys, ['convert', str(junk), str(tmp_path / 'out')])
    assert 'weights.bin' in err
    assert not (tmp_path / 'out').exists()
    assert main(['convert', str(junk), str(tmp_path / 'out'), '--from', 'onnx']) == 2
    assert 'invalid choice' in capsys.readouterr().err


def test_missing_source(tmp_path, capsys):
    err = _fails(capsys, ['convert', str(tmp_path / 'nope.npz'), str(tmp_path / 'out')])
    assert 'not found' in err and 'nope.npz' in err


def test_bad_sizes(npz, tmp_path, capsys):
    out = tmp_path / 'out'
    err = _fails(capsys, ['convert', str(npz), str(out), '--img-size', '4'])
    assert 'smaller than the patch size' in err
    assert _fails(capsys, ['convert', str(npz), str(out), '--img-size', '1', '2', '3'], code=2)
    assert _fails(capsys, ['convert', str(npz), str(out), '--patch-size', '0'], code=2)
    assert not out.exists()


def test_non_divisible_size_for_a_non_padding_model(tmp_path, capsys):
    model = SimpleVisionTransformer(img_size=32, patch_size=8, embed_dim=32, depth=1, num_heads=2, num_classes=3,
                                    dynamic_img_pad=False)
    src = save_pretrained_folder(model, tmp_path / 'nopad')
    out = tmp_path / 'out'
    err = _fails(capsys, ['resize', str(src), str(out), '--img-size', '36'])
    assert 'not divisible' in err and 'dynamic_img_pad' in err
    assert not out.exists()
    assert main(['resize', str(src), str(out), '--img-size', '40']) == 0


def test_failed_verification_leaves_nothing(tmp_path, capsys):
    src = F.write_npz(tmp_path, 'bv.npz', F.bigvision_arrays('sincos', 'gap'))
    out = tmp_path / 'out'
    # big_vision's table is float32-rounded differently from ours: 1e-7-level, not 0.
    err = _fails(capsys, ['convert', str(src), str(out), '--tol', '0'])
    assert 'verification failed' in err
    assert not out.exists() and _leftovers(tmp_path) == []


def test_usage_errors_exit_2(capsys):
    assert main([]) == 2
    assert 'error: ' in capsys.readouterr().err
    assert main(['resize', 'a', 'b']) == 2
    assert 'give --img-size and/or --patch-size' in capsys.readouterr().err
    assert main(['--help']) == 0
    assert 'convert' in capsys.readouterr().out


def test_shard_size_is_validated(npz, tmp_path, capsys):
    err = _fails(capsys, ['convert', str(npz), str(tmp_path / 'out'), '--max-shard-size', 'lots'], code=2)
    assert "cannot read size 'lots'" in err
    assert not (tmp_path / 'out').exists()


def test_cli_adds_the_flag_for_what_the_plugin_needs(tmp_path, capsys):
    """The plugin's error names the missing fact; the command line names the flag that gives it."""
    from checkpoint_fixtures import jax_params, tiny_timm_vit, write_npz_at as write_npz
    from porting.cli import main

    ref = tiny_timm_vit(img_size=(16, 12), class_token=False, no_embed_class=True, global_pool='avg', fc_norm=False)
    path = write_npz(tmp_path / 'bv.npz', jax_params(ref, 'bigvision'), prefix='params/')
    assert main(['convert', str(path), str(tmp_path / 'out')]) == 1
    err = capsys.readouterr().err
    assert 'the source image size is needed' in err and '(give it with --source-img-size H [W])' in err
    assert main(['convert', str(path), str(tmp_path / 'out'), '--source-img-size', '16', '12']) == 0
