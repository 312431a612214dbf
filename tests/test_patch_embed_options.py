"""The input-side options: patch_embed, patch_norm, pos_embed 'cpe' (alone and with a table) and grid_mode.

Every option goes through the same checks, on tiny models: forward and backward at square,
non-square and non-divisible sizes; set_input_size; the state dict through a vit-port folder, a
``local-dir:`` load and ``load_pretrained``; timm's interface (features_only, forward_intermediates,
FX, TorchScript). Then what each option promises: 'linear' is 'conv', 'pre' is LayerNorm on
unfolded patches, 'overlap' keeps the grid, 'pool' keeps the token count, CPE adapts, and the
impossible combinations refuse with a reason.
"""
import copy
import functools
import json

import pytest
import torch
import torch.nn.functional as F
import timm
from timm.layers import resample_patch_embed
from timm.models import get_notrace_functions, get_notrace_modules

import timm_vit_variants  # noqa: F401
from model_probes import embedded, load_like_user
from timm_vit_variants.config import grid_for
from timm_vit_variants.parts import Cpe, SinCos
from timm_vit_variants.posemb import SinCos2dPosEmbed
from porting.hub_folder import read_config, save_pretrained_folder
from timm_vit_variants import SimpleViTConfig, ViTVariantsError

NAME = 'simple_vit_tiny'
TINY = dict(embed_dim=32, depth=2, num_heads=2, mlp_dim=64, num_classes=5, img_size=32, patch_size=8)
OPTIONS = {
    'conv': {},
    'linear': dict(patch_embed='linear'),
    'conv_stem': dict(patch_embed='conv_stem'),
    'overlap': dict(patch_embed='overlap'),
    'mlp': dict(patch_embed='mlp'),
    'pre': dict(patch_norm='pre'),
    'post': dict(patch_norm='post'),
    'dual': dict(patch_norm='dual'),
    'mlp_dual': dict(patch_embed='mlp', patch_norm='dual'),
    'stem_post': dict(patch_embed='conv_stem', patch_norm='post'),
    'cpe': dict(pos_embed='cpe'),
    'sincos_cpe': dict(pos_embed='sincos+cpe', class_token=True, global_pool='token'),
    'learn_cpe': dict(pos_embed='learn+cpe', class_token=True, pos_embed_cls_slot=True, global_pool='token'),
    'pool': dict(grid_mode='pool'),
    'pool_learn': dict(grid_mode='pool', pos_embed='learn', patch_embed='overlap'),
    'strict': dict(grid_mode='strict'),
    'crop': dict(grid_mode='crop'),
    'crop_linear_pre': dict(grid_mode='crop', patch_embed='linear', patch_norm='pre'),
}
# Options whose kernel cannot follow a patch-size change, and the words of the reason.
FIXED_PATCH = {'conv_stem': 'stride-2', 'overlap': 'wider than the stride', 'pre': 'one weight per pixel',
               'dual': 'one weight per pixel', 'mlp_dual': 'one weight per pixel', 'stem_post': 'stride-2',
               'pool_learn': 'wider than the stride', 'crop_linear_pre': 'one weight per pixel'}
SIZES = [(32, 32), (48, 24), (37, 30)]


def _x(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)))


def _build(option: str, **extra) -> torch.nn.Module:
    torch.manual_seed(0)
    model = timm.create_model(NAME, **TINY, **OPTIONS[option], **extra).eval()
    with torch.no_grad():  # the zero head and zero-init tables would make every comparison trivial
        for name, p in model.named_parameters():
            if name.startswith(('head', 'pos_embed', 'cls_token')) or name.endswith(('norm_pre.bias', 'norm.bias')):
                p.normal_(std=0.1)
    return model


@functools.lru_cache(maxsize=None)
def _model(option: str) -> torch.nn.Module:
    return _build(option)


