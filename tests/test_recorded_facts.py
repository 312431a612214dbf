"""No "verification passed" over a head count, depth or preprocessing value the file contradicts (issue 23, items 1-2).

Each case is a file a careless or hostile user could hand to ``vit-port convert``; each failed on the code before:
it converted and "passed", or wrote a config that timm's transform then fails on.
"""
import argparse
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import timm_vit_variants  # noqa: F401
from porting.cli import main

import checkpoint_fixtures as F

REF = Path(__file__).resolve().parent / 'data' / 'reference'
MAP_ATTN = 'params/img/MAPHead_0/MultiHeadDotProductAttention_0/'
BLOCK1_ATTN = 'params/img/Transformer/encoderblock_1/MultiHeadDotProductAttention_0/'
SCANNED = 'params/img/Transformer/encoderblock/'


def _refused(capsys, src, tmp_path, key, *extra):
    """``convert`` exits 1 with one ``error:`` line that names ``key``, and writes nothing."""
    code = main(['convert', str(src), str(tmp_path / 'out'), *extra])
    captured = capsys.readouterr()
    assert code == 1, captured.out + captured.err
    errors = [line for line in captured.err.splitlines() if line.startswith('error:')]
    assert len(errors) == 1 and f"key '{key}'" in errors[0], captured.err
    assert 'Traceback' not in captured.err and 'verification passed' not in captured.out
    assert not (tmp_path / 'out').exists()
    return errors[0]


def _siglip_arrays(name: str = 'siglip_tiny.npz') -> dict:
    with np.load(REF / name, allow_pickle=False) as src:
        return {n: src[n] for n in src.files}


def _regroup_heads(arrays: dict, attn: str, heads: int, lead: tuple = ()) -> None:
    """Store the attention under ``attn`` with ``heads`` heads: the same numbers, another head split."""
    for part in ('query', 'key', 'value'):
        kernel, bias = arrays[f'{attn}{part}/kernel'], arrays[f'{attn}{part}/bias']
        arrays[f'{attn}{part}/kernel'] = kernel.reshape(*lead, kernel.shape[len(lead)], heads, -1)
        arrays[f'{attn}{part}/bias'] = bias.reshape(*lead, heads, -1)
    out = arrays[f'{attn}out/kernel']
    arrays[f'{attn}out/kernel'] = out.reshape(*lead, heads, -1, out.shape[-1])


# -- 1. every head count and depth the file records ---------------------------------------------------------

def test_a_map_head_stored_with_other_heads_is_refused(tmp_path, capsys):
    arrays = _siglip_arrays()
    _regroup_heads(arrays, MAP_ATTN, 8)
    src = F.write_npz(tmp_path, 'map8.npz', arrays)
    line = _refused(capsys, src, tmp_path, f'{MAP_ATTN}query/kernel')
    assert '8 heads' in line and '4' in line


def test_a_later_block_stored_with_other_heads_is_refused(tmp_path, capsys):
    arrays = _siglip_arrays()
    _regroup_heads(arrays, BLOCK1_ATTN, 8)
    src = F.write_npz(tmp_path, 'block1_8.npz', arrays)
    line = _refused(capsys, src, tmp_path, f'{BLOCK1_ATTN}query/kernel')
    assert '8 heads' in line


def test_one_bias_with_other_heads_is_refused(tmp_path, capsys):
    arrays = _siglip_arrays()
    arrays[f'{BLOCK1_ATTN}value/bias'] = arrays[f'{BLOCK1_ATTN}value/bias'].reshape(8, 8)
    src = F.write_npz(tmp_path, 'bias8.npz', arrays)
    _refused(capsys, src, tmp_path, f'{BLOCK1_ATTN}value/bias')


def test_a_scanned_array_stacked_deeper_than_the_rest_is_refused(tmp_path, capsys):
    arrays = _siglip_arrays('siglip_tiny_scanned.npz')
    name = f'{SCANNED}MlpBlock_0/Dense_0/kernel'
    arrays[name] = np.concatenate([arrays[name], arrays[name][:1]])  # 3 layers where the rest hold 2
    src = F.write_npz(tmp_path, 'deep3.npz', arrays)
    line = _refused(capsys, src, tmp_path, name)
    assert 'depth' in line and '3' in line and '2' in line


