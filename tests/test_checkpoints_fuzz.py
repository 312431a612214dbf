"""Property test: mutated checkpoints either load or raise ViTVariantsError, nothing else."""
import io
import os
import tempfile
import zipfile

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings, strategies as st

from timm_vit_variants import ViTVariantsError

from checkpoint_fixtures import jax_params, open_checkpoint, tiny_timm_vit

torch.set_num_threads(1)
BV = dict(class_token=True, no_embed_class=True, global_pool='token', fc_norm=False, act_layer='gelu_tanh')


def _serialise(kind, arrays):
    """Bytes of a checkpoint of `kind` holding `arrays` (numpy for npz, torch otherwise)."""
    buffer = io.BytesIO()
    if kind == 'npz':
        np.savez(buffer, **arrays)
        return buffer.getvalue()
    tensors = {k: torch.as_tensor(np.ascontiguousarray(v)) for k, v in arrays.items()}
    if kind == 'safetensors':
        from safetensors.torch import save
        return save(tensors)
    torch.save(tensors, buffer)
    return buffer.getvalue()


@pytest.fixture(scope='module')
def fixtures():
    model = tiny_timm_vit(depth=1, **BV)
    npz = jax_params(model, 'bigvision', scan=False)
    state = {k: v.numpy() for k, v in model.state_dict().items()}
    return {'npz': npz, 'safetensors': state, 'pth': state}


mutations = st.one_of(
    st.tuples(st.just('truncate'), st.floats(0, 1)),
    st.tuples(st.just('flip'), st.lists(st.tuples(st.floats(0, 1), st.integers(1, 255)), min_size=1, max_size=8)),
    st.tuples(st.just('drop'), st.integers(0, 10_000)),
    st.tuples(st.just('rename'), st.integers(0, 10_000), st.sampled_from(['x', 'blocks.7.norm1.weight', 'cls/', ''])),
    st.tuples(st.just('reshape'), st.integers(0, 10_000), st.sampled_from([(-1,), (1, -1), (2, -1)])),
    st.tuples(st.just('resize'), st.integers(0, 10_000), st.integers(0, 3)),
    # claims that cost memory or time if believed: a huge leading dimension, NaN values
    st.tuples(st.just('grow'), st.integers(0, 10_000), st.sampled_from([300, 70_000, 200_000])),
    st.tuples(st.just('nan'), st.integers(0, 10_000)),
    # a zip directory entry claiming far more bytes than are stored
    st.tuples(st.just('claim'), st.integers(0, 10_000), st.integers(33, 44)),
)


def _mutate_arrays(arrays, mutation):
    arrays = dict(arrays)
    names = sorted(arrays)
    kind, index = mutation[0], mutation[1] % len(names)
    name = names[index]
    if kind == 'drop':
        del arrays[name]
    elif kind == 'rename':
        arrays[mutation[2] or name + '_'] = arrays.pop(name)
    elif kind == 'reshape':
        value = arrays[name]
        if value.size % 2 == 0 or mutation[2] != (2, -1):
            arrays[name] = value.reshape(mutation[2])
    elif kind == 'grow':  # a leading dimension far beyond the model's (e.g. a depth or class count)
        arrays[name] = np.zeros((mutation[2], 1), np.float32)
    elif kind == 'nan':
        value = np.array(arrays[name], dtype=np.float32, copy=True)
        value.reshape(-1)[0] = np.nan
        arrays[name] = value
    elif kind == 'resize':
        value = arrays[name].reshape(-1)
        arrays[name] = value[:mutation[2]] if mutation[2] < value.size else np.concatenate([value, value])
    return arrays


def _claim(data, mutation):
    """Rewrite one npz member's zip directory entry to claim 2**bits bytes."""
    buffer = io.BytesIO(data)
    with zipfile.ZipFile(buffer, 'a') as archive:
        infos = archive.infolist()
        info = infos[mutation[1] % len(infos)]
        info.file_size = info.compress_size = 1 << mutation[2]
        archive._didModify = True
    return buffer.getvalue()


def _mutate_bytes(data, mutation):
    if mutation[0] == 'claim':
        return _claim(data, mutation)
    if mutation[0] == 'truncate':
        return data[:int(len(data) * mutation[1])]
    data = bytearray(data)
    for where, xor in mutation[1]:
        data[min(int(where * len(data)), len(data) - 1)] ^= xor
    return bytes(data)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(['npz', 'safetensors', 'pth']), mutation=mutations)
@example(kind='safetensors', mutation=('resize', 505, 0))  # a tensor emptied: a config part refuses the width
def test_mutated_checkpoints_raise_only_our_error(fixtures, kind, mutation):
    if mutation[0] == 'claim' and kind != 'npz':
        mutation = ('truncate', 0.9)
    if mutation[0] in ('truncate', 'flip', 'claim'):
        data = _mutate_bytes(_serialise(kind, fixtures[kind]), mutation)
    else:
        data = _serialise(kind, _mutate_arrays(fixtures[kind], mutation))
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, f'ckpt.{kind}')
        with open(path, 'wb') as fp:
            fp.write(data)
        try:
            with open_checkpoint(path, **({} if kind == 'npz' else {'num_heads': 4})) as ckpt:
                ckpt.inventory()
                for key, tensor in ckpt.iter_tensors():
                    assert tensor.dtype == torch.float32 and key in ckpt.tensor_shapes
        except ViTVariantsError as e:
            assert path in str(e)
