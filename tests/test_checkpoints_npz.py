"""big_vision and vit_jax .npz readers against timm's own npz loader and timm models.

Every fixture is first loaded by timm's ``VisionTransformer.load_pretrained`` to prove it is a
valid checkpoint of the published layout; our reader must then reproduce timm's logits.
"""
from pathlib import Path

import numpy as np
import pytest
import timm
import torch

from timm_vit_variants import SimpleVisionTransformer
from timm_vit_variants.checkpoints import detect_format, load_into_model

from checkpoint_fixtures import (
    jax_params, np_posemb_sincos_2d, open_checkpoint, round_to_bf16, tiny_timm_vit, write_npz_at as write_npz)

TOL = 1e-5
torch.set_num_threads(1)


def _images(size=16, seed=1):
    return torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(seed))


def _assert_timm_loads(reference, npz_path, **timm_kwargs):
    """timm's own npz loader must rebuild `reference` exactly from the fixture."""
    fresh = tiny_timm_vit(seed=123, **timm_kwargs)
    fresh.load_pretrained(npz_path)
    ref_state = reference.state_dict()
    for key, value in fresh.state_dict().items():
        torch.testing.assert_close(value, ref_state[key], rtol=0, atol=0, msg=key)


def _ours(npz_path, **hints):
    with open_checkpoint(npz_path, **hints) as ckpt:
        model = SimpleVisionTransformer(**ckpt.model_args, weight_init='skip').eval()
        model.load_state_dict(ckpt.state_dict(), strict=True)
        return model, ckpt


def _max_diff(a, b):
    return (a - b).abs().max().item()


BV_GAP = dict(class_token=False, no_embed_class=True, global_pool='avg', fc_norm=False, act_layer='gelu_tanh')
BV_TOK = dict(class_token=True, no_embed_class=True, global_pool='token', fc_norm=False, act_layer='gelu_tanh')
VITJAX = dict(class_token=True, global_pool='token', act_layer='gelu_tanh')


@pytest.mark.parametrize('prefix', ['', 'params/', 'opt/target/'])
@pytest.mark.parametrize('scan', [False, True])
def test_bigvision_learned_posemb(tmp_path, prefix, scan):
    ref = tiny_timm_vit(**BV_GAP)
    path = write_npz(tmp_path / 'bv.npz', jax_params(ref, 'bigvision', scan=scan), prefix=prefix)
    _assert_timm_loads(ref, path, **BV_GAP)
    assert detect_format(path) == 'bigvision'
    model, ckpt = _ours(path)
    assert ckpt.model_args['pos_embed'] == 'learn' and not ckpt.model_args['pos_embed_cls_slot']
    assert ckpt.model_args['global_pool'] == 'avg' and ckpt.grid == (4, 4)
    x = _images()
    with torch.no_grad():
        assert _max_diff(model(x), ref(x)) <= TOL


def test_bigvision_token_pool_without_cls_slot(tmp_path):
    ref = tiny_timm_vit(**BV_TOK)
    path = write_npz(tmp_path / 'bv_tok.npz', jax_params(ref, 'bigvision'), prefix='params/')
    _assert_timm_loads(ref, path, **BV_TOK)
    model, ckpt = _ours(path)
    assert ckpt.model_args['class_token'] and not ckpt.model_args['pos_embed_cls_slot']
    assert ckpt.model_args['global_pool'] == 'token'
    x = _images()
    with torch.no_grad():
        assert _max_diff(model(x), ref(x)) <= TOL


@pytest.mark.parametrize('scan', [False, True])
def test_bigvision_sincos(tmp_path, scan):
    ref = tiny_timm_vit(**BV_GAP)
    with torch.no_grad():
        ref.pos_embed.copy_(torch.from_numpy(np_posemb_sincos_2d(4, 4, 32)))
    params = jax_params(ref, 'bigvision', scan=scan)
    # With the table stored, timm's loader accepts the archive: proof the rest is valid.
    _assert_timm_loads(ref, write_npz(tmp_path / 'with_table.npz', params, prefix='params/'), **BV_GAP)
    del params['pos_embedding']  # a real sin-cos checkpoint stores no table
    path = write_npz(tmp_path / 'sincos.npz', params, prefix='params/')
    model, ckpt = _ours(path, img_size=16)
    assert ckpt.model_args['pos_embed'] == 'sincos' and ckpt.grid is None
    assert 'pos_embed' not in ckpt.tensor_shapes
    x = _images()
    with torch.no_grad():
        diff = _max_diff(model(x), ref(x))
    assert diff <= TOL, diff
    # Other resolutions: the sin-cos table is regenerated, matching a timm model built at that grid.
    big = tiny_timm_vit(img_size=24, **BV_GAP)
    big.load_state_dict({k: v for k, v in ref.state_dict().items() if k != 'pos_embed'}, strict=False)
    with torch.no_grad():
        big.pos_embed.copy_(torch.from_numpy(np_posemb_sincos_2d(6, 6, 32)))
        assert _max_diff(model(_images(24)), big(_images(24))) <= TOL