def test_a_scanned_file_with_other_heads_in_one_array_is_refused(tmp_path, capsys):
    arrays = _siglip_arrays('siglip_tiny_scanned.npz')
    _regroup_heads(arrays, f'{SCANNED}MultiHeadDotProductAttention_0/', 8, lead=(2,))
    arrays[f'{SCANNED}MultiHeadDotProductAttention_0/query/kernel'] = \
        arrays[f'{SCANNED}MultiHeadDotProductAttention_0/query/kernel'].reshape(2, 64, 4, 16)
    src = F.write_npz(tmp_path, 'scan_heads.npz', arrays)
    _refused(capsys, src, tmp_path, f'{SCANNED}MultiHeadDotProductAttention_0/key/kernel')


def test_the_npz_reference_reads_the_heads_and_depth_from_the_file(tmp_path):
    """The reference takes each attention's head count and the depth from the archive's own shapes, not from the
    reader's model args, so it cannot share a miscount with our reader."""
    from porting.verification.npz_ref import npz_model
    from timm_vit_variants.checkpoints import open_checkpoint

    with open_checkpoint(REF / 'siglip_tiny.npz') as ckpt:
        args = ckpt.config
    arrays = _siglip_arrays()
    _regroup_heads(arrays, BLOCK1_ATTN, 8)
    _regroup_heads(arrays, MAP_ATTN, 2)
    regrouped = F.write_npz(tmp_path, 'regrouped.npz', arrays)
    x = torch.randn(2, 3, 56, 56, generator=torch.Generator().manual_seed(0))
    as_read, as_stored = npz_model(str(REF / 'siglip_tiny.npz'), args), npz_model(str(regrouped), args)
    assert as_stored.model.blocks[0].attn.num_heads == 4 and as_stored.model.blocks[1].attn.num_heads == 8
    assert as_stored.model.attn_pool.num_heads == 2
    with torch.no_grad():  # the same numbers under another head split are another network
        assert (as_read.model(x) - as_stored.model(x)).abs().max() > 1e-3
    arrays = _siglip_arrays('siglip_tiny_scanned.npz')
    name = f'{SCANNED}LayerNorm_0/scale'
    arrays[name] = np.concatenate([arrays[name], arrays[name][:1]])
    deeper = F.write_npz(tmp_path, 'deeper.npz', arrays)
    with pytest.raises(Exception, match='depth|index'):  # never a silent two-layer reference
        npz_model(str(deeper), args)


def _timm_folder_with(tmp_path, **changes) -> Path:
    folder = F.write_timm_folder(tmp_path)
    cfg = json.loads((folder / 'config.json').read_text())
    for key, value in changes.items():
        section, _, field = key.partition('.')
        cfg[section][field] = value
    (folder / 'config.json').write_text(json.dumps(cfg))
    return folder


@pytest.mark.parametrize('field, value, key', [
    ('depth', 3, 'model_args.depth'),
    ('depth', 1, 'model_args.depth'),
    ('embed_dim', 64, 'model_args.embed_dim'),
    ('mlp_ratio', 4.0, 'model_args.mlp_ratio'),
    ('qkv_bias', False, 'model_args.qkv_bias'),
])
def test_a_timm_config_that_contradicts_its_tensors_is_refused(tmp_path, capsys, field, value, key):
    folder = _timm_folder_with(tmp_path, **{f'model_args.{field}': value})
    _refused(capsys, folder, tmp_path, key)


# -- 2. preprocessing values, where they are read ---------------------------------------------------------------

def _hf_folder_with(tmp_path, **processor) -> Path:
    folder = F.write_hf_folder(tmp_path)
    base = {'do_resize': True, 'size': {'height': F.IMG, 'width': F.IMG}, 'resample': 2, 'image_mean': [0.5] * 3,
            'image_std': [0.5] * 3, 'image_processor_type': 'ViTImageProcessor'}
    (folder / 'preprocessor_config.json').write_text(json.dumps(dict(base, **processor)))
    return folder