@pytest.mark.parametrize('option', OPTIONS)
def test_forward_backward_at_any_size(option):
    model = _model(option)
    strict = option == 'strict'
    for size in SIZES:
        x = _x(2, 3, *size)
        if strict and (size[0] % 8 or size[1] % 8):
            with pytest.raises(ViTVariantsError, match='not divisible'):
                model(x)
            continue
        model.train()
        try:
            out = model(x)
            assert out.shape == (2, 5) and torch.isfinite(out).all()
            out.square().sum().backward()
            missing = [n for n, p in model.named_parameters() if p.grad is None]
            assert not missing, (size, missing)
        finally:
            model.zero_grad(set_to_none=True)
            model.eval()
        tokens, grid_h, grid_w = embedded(model, x)
        expected = model.config.grid_size if option.startswith('pool') else (size[0] // 8, size[1] // 8) \
            if option.startswith('crop') else (-(-size[0] // 8), -(-size[1] // 8))
        assert (grid_h, grid_w) == expected


@pytest.mark.parametrize('option', OPTIONS)
def test_set_input_size(option):
    model = _build(option)
    x = _x(1, 3, 48, 40)
    with torch.no_grad():
        before = model(x)
        model.set_input_size(img_size=(48, 40))
        assert model.config.img_size == (48, 40) and model.patch_embed.grid_size == (6, 5)
        if not option.startswith('pool'):  # the nominal grid is the runtime one: nothing to resample or pool
            torch.testing.assert_close(model(x), before, rtol=1e-4, atol=1e-5)
        if option in FIXED_PATCH:
            with pytest.raises(ViTVariantsError, match=FIXED_PATCH[option]):
                model.set_input_size(patch_size=16)
            assert model.config.patch_size == (8, 8) and model.patch_embed.patch_size == (8, 8)
            return
        kernel = model.patch_embed.proj.weight.clone()
        model.set_input_size(img_size=96, patch_size=16)
        torch.testing.assert_close(model.patch_embed.proj.weight,
                                   resample_patch_embed(kernel, [16, 16], interpolation='bilinear', antialias=False))
        assert type(model.patch_embed.proj) is type(_model(option).patch_embed.proj)
        assert model(_x(1, 3, 96, 80)).shape == (1, 5)


@pytest.mark.parametrize('option', OPTIONS)
def test_state_dict_round_trip_through_folders(option, tmp_path):
    model = _model(option)
    x = _x(2, 3, 40, 32)
    with torch.no_grad():
        expected = model(x)
    folder = save_pretrained_folder(model, tmp_path / 'out')
    config, raw = read_config(folder)
    assert config == model.config and 'dynamic_img_pad' not in raw['model_args']
    assert raw['pretrained_cfg']['first_conv'] + '.weight' in model.state_dict()
    with torch.no_grad():
        torch.testing.assert_close(load_like_user(folder)(x), expected, rtol=0, atol=0)
        via_timm = timm.create_model(f'local-dir:{folder}', pretrained=True).eval()
        assert via_timm.config == model.config
        torch.testing.assert_close(via_timm(x), expected, rtol=0, atol=0)
        # the streaming loader, into a model of another nominal size (the grid-fitting path)
        other = timm.create_model(NAME, **{**TINY, 'img_size': (40, 32)}, **OPTIONS[option])
        other.load_pretrained(str(folder))
        resized = copy.deepcopy(model)
        resized.set_input_size(img_size=(40, 32))
        torch.testing.assert_close(other.eval()(x), resized(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('option', OPTIONS)
def test_timm_interface(option):
    from torchvision.models.feature_extraction import create_feature_extractor, get_graph_node_names
    model = _model(option)
    x = _x(1, 3, 40, 32)
    with torch.no_grad():
        final, inter = model.forward_intermediates(x)
        torch.testing.assert_close(final, model.forward_features(x))
        grid = model.patch_embed.grid_size if model.config.grid_mode == 'pool' else grid_for((40, 32), model.config.patch_size)
        assert [t.shape for t in inter] == [(1, 32, *grid)] * 2
        # a fresh copy: a learned table's resample cache (filled by earlier tests) is not scriptable
        torch.testing.assert_close(torch.jit.script(_build(option))(x), model(x))
        tracer_kwargs = dict(leaf_modules=get_notrace_modules(), autowrap_functions=get_notrace_functions())
        _, nodes = get_graph_node_names(model, tracer_kwargs=tracer_kwargs)
        fx_model = create_feature_extractor(model, return_nodes=[nodes[-1]], tracer_kwargs=tracer_kwargs)
        torch.testing.assert_close(fx_model(x)[nodes[-1]], model(x))
    torch.manual_seed(0)
    feat = timm.create_model(NAME, features_only=True, out_indices=(0, 1), **TINY, **OPTIONS[option]).eval()
    feat.model.load_state_dict({k: v for k, v in model.state_dict().items()
                                if not k.startswith(('norm.', 'head.'))})
    with torch.no_grad():
        for got, want in zip(feat(x), inter):
            torch.testing.assert_close(got, want)


@pytest.mark.parametrize('norm', [None, 'pre', 'dual'])
def test_linear_equals_conv(norm):
    conv = _build('conv', patch_norm=norm)
    linear = timm.create_model(NAME, **TINY, patch_embed='linear', patch_norm=norm).eval()
    assert linear.state_dict().keys() == conv.state_dict().keys()
    linear.load_state_dict(conv.state_dict())
    x = _x(2, 3, 37, 45)
    with torch.no_grad():
        torch.testing.assert_close(linear(x), conv(x), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(linear.patch_embed(x), conv.patch_embed(x), rtol=1e-5, atol=1e-5)


def test_pre_norm_is_layer_norm_of_unfolded_patches():
    model = _build('pre')
    embed = model.patch_embed
    x = _x(2, 3, 32, 48)
    cols = F.unfold(x, kernel_size=8, stride=8).transpose(1, 2)  # (B, N, C*P*P), channel-major like the kernel
    normed = F.layer_norm(cols, (cols.shape[-1],), embed.norm_pre.weight, embed.norm_pre.bias, eps=1e-6)
    expected = F.linear(normed, embed.proj.weight.reshape(32, -1), embed.proj.bias)
    with torch.no_grad():
        torch.testing.assert_close(embed(x).reshape(2, -1, 32), expected, rtol=1e-5, atol=1e-5)


def test_overlap_keeps_the_patchifier_grid_and_centres_each_token():
    model = _model('overlap')
    proj = model.patch_embed.proj
    assert proj.kernel_size == (12, 12) and proj.stride == (8, 8) and proj.padding == (2, 2)
    for size in [(32, 32), (33, 31), (8, 8), (9, 57)]:
        assert model.patch_embed(_x(1, 3, *size)).shape[1:3] == (-(-size[0] // 8), -(-size[1] // 8))
    strict = timm.create_model(NAME, **TINY, patch_embed='overlap', grid_mode='strict')
    with pytest.raises(ViTVariantsError, match='not divisible'):
        strict(_x(1, 3, 33, 32))


def test_conv_stem_follows_xiao_et_al():
    model = timm.create_model(NAME, embed_dim=192, depth=1, num_heads=3, patch_size=16, patch_embed='conv_stem')
    stem = model.patch_embed.stem
    assert [layer.conv.out_channels for layer in stem] == [24, 48, 96, 192]
    assert all(layer.conv.kernel_size == (3, 3) and layer.conv.stride == (2, 2) for layer in stem)
    assert model.patch_embed.proj.kernel_size == (1, 1)
    assert model.patch_embed(_x(1, 3, 40, 72)).shape == (1, 3, 5, 192)


def test_conv_stem_input_channels_adapt_on_its_first_conv():
    src = _model('conv_stem')
    gray = timm.create_model(NAME, **TINY, patch_embed='conv_stem', in_chans=1, pretrained=True,
                             pretrained_cfg_overlay=dict(state_dict=src.state_dict()))
    torch.testing.assert_close(gray.patch_embed.stem[0].conv.weight, src.patch_embed.stem[0].conv.weight.sum(1, True))
    torch.testing.assert_close(gray.patch_embed.proj.weight, src.patch_embed.proj.weight)


def test_pool_gives_the_nominal_token_count_at_every_size():
    model = _model('pool')
    conv = timm.create_model(NAME, **TINY).eval()
    conv.load_state_dict(model.state_dict())
    with torch.no_grad():
        for size in [(32, 32), (64, 48), (16, 24), (37, 30)]:
            x = _x(1, 3, *size)
            assert model.forward_features(x).shape == (1, 16, 32)
            pooled = F.adaptive_avg_pool2d(conv.patch_embed(x).permute(0, 3, 1, 2), (4, 4)).permute(0, 2, 3, 1)
            torch.testing.assert_close(model.patch_embed(x), pooled)


def test_cpe_is_a_depthwise_conv_after_the_first_block_and_adapts_to_the_grid():
    model = _model('sincos_cpe')
    x = _x(1, 3, 48, 24)
    with torch.no_grad():
        tokens, grid_h, grid_w = embedded(model, x)
        first = model.blocks[0](tokens)
        grid = first[:, 1:].transpose(1, 2).reshape(1, 32, grid_h, grid_w)
        cpe = model.pos_cpe.proj
        assert cpe.groups == 32 and cpe.kernel_size == (3, 3)
        expected = torch.cat([first[:, :1], first[:, 1:] + cpe(grid).flatten(2).transpose(1, 2)], dim=1)
        first_out = model.forward_intermediates(x, indices=[0], output_fmt='NLC', return_prefix_tokens=True,
                                                intermediates_only=True)[0]
        torch.testing.assert_close(first_out[0], expected[:, 1:])
        torch.testing.assert_close(first_out[1], expected[:, :1])
        torch.testing.assert_close(model.forward_features(x), model.norm(model.blocks[1](expected)))
        model.set_grad_checkpointing(True)
        try:
            torch.testing.assert_close(model.forward_features(x), model.norm(model.blocks[1](expected)))
        finally:
            model.set_grad_checkpointing(False)
    assert model.config.position(SinCos) is not None and model.config.position(Cpe) is not None and isinstance(model.abs_pos, SinCos2dPosEmbed)
    assert _model('cpe').abs_pos is None and _model('cpe').pos_embed is None


def test_config_fields_validate_and_round_trip():
    config = SimpleViTConfig.of(**TINY, patch_embed='mlp', patch_norm='dual', pos_embed='learn+cpe', grid_mode='pool')
    data = json.loads(json.dumps(config.to_dict()))
    assert data['patch_embed'] == 'mlp' and data['patch_norm'] == 'dual' and data['pos_embed'] == 'learn+cpe'
    assert data['grid_mode'] == 'pool' and 'dynamic_img_pad' not in data
    assert SimpleViTConfig.from_dict(data) == config
    # the older name, as existing config.json files carry it
    assert SimpleViTConfig.of(dynamic_img_pad=False).grid_mode == 'strict'
    assert SimpleViTConfig.of(dynamic_img_pad=True).grid_mode == 'pad' == SimpleViTConfig.of().grid_mode
    assert SimpleViTConfig.from_dict({'dynamic_img_pad': False}).dynamic_img_pad is False
    assert SimpleViTConfig.of(grid_mode='pool').dynamic_img_pad is True
    assert SimpleViTConfig.of(dynamic_img_pad=False).replace(grid_mode='pool').grid_mode == 'pool'
    assert SimpleViTConfig.of(grid_mode='pool').replace(dynamic_img_pad=False).grid_mode == 'strict'
    model = timm.create_model(NAME, **TINY, dynamic_img_pad=False)
    assert model.config.grid_mode == 'strict'
    assert timm.create_model(NAME, **{**model._model_args, 'num_classes': 5}).config == model.config


def test_old_config_json_with_dynamic_img_pad_still_loads(tmp_path):
    model = _model('strict')
    folder = save_pretrained_folder(model, tmp_path / 'old')
    raw = json.loads((folder / 'config.json').read_text())
    raw['model_args'].pop('grid_mode')
    raw['model_args']['dynamic_img_pad'] = False  # what folders written before grid_mode existed hold
    (folder / 'config.json').write_text(json.dumps(raw))
    assert read_config(folder)[0].grid_mode == 'strict'
    assert timm.create_model(f'local-dir:{folder}', pretrained=True).config.grid_mode == 'strict'


@pytest.mark.parametrize('kwargs,match', [
    (dict(patch_embed='conv_stem', patch_size=12), 'power of 2'),
    (dict(patch_embed='conv_stem', patch_size=(8, 16)), 'power of 2'),
    (dict(patch_embed='conv_stem', patch_size=1), 'power of 2'),
    (dict(patch_embed='overlap', patch_norm='pre'), 'per-patch projection'),
    (dict(patch_embed='conv_stem', patch_norm='dual'), 'per-patch projection'),
    (dict(patch_embed='unfold'), 'expected one of'),
    (dict(patch_norm='both'), 'expected one of'),
    (dict(pos_embed='cpe+sincos'), 'expected one of'),
    (dict(grid_mode='trim'), 'expected one of'),
    (dict(grid_mode='pool', dynamic_img_pad=False), 'contradicts'),
    (dict(pos_embed='sincos+cpe', embed_dim=30, num_heads=2), 'divisible by 4'),
])
def test_impossible_combinations_refuse_with_a_reason(kwargs, match):
    with pytest.raises(ViTVariantsError, match=match):
        SimpleViTConfig.of(**{**TINY, **kwargs})


@pytest.mark.parametrize('option', ['conv_stem', 'overlap', 'dual'])
def test_loading_into_another_patch_size_refuses_where_pi_resize_is_undefined(option, tmp_path):
    folder = save_pretrained_folder(_model(option), tmp_path / 'src')
    target = timm.create_model(NAME, **{**TINY, 'patch_size': 16, 'img_size': 64}, **OPTIONS[option])
    with pytest.raises(ViTVariantsError, match='cannot change the patch size'):
        target.load_pretrained(str(folder))
    with pytest.raises(ViTVariantsError, match='cannot (change the patch size|be resized)'):
        timm.create_model(f'local-dir:{folder}', pretrained=True, patch_size=16, img_size=64)