def test_bigvision_bf16_void_storage(tmp_path):
    ref = round_to_bf16(tiny_timm_vit(**BV_GAP))
    params = jax_params(ref, 'bigvision')
    _assert_timm_loads(ref, write_npz(tmp_path / 'f32.npz', params), **BV_GAP)
    path = write_npz(tmp_path / 'bf16.npz', params, bf16=True)
    with np.load(path, allow_pickle=False) as raw:
        assert raw['embedding/kernel'].dtype == np.dtype('V2')
    model, ckpt = _ours(path)
    assert {dtype for _, _, dtype in ckpt.inventory()} == {'bfloat16'}
    x = _images()
    with torch.no_grad():
        assert _max_diff(model(x), ref(x)) <= TOL


def test_bigvision_pre_logits(tmp_path):
    """timm has no pre-logits layer: compare features with timm and logits with a manual tanh(Linear) + head."""
    ref = tiny_timm_vit(num_classes=0, **BV_GAP)
    params = jax_params(ref, 'bigvision')
    path_timm = write_npz(tmp_path / 'nohead.npz', params)
    _assert_timm_loads(ref, path_timm, num_classes=0, **BV_GAP)
    rng = np.random.default_rng(0)
    extra = {
        'pre_logits/kernel': rng.normal(size=(32, 24)).astype(np.float32),
        'pre_logits/bias': rng.normal(size=(24,)).astype(np.float32),
        'head/kernel': rng.normal(size=(24, 7)).astype(np.float32),
        'head/bias': rng.normal(size=(7,)).astype(np.float32),
    }
    path = write_npz(tmp_path / 'prelogits.npz', params, extra=extra)
    model, ckpt = _ours(path)
    assert ckpt.model_args['rep_size'] == 24 and ckpt.model_args['num_classes'] == 7
    x = _images()
    with torch.no_grad():
        pooled = ref(x)  # timm: norm every token, then mean (num_classes=0 -> pooled features)
        assert _max_diff(model.forward_head(model.forward_features(x), pre_logits=True),
                         torch.tanh(pooled @ torch.from_numpy(extra['pre_logits/kernel'])
                                    + torch.from_numpy(extra['pre_logits/bias']))) <= TOL
        expected = torch.tanh(pooled @ torch.from_numpy(extra['pre_logits/kernel'])
                              + torch.from_numpy(extra['pre_logits/bias'])) \
            @ torch.from_numpy(extra['head/kernel']) + torch.from_numpy(extra['head/bias'])
        assert _max_diff(model(x), expected) <= TOL


@pytest.mark.parametrize('scan', [False, True])
def test_vitjax_cls_slot(tmp_path, scan):
    ref = tiny_timm_vit(**VITJAX)
    params = jax_params(ref, 'vitjax', scan=scan)
    path = write_npz(tmp_path / 'augreg.npz', params)
    if not scan:  # timm reads scanned archives only as big_vision
        _assert_timm_loads(ref, path, **VITJAX)
    assert detect_format(path) == 'vitjax'
    model, ckpt = _ours(path)
    args = ckpt.model_args
    assert args['pos_embed_cls_slot'] and args['class_token'] and args['global_pool'] == 'token'
    assert args['act_layer'] == 'gelu_tanh' and args['pos_embed_resample'] == 'bigvision'
    x = _images()
    with torch.no_grad():
        assert _max_diff(model(x), ref(x)) <= TOL


def test_inventory_reads_headers_only(tmp_path):
    ref = tiny_timm_vit(**VITJAX)
    path = write_npz(tmp_path / 'augreg.npz', jax_params(ref, 'vitjax'))
    with open_checkpoint(path) as ckpt:
        inv = {name: (shape, dtype) for name, shape, dtype in ckpt.inventory()}
    assert inv['Transformer/encoderblock_1/MultiHeadDotProductAttention_1/query/kernel'] == ((32, 4, 8), 'float32')
    assert inv['embedding/kernel'] == ((4, 4, 3, 32), 'float32')