@pytest.mark.parametrize('processor, key', [
    ({'image_mean': 'abc'}, 'image_mean'),
    ({'image_std': [0, 0, 0]}, 'image_std'),
    ({'image_std': [0.5, -0.5, 0.5]}, 'image_std'),
    ({'image_mean': [0.5, 0.5]}, 'image_mean'),
    ({'image_mean': [0.5, float('nan'), 0.5]}, 'image_mean'),
    ({'image_mean': [0.5, True, 0.5]}, 'image_mean'),
    ({'resample': 9}, 'resample'),
    ({'resample': 'bicubic'}, 'resample'),
])
def test_a_bad_value_in_preprocessor_config_json_is_refused(tmp_path, capsys, processor, key):
    folder = _hf_folder_with(tmp_path, **processor)
    line = _refused(capsys, folder, tmp_path, key)
    assert 'preprocessor_config.json' in line


def test_preprocessor_config_json_is_read_or_refused_never_skipped(tmp_path, capsys):
    folder = _hf_folder_with(tmp_path, image_mean=[0.1, 0.2, 0.3], image_std=[0.3, 0.2, 0.1], resample=3)
    assert main(['convert', str(folder), str(tmp_path / 'out')]) == 0, capsys.readouterr().err
    cfg = json.loads((tmp_path / 'out' / 'config.json').read_text())['pretrained_cfg']
    assert cfg['mean'] == [0.1, 0.2, 0.3] and cfg['std'] == [0.3, 0.2, 0.1] and cfg['interpolation'] == 'bicubic'
    (folder / 'preprocessor_config.json').write_text('{"image_mean": [0.5, 0.5,')  # it was skipped without a word
    code = main(['convert', str(folder), str(tmp_path / 'out2')])
    err = capsys.readouterr().err
    assert code == 1 and 'preprocessor_config.json' in err and 'unreadable JSON' in err


@pytest.mark.parametrize('field, value', [
    ('mean', 'abc'), ('mean', ['a', 'b', 'c']), ('std', [0, 0, 0]), ('std', [0.5, 0.5, float('inf')]),
    ('interpolation', 'cubic-ish'), ('interpolation', 3), ('crop_pct', 1.5), ('crop_pct', 0), ('crop_pct', 'big'),
    ('crop_mode', 'zoom'),
])
def test_a_bad_value_in_a_timm_pretrained_cfg_is_refused(tmp_path, capsys, field, value):
    folder = _timm_folder_with(tmp_path, **{f'pretrained_cfg.{field}': value})
    line = _refused(capsys, folder, tmp_path, f'pretrained_cfg.{field}')
    assert 'config.json' in line


def test_a_bad_value_in_a_timm_training_checkpoints_args_is_refused(tmp_path, capsys):
    model = F.timm_vit()
    args = argparse.Namespace(model='vit_tiny_patch16_224', model_kwargs=dict(
        embed_dim=F.WIDTH, num_heads=F.HEADS, depth=F.DEPTH, img_size=F.IMG, patch_size=F.PATCH,
        mlp_ratio=F.MLP / F.WIDTH, fc_norm=False), num_classes=F.CLASSES, mean=[0.1, 0.2, 0.3], std=[0.5, 0.0, 0.5],
        interpolation='bicubic', crop_pct=0.95)
    path = tmp_path / 'checkpoint.pth.tar'
    torch.save({'epoch': 3, 'state_dict': model.state_dict(), 'args': args}, path)
    line = _refused(capsys, path, tmp_path, 'args.std')
    assert 'checkpoint.pth.tar' in line


def test_a_zip_version_zipfile_cannot_read_is_one_error(tmp_path, capsys):
    """A central directory claiming zip version 6.4 (as a fuzzed byte once made it) is refused, not a raw error."""
    import io
    import struct
    buf = io.BytesIO()
    np.savez(buf, a=np.zeros(3, np.float32))
    data = bytearray(buf.getvalue())
    entry = data.rfind(b'PK\x01\x02')
    data[entry + 6:entry + 8] = struct.pack('<H', 64)
    src = tmp_path / 'v64.npz'
    src.write_bytes(bytes(data))
    code = main(['convert', str(src), str(tmp_path / 'out')])
    err = capsys.readouterr().err
    assert code == 1 and 'zip file version 6.4' in err and str(src) in err, err
    assert 'NotImplementedError' not in err and not (tmp_path / 'out').exists()
