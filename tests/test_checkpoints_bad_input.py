"""Bad checkpoints of every kind: only ViTVariantsError escapes, naming the file (and key), and no pickle runs."""
import json
import os
import pickle
import zipfile

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from timm_vit_variants import SimpleVisionTransformer, ViTVariantsError
from timm_vit_variants.checkpoints import detect_format, load_into_model

from checkpoint_fixtures import jax_params, open_checkpoint, tiny_timm_vit, write_npz_at as write_npz


torch.set_num_threads(1)
BV_GAP = dict(class_token=False, no_embed_class=True, global_pool='avg', fc_norm=False, act_layer='gelu_tanh')


def consume(path, **hints):
    """Open, list and convert every tensor, as `vit-port convert` would."""
    with open_checkpoint(path, **hints) as ckpt:
        ckpt.inventory()
        for _ in ckpt.iter_tensors():
            pass


def expect_error(path, key=None, match=None, **hints):
    with pytest.raises(ViTVariantsError, match=match) as info:
        consume(path, **hints)
    message = str(info.value)
    assert str(path) in message or os.path.dirname(str(path)) in message, message
    if key is not None:
        assert key in message, message
    return message


@pytest.fixture()
def bv_params():
    return jax_params(tiny_timm_vit(**BV_GAP), 'bigvision')


@pytest.fixture()
def timm_state():
    return tiny_timm_vit(class_token=True).state_dict()


def _truncate(path, fraction=0.5):
    data = open(path, 'rb').read()
    with open(path, 'wb') as fp:
        fp.write(data[:int(len(data) * fraction)])
    return path


def test_truncated_npz(tmp_path, bv_params):
    expect_error(_truncate(write_npz(tmp_path / 'a.npz', bv_params)), match='truncated or corrupt')


def test_truncated_safetensors(tmp_path, timm_state):
    path = tmp_path / 'a.safetensors'
    save_file(timm_state, str(path))
    expect_error(_truncate(path), match='safetensors', num_heads=4)


@pytest.mark.parametrize('legacy', [False, True])
def test_truncated_pth(tmp_path, timm_state, legacy):
    path = tmp_path / 'a.pth'
    torch.save(timm_state, path, _use_new_zipfile_serialization=not legacy)
    expect_error(_truncate(path), num_heads=4)


def test_npz_member_truncated_inside_intact_zip(tmp_path, bv_params):
    path = tmp_path / 'a.npz'
    with zipfile.ZipFile(path, 'w') as archive:
        for key, value in bv_params.items():
            with archive.open(key + '.npy', 'w') as fp:
                if key == 'head/kernel':  # the header promises (32, 5) floats, the member holds 4
                    np.lib.format.write_array_header_1_0(
                        fp, {'descr': '<f4', 'fortran_order': False, 'shape': (32, 5)})
                    fp.write(b'\0' * 16)
                else:
                    np.lib.format.write_array(fp, value, allow_pickle=False)
    expect_error(path, key='head/kernel', match='truncated or corrupt')


@pytest.mark.parametrize('fmt', ['npz', 'safetensors'])
def test_wrong_shape(tmp_path, bv_params, timm_state, fmt):
    if fmt == 'npz':
        bv_params['Transformer/encoderblock_1/MlpBlock_0/Dense_1/bias'] = np.zeros(31, np.float32)
        path = write_npz(tmp_path / 'a.npz', bv_params)
        message = expect_error(path, key='Transformer/encoderblock_1/MlpBlock_0/Dense_1/bias')
        assert '(31,) vs (32,)' in message
    else:
        timm_state['blocks.1.attn.proj.weight'] = torch.zeros(32, 30)
        path = tmp_path / 'a.safetensors'
        save_file(timm_state, str(path))
        message = expect_error(path, key='blocks.1.attn.proj.weight', num_heads=4)
        assert '(32, 30) vs (32, 32)' in message