def test_load_into_model_pi_resize_and_resample(tmp_path):
    """Patch 4 -> 8 and grid 4x4 -> 2x3: PI-resized kernel, bilinear align_corners table (scipy zoom order 1)."""
    scipy_ndimage = pytest.importorskip('scipy.ndimage')
    ref = tiny_timm_vit(**VITJAX)
    path = write_npz(tmp_path / 'augreg.npz', jax_params(ref, 'vitjax'))
    with open_checkpoint(path) as ckpt:
        args = dict(ckpt.model_args, patch_size=8, img_size=(16, 24))
    model = SimpleVisionTransformer(**args)
    load_into_model(model, path)
    table = ref.pos_embed.detach().numpy()[0]
    grid = table[1:].reshape(4, 4, 32)
    zoomed = scipy_ndimage.zoom(grid, (2 / 4, 3 / 4, 1), order=1)
    assert model.patch_embed.grid_size == (2, 3)
    np.testing.assert_allclose(model.pos_embed.detach().numpy()[0, 1:], zoomed.reshape(6, 32), atol=1e-6)
    np.testing.assert_array_equal(model.pos_embed.detach().numpy()[0, 0], table[0])
    from timm.layers import resample_patch_embed
    torch.testing.assert_close(model.patch_embed.proj.weight,
                               resample_patch_embed(ref.patch_embed.proj.weight.detach(), [8, 8],
                                                    interpolation='bilinear', antialias=False))


def test_timm_create_model_pretrained_npz(tmp_path):
    """simple_vit_small_patch16_224 reads a big_vision S/16 npz (gap, sin-cos, rep 384) exactly; patch 8 PI-resizes."""
    src = timm.create_model('simple_vit_small_patch16_224', depth=1, num_classes=3, weight_init='skip')
    from checkpoint_fixtures import randomize
    randomize(src)
    # A big_vision-named archive written from the source model through timm-layout tensors.
    timm_twin = tiny_timm_vit(img_size=224, patch_size=16, embed_dim=384, depth=1, num_heads=6, mlp_ratio=4.0,
                              num_classes=0, **BV_GAP)
    timm_twin.load_state_dict({k: v for k, v in src.state_dict().items()
                               if not k.startswith(('head', 'pre_logits'))}, strict=False)
    params = jax_params(timm_twin, 'bigvision', with_pos=False)  # sin-cos: no table stored
    params['pre_logits/kernel'] = src.pre_logits.fc.weight.detach().numpy().T.copy()
    params['pre_logits/bias'] = src.pre_logits.fc.bias.detach().numpy()
    params['head/kernel'] = src.head.weight.detach().numpy().T.copy()
    params['head/bias'] = src.head.bias.detach().numpy()
    path = write_npz(tmp_path / 'vit_s16.npz', params, prefix='params/')
    model = timm.create_model('simple_vit_small_patch16_224', depth=1, num_classes=3, pretrained=True,
                              pretrained_cfg_overlay=dict(file=path)).eval()
    for key, value in src.state_dict().items():
        torch.testing.assert_close(model.state_dict()[key], value, rtol=0, atol=0, msg=key)
    flex = timm.create_model('simple_vit_small_patch16_224', depth=1, num_classes=3, patch_size=8, pretrained=True,
                             pretrained_cfg_overlay=dict(file=path))
    assert flex.patch_embed.proj.weight.shape[-2:] == (8, 8)
    from timm.layers import resample_patch_embed
    torch.testing.assert_close(flex.patch_embed.proj.weight, resample_patch_embed(
        src.patch_embed.proj.weight.detach(), [8, 8], interpolation='bilinear', antialias=False))
    # A different class count keeps the model's own (zero-initialised) head, as timm does.
    other = timm.create_model('simple_vit_small_patch16_224', depth=1, num_classes=10, pretrained=True,
                              pretrained_cfg_overlay=dict(file=path))
    assert torch.count_nonzero(other.head.weight) == 0
    torch.testing.assert_close(other.blocks[0].attn.qkv.weight, src.blocks[0].attn.qkv.weight)


def test_bigvision_non_square_grid_resampling_matches_scipy_zoom(tmp_path):
    """A 4x3 learned table (needs --img-size to be read) resampled to 6x5 equals scipy.ndimage.zoom(order=1)."""
    scipy_ndimage = pytest.importorskip('scipy.ndimage')
    ref = tiny_timm_vit(img_size=(16, 12), **BV_GAP)
    path = write_npz(tmp_path / 'bv.npz', jax_params(ref, 'bigvision'), prefix='params/')
    _assert_timm_loads(ref, path, img_size=(16, 12), **BV_GAP)
    from timm_vit_variants import ViTVariantsError
    with pytest.raises(ViTVariantsError, match='the source image size is needed') as refused:
        open_checkpoint(path)
    assert refused.value.needs == 'source_img_size'  # the plugin names the concept; the CLI adds its flag
    model, ckpt = _ours(path, img_size=(16, 12))
    assert ckpt.grid == (4, 3) and ckpt.model_args['img_size'] == (16, 12)
    x = _images()[..., :12]
    with torch.no_grad():
        assert _max_diff(model(x), ref(x)) <= TOL
    with open_checkpoint(path, img_size=(16, 12)) as ckpt:
        target = SimpleVisionTransformer(**dict(ckpt.model_args, img_size=(24, 20)))
    load_into_model(target, path, img_size=(16, 12))  # the source size is a hint: the table alone is ambiguous
    grid = ref.pos_embed.detach().numpy()[0].reshape(4, 3, 32)
    zoomed = scipy_ndimage.zoom(grid, (6 / 4, 5 / 3, 1), order=1)
    np.testing.assert_allclose(target.pos_embed.detach().numpy()[0], zoomed.reshape(30, 32), atol=1e-6)


