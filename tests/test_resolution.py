"""Position embeddings and resolution adaptivity: sin-cos formula, any H x W, padding, patch-size changes."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
import timm
from timm.layers import resample_patch_embed

import timm_vit_variants  # noqa: F401
from model_probes import embedded
from checkpoint_fixtures import np_posemb_sincos_2d  # independent numpy transcription of big_vision's formula
from timm_vit_variants import ViTVariantsError, sincos_2d

TINY = dict(embed_dim=32, depth=2, num_heads=2, mlp_dim=64, num_classes=5)


@pytest.mark.parametrize('grid,width', [((14, 14), 384), ((7, 11), 64), ((3, 5), 192), ((1, 4), 8)])
def test_sincos_matches_big_vision_formula(grid, width):
    ours = sincos_2d(*grid, width).numpy()
    np.testing.assert_allclose(ours, np_posemb_sincos_2d(*grid, width)[0], rtol=0, atol=2e-6)


def test_sincos_is_not_a_parameter_and_not_saved():
    model = timm.create_model('simple_vit_tiny', **TINY)
    assert model.pos_embed is None
    assert not any('sincos' in n or 'pos' in n for n, _ in model.named_parameters())
    assert not any('sincos' in k or k == 'pos_embed' for k in model.state_dict())


def test_sincos_added_before_cls_token():
    torch.manual_seed(0)
    model = timm.create_model('simple_vit_tiny', class_token=True, global_pool='token', img_size=32, patch_size=8,
                              **TINY).eval()
    x = torch.randn(1, 3, 32, 40)
    tokens, gh, gw = embedded(model, x)
    patches = model.patch_embed(x).reshape(1, gh * gw, -1)
    torch.testing.assert_close(tokens[:, 0], model.cls_token[:, 0].expand(1, -1))
    torch.testing.assert_close(tokens[:, 1:], patches + sincos_2d(gh, gw, 32))


@pytest.mark.parametrize('size', [(32, 32), (48, 80), (80, 48), (16, 96)])
def test_any_hw_uses_the_matching_sincos_grid(size):
    torch.manual_seed(0)
    model = timm.create_model('simple_vit_tiny', img_size=32, patch_size=8, **TINY).eval()
    x = torch.randn(2, 3, *size)
    gh, gw = size[0] // 8, size[1] // 8
    with torch.no_grad():
        tokens, h, w = embedded(model, x)
    assert (h, w) == (gh, gw)
    expected = model.patch_embed(x).reshape(2, gh * gw, -1) + sincos_2d(gh, gw, 32)
    torch.testing.assert_close(tokens, expected)
    assert model(x).shape == (2, 5)


def test_non_divisible_sizes_pad_right_bottom():
    torch.manual_seed(0)
    model = timm.create_model('simple_vit_tiny', img_size=32, patch_size=8, **TINY).eval()
    x = torch.randn(1, 3, 30, 37)
    padded = F.pad(x, (0, 3, 0, 2))
    with torch.no_grad():
        torch.testing.assert_close(model(x), model(padded))
        assert model.forward_intermediates(x, indices=1, intermediates_only=True)[0].shape[-2:] == (4, 5)


def test_non_divisible_sizes_raise_without_padding():
    model = timm.create_model('simple_vit_tiny', img_size=32, patch_size=8, dynamic_img_pad=False, **TINY)
    with pytest.raises(ViTVariantsError, match=r'30x37.*8x8'):
        model(torch.randn(1, 3, 30, 37))


@pytest.mark.parametrize('shape', [(3, 32, 32), (1, 1, 32, 32), (1, 3, 0, 32)])
def test_bad_input_shapes_raise_package_error(shape):
    model = timm.create_model('simple_vit_tiny', img_size=32, patch_size=8, **TINY)
    with pytest.raises(ViTVariantsError, match='expected an input of shape'):
        model(torch.zeros(shape))


def test_conv_patch_embedding_equals_unfold_linear():
    torch.manual_seed(0)
    model = timm.create_model('simple_vit_tiny', img_size=32, patch_size=8, **TINY).eval()
    x = torch.randn(2, 3, 32, 48)
    proj = model.patch_embed.proj
    cols = F.unfold(x, kernel_size=8, stride=8).transpose(1, 2)  # (B, N, C*P*P), channel-major like OIHW
    expected = F.linear(cols, proj.weight.reshape(proj.out_channels, -1), proj.bias)
    got = model.patch_embed(x).reshape(2, -1, 32)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_set_input_size_patch_change_is_flexivit_pi_resize():
    """A PI-resized kernel on bilinearly upsampled patches reproduces the original tokens (FlexiViT eq. 2)."""
    torch.manual_seed(0)
    model = timm.create_model('simple_vit_tiny', img_size=32, patch_size=8, **TINY).eval()
    x = torch.randn(1, 3, 32, 48)
    with torch.no_grad():
        before = model.patch_embed(x)
        old_kernel = model.patch_embed.proj.weight.clone()
        model.set_input_size(img_size=64, patch_size=16)
        assert model.patch_embed.patch_size == (16, 16) and model.patch_embed.grid_size == (4, 4)
        expected_kernel = resample_patch_embed(old_kernel, [16, 16], interpolation='bilinear', antialias=False)
        torch.testing.assert_close(model.patch_embed.proj.weight, expected_kernel)
        # resize every 8x8 patch on its own to 16x16, then reassemble the image
        patches = x.reshape(1, 3, 4, 8, 6, 8).permute(0, 2, 4, 1, 3, 5).reshape(24, 3, 8, 8)
        patches = F.interpolate(patches, size=(16, 16), mode='bilinear', align_corners=False, antialias=False)
        up = patches.reshape(1, 4, 6, 3, 16, 16).permute(0, 3, 1, 4, 2, 5).reshape(1, 3, 64, 96)
        after = model.patch_embed(up)
    torch.testing.assert_close(after, before, rtol=1e-4, atol=1e-4)
    assert model.pretrained_cfg['input_size'] == (3, 224, 224)  # source metadata is not rewritten
    assert model._model_args['img_size'] == (64, 64) and model._model_args['patch_size'] == (16, 16)


def test_create_model_patch_size_with_pretrained_weights_pi_resizes():
    torch.manual_seed(0)
    src = timm.create_model('simple_vit_tiny', img_size=32, patch_size=8, **TINY)
    dst = timm.create_model('simple_vit_tiny', img_size=64, patch_size=16, pretrained=True,
                            pretrained_cfg_overlay=dict(state_dict=src.state_dict()), **TINY)
    expected = resample_patch_embed(src.patch_embed.proj.weight.detach(), [16, 16], 'bilinear', False)
    torch.testing.assert_close(dst.patch_embed.proj.weight, expected)
    torch.testing.assert_close(dst.blocks[1].mlp.fc2.weight, src.blocks[1].mlp.fc2.weight)


LEARN = dict(class_token=True, pos_embed='learn', pos_embed_cls_slot=True, global_pool='token', img_size=32,
             patch_size=8)


def test_learned_table_resampled_once_per_grid_in_inference():
    torch.manual_seed(0)
    model = timm.create_model('simple_vit_tiny', **LEARN, **TINY).eval()
    with torch.no_grad():
        model.pos_embed.normal_()
        model(torch.randn(1, 3, 48, 40))
        cached = model.abs_pos._cache[(6, 5)][1]
        model(torch.randn(2, 3, 48, 40))
        assert model.abs_pos._cache[(6, 5)][1] is cached
        model(torch.randn(1, 3, 32, 64))
        assert set(model.abs_pos._cache) == {(6, 5), (4, 8)}
        expected = torch.cat([model.pos_embed[:, :1], F.interpolate(
            model.pos_embed[:, 1:].reshape(1, 4, 4, 32).permute(0, 3, 1, 2), size=(6, 5), mode='bilinear',
            align_corners=True).permute(0, 2, 3, 1).reshape(1, 30, 32)], dim=1)
        torch.testing.assert_close(cached, expected)
        model.pos_embed.add_(1.0)  # an in-place update invalidates the cache
        model(torch.randn(1, 3, 48, 40))
        assert model.abs_pos._cache[(6, 5)][1] is not cached


def test_learned_table_gets_gradients_at_other_resolutions():
    torch.manual_seed(0)
    model = timm.create_model('simple_vit_tiny', **LEARN, **TINY).train()
    model.forward_features(torch.randn(2, 3, 48, 40)).pow(2).sum().backward()  # the head is zero-init
    assert model.pos_embed.grad is not None and model.pos_embed.grad.abs().sum() > 0
    assert not model.abs_pos._cache


def test_set_input_size_resamples_learned_table():
    torch.manual_seed(0)
    model = timm.create_model('simple_vit_tiny', **LEARN, **TINY).eval()
    x = torch.randn(1, 3, 48, 40)
    with torch.no_grad():
        dynamic = model(x)
        model.set_input_size(img_size=(48, 40))
        assert model.pos_embed.shape == (1, 1 + 6 * 5, 32)
        torch.testing.assert_close(model(x), dynamic)
