"""``final_norm=False``: no final LayerNorm at all, as timm's ``VisionTransformer(final_norm=False)`` (the tokens the
last block leaves; what transformers' mean-pooled data2vec-vision without its pooling layer and
``CLIPForImageClassification``'s classifier read)."""
import pytest
import torch

from timm_vit_variants import SimpleVisionTransformer, SimpleViTConfig, ViTVariantsError
from porting.verification.timm_ref import timm_equivalent

TINY = dict(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, mlp_dim=64, num_classes=3)


@pytest.mark.parametrize('pool,class_token', [('avg', True), ('token', True), ('', False)])
def test_no_final_norm_is_timms(pool, class_token, max_delta):
    config = SimpleViTConfig.of(**TINY, global_pool=pool, class_token=class_token, pos_embed='learn',
                             pos_embed_cls_slot=class_token, final_norm=False)
    torch.manual_seed(0)
    ours = SimpleVisionTransformer(config).eval()
    assert not any(name.startswith(('norm.', 'fc_norm.')) for name in ours.state_dict())
    with torch.no_grad():
        for param in ours.parameters():
            param.add_(0.2 * torch.randn_like(param))
    timm_model = timm_equivalent(config)
    timm_model.load_state_dict(ours.state_dict())
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        max_delta(f'final_norm=False, {pool!r} pooling: tokens', ours.forward_features(x),
                  timm_model.forward_features(x), 1e-5)
        max_delta(f'final_norm=False, {pool!r} pooling: output', ours(x), timm_model(x), 1e-5)


@pytest.mark.parametrize('other', [dict(fc_norm=True), dict(untie_cls_and_patch_norms=True, class_token=True)])
def test_no_final_norm_has_no_norm_to_place(other):
    with pytest.raises(ViTVariantsError) as e:
        SimpleViTConfig.of(**TINY, final_norm=False, **other)
    assert e.value.key == 'final_norm'