def test_vitjax_gap_classifier_without_cls(tmp_path):
    """vit_jax classifier='gap': no cls token, table without a slot, mean of encoder_norm outputs."""
    kwargs = dict(class_token=False, global_pool='avg', fc_norm=False, act_layer='gelu_tanh')
    ref = tiny_timm_vit(**kwargs)
    path = write_npz(tmp_path / 'gap.npz', jax_params(ref, 'vitjax'))
    _assert_timm_loads(ref, path, **kwargs)
    model, ckpt = _ours(path)
    assert not ckpt.model_args['class_token'] and ckpt.model_args['global_pool'] == 'avg'
    x = _images()
    with torch.no_grad():
        assert _max_diff(model(x), ref(x)) <= TOL


@pytest.mark.parametrize('scan', [False, True])
def test_iter_tensors_streams_each_array_once(tmp_path, monkeypatch, scan):
    """Opening reads headers only; iterating views every stored array in place (nothing inflated), each array
    once, or once per block for the stacked arrays of a scanned layout."""
    from timm_vit_variants.checkpoints.stores import NpzStore
    ref = tiny_timm_vit(depth=3, **VITJAX)
    path = write_npz(tmp_path / 'a.npz', jax_params(ref, 'vitjax', scan=scan))
    reads, inflated = [], []
    original = NpzStore.tensor
    monkeypatch.setattr(NpzStore, 'tensor', lambda self, key: reads.append(key) or original(self, key))
    monkeypatch.setattr(NpzStore, '_inflate', lambda self, *a: inflated.append(a[0]))
    with open_checkpoint(path) as ckpt:
        assert reads == []  # opening reads headers only
        keys = [key for key, _ in ckpt.iter_tensors()]
        raw = [name for name, _, _ in ckpt.inventory()]
    assert inflated == [] and set(reads) == set(raw) and len(keys) == len(ckpt.tensor_shapes)
    for name in raw:
        assert reads.count(name) == (3 if scan and name.startswith('Transformer/encoderblock/') else 1), name


def test_registered_bv_tag_downloads_through_timm_url_path(tmp_path, monkeypatch):
    """The bv_i1k tags use timm's url + custom_load path: download into the hub cache, then our reader."""
    src = timm.create_model('simple_vit_small_patch16_224', depth=1, weight_init='skip')
    from checkpoint_fixtures import randomize
    randomize(src)
    timm_twin = tiny_timm_vit(img_size=224, patch_size=16, embed_dim=384, depth=1, num_heads=6, mlp_ratio=4.0,
                              num_classes=0, **BV_GAP)
    timm_twin.load_state_dict({k: v for k, v in src.state_dict().items()
                               if not k.startswith(('head', 'pre_logits'))}, strict=False)
    params = jax_params(timm_twin, 'bigvision', with_pos=False)
    params['pre_logits/kernel'] = src.pre_logits.fc.weight.detach().numpy().T.copy()
    params['pre_logits/bias'] = src.pre_logits.fc.bias.detach().numpy()
    params['head/kernel'] = src.head.weight.detach().numpy().T.copy()
    params['head/bias'] = src.head.bias.detach().numpy()
    path = write_npz(tmp_path / 'vit_s16_i1k_300ep.npz', params)
    cfg = timm.models.get_pretrained_cfg('simple_vit_small_patch16_224.bv_i1k_300ep')
    assert cfg.custom_load and cfg.url == 'https://storage.googleapis.com/big_vision/vit_s16_i1k_300ep.npz'
    monkeypatch.setattr(torch.hub, '_hub_dir', str(tmp_path / 'hub'))  # restored after the test
    model = timm.create_model('simple_vit_small_patch16_224.bv_i1k_300ep', depth=1, pretrained=True,
                              pretrained_cfg_overlay=dict(url=Path(path).as_uri())).eval()
    assert (tmp_path / 'hub' / 'checkpoints' / 'vit_s16_i1k_300ep.npz').is_file()  # went through the download cache
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        torch.testing.assert_close(model(x), src.eval()(x), rtol=0, atol=1e-5)
