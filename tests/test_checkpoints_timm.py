"""timm-layout readers: .pth (raw and wrapped), .safetensors and Hub folders, against timm models."""
import argparse
import json

import pytest
import timm
import torch
from safetensors.torch import save_file
from timm.layers import resample_abs_pos_embed
from timm.models import save_for_hf
from timm.models.vision_transformer import VisionTransformer

from timm_vit_variants import SimpleVisionTransformer, ViTVariantsError
from timm_vit_variants.checkpoints import detect_format, load_into_model

from checkpoint_fixtures import open_checkpoint, randomize


TOL = 1e-5
torch.set_num_threads(1)
TINY = dict(img_size=32, patch_size=8, depth=2, num_classes=5)  # vit_tiny: width 192, 3 heads, exact GELU


def _images(size=32):
    return torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(3))


def _timm_vit(seed=0, **kwargs):
    return randomize(timm.create_model('vit_tiny_patch16_224', **dict(TINY, **kwargs)), seed=seed)


def _ours(path, **hints):
    with open_checkpoint(path, **hints) as ckpt:
        model = SimpleVisionTransformer(**ckpt.model_args, weight_init='skip').eval()
        model.load_state_dict(ckpt.state_dict(), strict=True)
        return model, ckpt


def _diff(model, ref, size=32):
    x = _images(size)
    with torch.no_grad():
        return (model(x) - ref(x)).abs().max().item()


@pytest.mark.parametrize('layout', ['raw.pth', 'state_dict.pth.tar', 'model_ddp.bin', 'weights.safetensors'])
def test_timm_files(tmp_path, layout):
    ref = _timm_vit()
    state = ref.state_dict()
    path = tmp_path / layout
    if layout == 'raw.pth':
        torch.save(state, path)
    elif layout == 'state_dict.pth.tar':
        torch.save({'epoch': 3, 'arch': 'vit_tiny_patch16_224', 'state_dict': state,
                    'args': argparse.Namespace(lr=0.1)}, path)
    elif layout == 'model_ddp.bin':
        torch.save({'model': {f'module.{k}': v for k, v in state.items()}}, path)
    else:
        save_file(state, str(path))
    assert detect_format(path) == 'timm'
    model, ckpt = _ours(path, num_heads=3)
    args = ckpt.model_args
    assert (args['embed_dim'], args['depth'], args['num_heads'], args['mlp_dim']) == (192, 2, 3, 768)
    assert args['act_layer'] == 'gelu' and args['pos_embed_cls_slot'] and args['pos_embed_resample'] == 'timm'
    assert args['global_pool'] == 'token' and ckpt.grid == (4, 4)
    assert _diff(model, ref) <= TOL


def test_ema_weights_preferred_like_timm(tmp_path):
    ref, ema = _timm_vit(seed=0), _timm_vit(seed=1)
    path = tmp_path / 'train.pth.tar'
    torch.save({'state_dict': ref.state_dict(), 'state_dict_ema': ema.state_dict()}, path)
    assert _diff(_ours(path, num_heads=3)[0], ema) <= TOL
    assert _diff(_ours(path, num_heads=3, use_ema=False)[0], ref) <= TOL


def test_num_heads_inferred_for_standard_widths_only(tmp_path):
    path = tmp_path / 'raw.pth'
    ref = _timm_vit()
    torch.save(ref.state_dict(), path)
    model, ckpt = _ours(path)  # the assumption is recorded (reported by vit-port in the line, card and config)
    assert ckpt.assumed['num_heads'] == (3, 'the standard ViT of width 192')
    assert ckpt.model_args['num_heads'] == 3 and _diff(model, ref) <= TOL
    # Any other width still needs the head count, and says what to give.
    odd = tmp_path / 'odd.pth'
    torch.save(_timm_vit(embed_dim=128, num_heads=2).state_dict(), odd)
    with pytest.raises(ViTVariantsError, match='64-wide heads, as timm vit_. use, would be 2') as info:
        open_checkpoint(odd)
    assert str(odd) in str(info.value) and 'blocks.0.attn.qkv.weight' in str(info.value)
    assert info.value.needs == 'num_heads'
    with open_checkpoint(odd, assume_heads=True) as ckpt:
        assert ckpt.config.num_heads == 2 and ckpt.assumed['num_heads'][0] == 2