def test_missing_and_unknown_keys(tmp_path, bv_params, timm_state):
    params = dict(bv_params)
    del params['Transformer/encoderblock_1/LayerNorm_1/scale']
    expect_error(write_npz(tmp_path / 'a.npz', params), key='Transformer/encoderblock_1/LayerNorm_1/scale',
                 match='missing')
    params = dict(bv_params, **{'Transformer/encoderblock_0/Extra_0/kernel': np.zeros((2, 2), np.float32)})
    expect_error(write_npz(tmp_path / 'b.npz', params), key='Extra_0', match='unknown')
    state = dict(timm_state)
    del state['norm.bias']
    save_file(state, str(tmp_path / 'c.safetensors'))
    expect_error(tmp_path / 'c.safetensors', key='norm.bias', match='missing', num_heads=4)
    save_file(dict(timm_state, mystery=torch.zeros(2)), str(tmp_path / 'd.safetensors'))
    expect_error(tmp_path / 'd.safetensors', key='mystery', match='unknown', num_heads=4)


def test_inconsistent_depth(tmp_path, bv_params):
    params = {k: v for k, v in bv_params.items() if not k.startswith('Transformer/encoderblock_0/')}
    expect_error(write_npz(tmp_path / 'a.npz', params), key='encoderblock_0', match='inconsistent depth')
    scanned = jax_params(tiny_timm_vit(**BV_GAP), 'bigvision', scan=True)
    scanned['Transformer/encoderblock/LayerNorm_1/bias'] = scanned['Transformer/encoderblock/LayerNorm_1/bias'][:1]
    expect_error(write_npz(tmp_path / 'b.npz', scanned), key='Transformer/encoderblock/LayerNorm_1/bias')


def test_map_head_and_non_vit_npz(tmp_path, bv_params):
    params = dict(bv_params, **{'MAPHead_0/probe': np.zeros((1, 1, 32), np.float32)})
    expect_error(write_npz(tmp_path / 'map.npz', params), key='MAPHead_0', match='map')
    np.savez(tmp_path / 'other.npz', weights=np.zeros(3), bias=np.ones(2))
    with pytest.raises(ViTVariantsError, match='without ViT encoder blocks'):
        detect_format(tmp_path / 'other.npz')
    with pytest.raises(ViTVariantsError, match='embedding/kernel'):
        open_checkpoint(tmp_path / 'other.npz', fmt='bigvision')


class _Exploit:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f'touch {self.marker}',)


@pytest.mark.filterwarnings('ignore:Detected pickle protocol')  # torch's note on the raw pickle
@pytest.mark.parametrize('kind', ['zip', 'legacy', 'raw_pickle', 'npz_object'])
def test_malicious_pickle_never_runs(tmp_path, kind):
    marker = tmp_path / 'pwned'
    payload = {'patch_embed.proj.weight': _Exploit(marker)}
    if kind == 'npz_object':
        path = tmp_path / 'evil.npz'
        np.savez(path, **{'embedding/kernel': np.array([_Exploit(marker)], dtype=object)})
    elif kind == 'raw_pickle':
        path = tmp_path / 'evil.pth'
        with open(path, 'wb') as fp:
            pickle.dump(payload, fp)
    else:
        path = tmp_path / 'evil.pth'
        torch.save(payload, path, _use_new_zipfile_serialization=kind == 'zip')
    assert not marker.exists()
    with pytest.raises(ViTVariantsError) as info:
        consume(path, **({} if kind == 'npz_object' else {'num_heads': 4}))
    assert str(path) in str(info.value)
    with pytest.raises(ViTVariantsError):
        detect_format(path)
    model = SimpleVisionTransformer(img_size=16, patch_size=4, embed_dim=32, depth=1, num_heads=4)
    with pytest.raises(ViTVariantsError):
        load_into_model(model, path)
    assert not marker.exists(), 'a pickle executed code'


def test_missing_empty_and_foreign_files(tmp_path, timm_state):
    expect_error(tmp_path / 'nope.npz')
    (tmp_path / 'empty.pth').write_bytes(b'')
    expect_error(tmp_path / 'empty.pth')
    (tmp_path / 'text.bin').write_text('hello world, not weights')
    expect_error(tmp_path / 'text.bin')
    save_file({'conv.weight': torch.zeros(2, 2)}, str(tmp_path / 'cnn.safetensors'))
    expect_error(tmp_path / 'cnn.safetensors', match='patch embedding')
    torch.save({'state_dict': {'x': 1}}, tmp_path / 'nontensor.pth')
    expect_error(tmp_path / 'nontensor.pth', key='x', match='not a tensor')