@pytest.mark.parametrize('safe', [True, False])
def test_timm_hub_folder(tmp_path, safe):
    ref = _timm_vit()
    save_for_hf(ref, tmp_path / 'hub', model_args=TINY, safe_serialization=safe)
    assert detect_format(tmp_path / 'hub') == 'timm'
    model, ckpt = _ours(tmp_path / 'hub')  # heads, pooling and GELU come from config.json
    assert ckpt.model_args['num_heads'] == 3 and ckpt.source_config['architecture'] == 'vit_tiny_patch16_224'
    assert _diff(model, ref) <= TOL
    weights = tmp_path / 'hub' / ('model.safetensors' if safe else 'pytorch_model.bin')
    assert _ours(weights)[1].model_args['num_heads'] == 3  # a file inside the folder finds its config too


def test_no_embed_class_and_avg_pool_without_fc_norm(tmp_path):
    for kwargs in (dict(no_embed_class=True), dict(class_token=False, global_pool='avg', fc_norm=False)):
        ref = randomize(VisionTransformer(embed_dim=64, num_heads=4, **TINY, **kwargs))
        path = tmp_path / 'w.safetensors'
        save_file(ref.state_dict(), str(path))
        model, ckpt = _ours(path, num_heads=4)
        assert not ckpt.model_args['pos_embed_cls_slot']
        assert _diff(model, ref) <= TOL, kwargs


def test_a_bare_state_dict_with_qk_norm_converts(tmp_path):
    """timm's q/k LayerNorm per head (``qk_norm=True``): its ``q_norm``/``k_norm`` tensors say it, no config needed."""
    ref = randomize(VisionTransformer(embed_dim=64, num_heads=4, qk_norm=True, **TINY))
    path = tmp_path / 'w.safetensors'
    save_file(ref.state_dict(), str(path))
    model, ckpt = _ours(path, num_heads=4)
    assert ckpt.model_args['qk_norm']
    assert _diff(model, ref) <= TOL


def test_an_attention_pool_beyond_big_visions_map_head_is_refused(tmp_path):
    """timm's map pooling is supported (the SigLIP towers, tests/test_siglip.py); more latent queries are not."""
    state = VisionTransformer(embed_dim=64, num_heads=4, global_pool='map', **TINY).state_dict()
    state['attn_pool.latent'] = torch.zeros(1, 2, 64)
    save_file(state, str(tmp_path / 'w.safetensors'))
    with pytest.raises(ViTVariantsError, match='only one latent query') as info:
        open_checkpoint(tmp_path / 'w.safetensors', num_heads=4)
    assert 'attn_pool.latent' in str(info.value)


def test_our_own_hub_folder_roundtrip(tmp_path):
    """A simple_vit Hub folder (sin-cos, gap, pre-logits) reopens with its exact architecture."""
    src = randomize(timm.create_model('simple_vit_tiny', img_size=32, patch_size=8, embed_dim=64, depth=2,
                                      num_heads=4, mlp_dim=128, rep_size=48, num_classes=6))
    args = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, mlp_dim=128, rep_size=48,
                num_classes=6)
    save_for_hf(src, tmp_path / 'ours', model_args=args, safe_serialization=True)
    model, ckpt = _ours(tmp_path / 'ours')
    assert ckpt.model_args['pos_embed'] == 'sincos' and ckpt.model_args['rep_size'] == 48
    assert ckpt.model_args['act_layer'] == 'gelu_tanh' and ckpt.model_args['global_pool'] == 'avg'
    assert _diff(model, src) <= TOL
    other = timm.create_model('simple_vit_tiny', **args)
    other.load_pretrained(str(tmp_path / 'ours'))
    assert _diff(other.eval(), src) <= TOL


def test_timm_rule_resampling_matches_timm(tmp_path):
    ref = _timm_vit()
    path = tmp_path / 'w.safetensors'
    save_file(ref.state_dict(), str(path))
    with open_checkpoint(path, num_heads=3) as ckpt:
        args = dict(ckpt.model_args, img_size=(48, 40))
    model = SimpleVisionTransformer(**args)
    load_into_model(model, path)
    expected = resample_abs_pos_embed(ref.pos_embed.detach(), new_size=(6, 5), old_size=(4, 4), num_prefix_tokens=1)
    torch.testing.assert_close(model.pos_embed.detach(), expected, rtol=0, atol=1e-6)
    # timm's own model at that size, with timm's resampled table, gives the same logits.
    big = _timm_vit(img_size=(48, 40))
    state = dict(ref.state_dict(), pos_embed=expected)
    big.load_state_dict(state)
    x = torch.randn(2, 3, 48, 40, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        assert (model(x) - big(x)).abs().max().item() <= TOL


def test_load_into_model_rejects_architecture_mismatch(tmp_path):
    path = tmp_path / 'w.safetensors'
    save_file(_timm_vit().state_dict(), str(path))
    arch = dict(img_size=32, patch_size=8, embed_dim=192, depth=2, class_token=True, pos_embed='learn',
                pos_embed_cls_slot=True, global_pool='token')
    with pytest.raises(ViTVariantsError, match=r"blocks\.0\.mlp\.fc1\.weight.*\(768, 192\) vs \(512, 192\)"):
        load_into_model(SimpleVisionTransformer(num_heads=3, mlp_dim=512, **arch), path)
    # A table with a cls slot loads into a model without one: the slot is folded into the class token, exactly.
    slotless = SimpleVisionTransformer(num_heads=3, mlp_dim=768, act_layer='gelu', num_classes=5,
                                       **dict(arch, pos_embed_cls_slot=False))
    load_into_model(slotless, path)
    assert _diff(slotless.eval(), _timm_vit()) <= TOL
    # With a timm config.json beside the file, the recorded head count must agree with the model's.
    (tmp_path / 'config.json').write_text(json.dumps({'architecture': 'vit_tiny_patch16_224', 'model_args': TINY}))
    with pytest.raises(ViTVariantsError, match='num_heads=6 contradicts'):
        load_into_model(SimpleVisionTransformer(num_heads=6, mlp_dim=768, **arch), path)
    with pytest.warns(UserWarning, match="activation 'gelu' \\(model: 'gelu_tanh'\\)"):
        load_into_model(SimpleVisionTransformer(num_heads=3, mlp_dim=768, **arch), path)


def test_fc_norm_without_a_final_norm_is_average_pooling(tmp_path, max_delta):
    """timm builds fc_norm in place of the final norm only for average pooling (MAE's fine-tuned layout): the tensors
    decide the pooling, and the note says so; it is not an assumption."""
    ref = _timm_vit(global_pool='avg')
    assert 'fc_norm.weight' in ref.state_dict() and 'norm.weight' not in ref.state_dict()
    path = tmp_path / 'mae_finetuned.safetensors'
    save_file(ref.state_dict(), str(path))
    model, ckpt = _ours(path)
    assert ckpt.model_args['global_pool'] == 'avg' and ckpt.model_args['fc_norm']
    assert 'global_pool' not in ckpt.assumed
    assert any("pooling 'avg': fc_norm present and no final norm" in note for note in ckpt.notes)
    x = _images()
    with torch.no_grad():
        max_delta('timm VisionTransformer avg + fc_norm state dict: logits', model(x), ref(x), TOL)


@pytest.mark.parametrize('arch, kwargs', [
    ('vit_intern300m_patch14_448', dict(img_size=28, patch_size=14, embed_dim=32, num_heads=2)),  # [CLS], LayerScale
    ('vit_base_patch16_radio_v3', dict(img_size=32, patch_size=16, embed_dim=32, num_heads=2)),  # [CLS] + 7 registers
])
def test_a_timm_folder_without_a_final_norm_converts(tmp_path, arch, kwargs, max_delta):
    """timm's final_norm=False towers (InternViT-300M, RADIO v3): no norm after the blocks, read off the folder's
    architecture. Before, refused with "key 'norm.weight': missing key"."""
    args = dict(kwargs, depth=2, num_classes=5)
    ref = randomize(timm.create_model(arch, **args), seed=1).eval()
    assert 'norm.weight' not in ref.state_dict() and 'fc_norm.weight' not in ref.state_dict()
    save_for_hf(ref, tmp_path / 'hub', model_args=args)
    model, ckpt = _ours(tmp_path / 'hub')
    assert ckpt.model_args['final_norm'] is False
    side = args['img_size']
    for size in (side, 2 * side):  # the stored grid, and one that resizes the table by timm's rule
        ref.set_input_size(img_size=size)
        model.set_input_size(img_size=size)
        x = _images(size)
        with torch.no_grad():
            max_delta(f'timm {arch} (final_norm=False) at {size}: logits', model(x), ref(x), TOL)


@pytest.mark.parametrize('class_token', [False, True])
def test_registers_with_their_own_table_rows(tmp_path, class_token, max_delta):
    """timm's registers with rows in the table (``no_embed_class=False`` with ``reg_tokens``: vit_so150m_*_reg*,
    test_vit2/3), with and without a [CLS]: every prefix token has a row, resized as timm resizes it. Before,
    refused ("does not fit a table")."""
    args = dict(TINY, reg_tokens=3, class_token=class_token, no_embed_class=False,
                global_pool='token' if class_token else 'avg')
    ref = _timm_vit(**args).eval()
    prefix = 3 + int(class_token)
    assert ref.pos_embed.shape[1] == 16 + prefix
    save_for_hf(ref, tmp_path / 'hub', model_args=args)
    model, ckpt = _ours(tmp_path / 'hub')
    assert ckpt.config.num_prefix_slots == prefix and ckpt.model_args['pos_embed_reg_slots']
    for size in (32, 48):  # the stored grid, and one that resizes the table by timm's rule
        ref.set_input_size(img_size=size)
        model.set_input_size(img_size=size)
        x = _images(size)
        with torch.no_grad():
            max_delta(f'timm registers with table rows (cls={class_token}) at {size}: logits', model(x), ref(x), TOL)


def test_table_register_rows_round_trip_the_flat_model_args():
    """A folder's flat model_args name the register rows only when there are some, so a folder written before the
    setting existed reads as it did (no rows)."""
    from timm_vit_variants.config import SimpleViTConfig

    plain = SimpleViTConfig.of(img_size=32, patch_size=8, embed_dim=32, depth=1, num_heads=2, reg_tokens=2,
                               class_token=True, pos_embed='learn', pos_embed_cls_slot=True)
    assert 'pos_embed_reg_slots' not in plain.to_flat() and plain.num_prefix_slots == 1
    rows = plain.replace(pos_embed_reg_slots=True)
    assert rows.to_flat()['pos_embed_reg_slots'] is True and rows.num_prefix_slots == 3
    assert SimpleViTConfig.of(**rows.to_flat()) == rows
    with pytest.raises(ViTVariantsError, match='reg_slots'):
        plain.replace(pos_embed_reg_slots=True, pos_embed_cls_slot=False)


def test_a_bare_state_dict_with_sub_lns_in_attention_and_mlp(tmp_path, max_delta):
    """timm's scale_attn_norm / scale_mlp_norm (BEiT-3's sub-LNs), told by their tensors in a bare state dict and
    verified against timm's VisionTransformer built with them. Before, refused ("scale_attn_norm / scale_mlp_norm
    are not supported")."""
    ref = _timm_vit(scale_attn_norm=True, scale_mlp_norm=True).eval()
    path = tmp_path / 'beit3_like.safetensors'
    save_file(ref.state_dict(), str(path))
    model, ckpt = _ours(path)
    assert ckpt.config.block.attn_norm and ckpt.config.block.mlp_norm
    with torch.no_grad():
        max_delta('timm bare state dict with attention and MLP sub-LNs: logits', model(_images()), ref(_images()), TOL)
    from porting.pipeline import convert
    assert convert(path, tmp_path / 'out').verification.status == 'passed'