def test_bad_hf_folders(tmp_path):
    transformers = pytest.importorskip('transformers')
    cfg = transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                 image_size=16, patch_size=4)
    transformers.ViTForImageClassification(cfg).save_pretrained(tmp_path / 'hf')
    config_path = tmp_path / 'hf' / 'config.json'
    good = json.loads(config_path.read_text())
    config_path.write_text('{"model_type": "vit", ')
    with pytest.raises(ViTVariantsError, match='config.json'):
        open_checkpoint(tmp_path / 'hf', fmt='hf')
    config_path.write_text(json.dumps(dict(good, hidden_act='relu')))
    with pytest.raises(ViTVariantsError, match='hidden_act'):
        open_checkpoint(tmp_path / 'hf')
    config_path.write_text(json.dumps(dict(good, num_hidden_layers=1)))
    with pytest.raises(ViTVariantsError, match='inconsistent depth'):
        open_checkpoint(tmp_path / 'hf')
    config_path.write_text(json.dumps(dict(good, model_type='deit')))
    with pytest.raises(ViTVariantsError, match='deit'):
        open_checkpoint(tmp_path / 'hf')
    config_path.unlink()
    with pytest.raises(ViTVariantsError, match='config.json'):
        open_checkpoint(tmp_path / 'hf', fmt='hf')


# -- hostile claims: refused from headers and configs, before anything is allocated ---------------------

def test_devices_and_fifos_are_never_read(tmp_path):
    fifo = tmp_path / 'weights.safetensors'
    os.mkfifo(fifo)
    for path, fmt in ((fifo, None), (fifo, 'timm'), ('/dev/zero', 'timm'), ('/dev/zero', 'bigvision')):
        with pytest.raises(ViTVariantsError, match='not a regular file'):
            open_checkpoint(path, fmt)


def test_limits_bound_every_claimed_dimension(tmp_path, bv_params, timm_state):
    from timm_vit_variants.limits import Limits

    npz = write_npz(tmp_path / 'a.npz', bv_params)
    expect_error(npz, key='embedding/kernel', match='width 32 exceeds the limit of 16', limits=Limits(width=16))
    expect_error(npz, match='depth 2 exceeds the limit of 1', limits=Limits(depth=1))
    expect_error(npz, key='head/kernel', match='classes 5 exceeds', limits=Limits(classes=4))
    expect_error(npz, match='tensor_bytes', limits=Limits(tensor_bytes=1000))
    save_file(timm_state, str(tmp_path / 'b.safetensors'))
    expect_error(tmp_path / 'b.safetensors', key='mlp.fc1', match='mlp 64 exceeds', num_heads=4,
                 limits=Limits(mlp=63))


def test_config_claims_and_loading_arguments_are_refused(tmp_path):
    import timm
    from timm.models import save_for_hf

    model = timm.create_model('vit_tiny_patch16_224', img_size=16, patch_size=4, embed_dim=32, depth=1, num_heads=2,
                              num_classes=3)
    folder = tmp_path / 'folder'
    save_for_hf(model, str(folder), safe_serialization=True)
    config = json.loads((folder / 'config.json').read_text())
    for change, match in (
            ({'architecture': 'hf-hub:org/model'}, 'not a registered timm model name'),
            ({'model_args': {'checkpoint_path': '/etc/passwd'}}, 'may not name files'),
            ({'model_args': {'depth': 10 ** 6}}, 'depth 1000000 exceeds'),
            ({'model_args': {'img_size': 10 ** 6}}, 'img_size 1000000 exceeds'),
            ({'model_args': {'embed_dim': 'wide'}}, 'expected a number')):
        (folder / 'config.json').write_text(json.dumps(dict(config, **change)))
        expect_error(folder, match=match)
    (folder / 'config.json').write_text('[' * 50_000 + ']' * 50_000)
    expect_error(folder, match='nests too deeply')
    (folder / 'config.json').write_text(' ' * (17 << 20))
    expect_error(folder, match='too large for a JSON config')
