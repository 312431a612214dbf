"""open_clip towers on a timm trunk (``visual.trunk.*`` + open_clip's head): every SigLIP tower open_clip packages,
vit_medium_gap (open_clip's Linear head), MobileCLIP2-L-14 (the trunk's own head, CLIP's eps 1e-5) and a native tower
with LayerScale (ViT-M-16-alt), built tiny with random weights, converted by the pipeline (verified against open_clip's
own model), loaded as users load them and compared with open_clip's ``encode_image`` at the stored grid and at 6x5;
the trunks and heads this tool does not express are refused by name."""
import json

import pytest
import torch

import vit_port
from model_probes import load_like_user, read_into_model
from open_clip_tiny import image_size, save_tiny, tiny_timm, trunk_name
from timm_vit_variants.errors import ViTVariantsError

open_clip = pytest.importorskip('open_clip')

TOL = 2e-5


def _towers():
    """One config of each distinct timm-trunk tower among the SigLIP ones (configs with the same vision_cfg and
    embed_dim build the same tower), then the other towers of this concern."""
    seen, names = set(), []
    for name in open_clip.list_models():
        cfg = open_clip.get_model_config(name)
        if 'siglip' not in (cfg['vision_cfg'].get('timm_model_name') or ''):
            continue
        key = json.dumps([cfg['vision_cfg'], cfg['embed_dim']], sort_keys=True)
        if key not in seen:
            seen.add(key)
            names.append(name)
    return names + ['vit_medium_patch16_gap_256', 'MobileCLIP2-L-14', 'ViT-M-16-alt']


def _input(rows: int, cols: int, patch: int) -> torch.Tensor:
    return torch.randn(2, 3, rows * patch, cols * patch, generator=torch.Generator().manual_seed(rows * cols))


@pytest.mark.parametrize('name', _towers())
def test_converted_tower_matches_encode_image_at_two_grids(name, tmp_path, max_delta):
    patch = image_size(name) // 4
    with tiny_timm(trunk_name(name)):
        reference = save_tiny(name, tmp_path / 'model')
        for rows, cols in ((4, 4), (6, 5)):
            out = tmp_path / f'out{rows}x{cols}'
            size = {} if rows == 4 else {'img_size': (rows * patch, cols * patch)}
            result = vit_port.convert(tmp_path / 'model', out, tol=TOL, **size)
            assert result.verification.status == 'passed', result.verification.summary()
            assert 'vs open_clip create_model(local-dir:)' in result.verification.summary()
            if size:  # open_clip's own resize of the table: TimmModel.set_input_size, or force_image_size
                if trunk_name(name):
                    reference.visual.set_input_size(size['img_size'])
                else:
                    reference = open_clip.create_model('local-dir:' + str(tmp_path / 'model'),
                                                       force_image_size=size['img_size']).eval()
            x = _input(rows, cols, patch)
            with torch.no_grad():
                max_delta(f'open_clip {name} {rows}x{cols}, converted: embedding', load_like_user(out)(x),
                          reference.encode_image(x, normalize=False), TOL)


def test_the_trunk_alone_under_a_prefix_keeps_open_clips_head(tmp_path, max_delta):
    """--prefix visual.trunk. with the config beside: still open_clip's tower, its head.proj kept (it was dropped)."""
    with tiny_timm('vit_medium_patch16_gap_256'):
        reference = save_tiny('vit_medium_patch16_gap_256', tmp_path / 'model')
        ours = read_into_model(tmp_path / 'model', prefix='visual.trunk.')
    x = _input(4, 4, 16)
    with torch.no_grad():
        max_delta('vit_medium_gap read with --prefix visual.trunk.: embedding', ours(x),
                  reference.encode_image(x), TOL)


@pytest.mark.parametrize('prefix', [None, 'visual.trunk.'])
def test_pe_core_is_refused_by_name_also_under_a_prefix(prefix, tmp_path):
    """PE-Core's RoPE stores no tensor: read as a plain timm trunk it converted 3.6e-3 off, with only a note."""
    with tiny_timm('vit_pe_core_tiny_patch16_384'):
        save_tiny('PE-Core-T-16-384', tmp_path / 'model')
        with pytest.raises(ViTVariantsError, match='PE-Core: RoPE together with a learned table') as refused:
            read_into_model(tmp_path / 'model', prefix=prefix)
    assert refused.value.key == 'model_cfg.vision_cfg.timm_model_name'


def test_vitamin_is_refused_by_name(tmp_path):
    with tiny_timm('vitamin_small_224'):
        save_tiny('ViTamin-S', tmp_path / 'model')
        with pytest.raises(ViTVariantsError, match="ViTamin: its convolutional MbConv stem"):
            read_into_model(tmp_path / 'model')


def test_a_trunk_without_its_open_clip_config_is_named(tmp_path):
    with tiny_timm('vit_base_patch16_siglip_224'):
        save_tiny('ViT-B-16-SigLIP', tmp_path / 'model')
    (tmp_path / 'model' / 'open_clip_config.json').unlink()
    with pytest.raises(ViTVariantsError, match='records its timm model only in open_clip_config.json') as refused:
        read_into_model(tmp_path / 'model')
    assert refused.value.key == 'visual.trunk.patch_embed.proj.weight'


def _edited(tmp_path, name: str = 'vit_medium_patch16_gap_256', **vision):
    """The folder of open_clip's ``name``, saved by open_clip with ``vision`` set in its vision_cfg."""
    import open_clip_tiny
    tiny = open_clip_tiny.tiny_config(name)
    tiny['vision_cfg'].update(vision)
    with pytest.MonkeyPatch.context() as patch, tiny_timm(trunk_name(name)):
        patch.setattr(open_clip_tiny, 'tiny_config', lambda _: tiny)
        save_tiny(name, tmp_path / 'model')
    return tmp_path / 'model'


def test_an_mlp_head_is_refused_by_name(tmp_path):
    folder = _edited(tmp_path, timm_proj='mlp')
    with tiny_timm('vit_medium_patch16_gap_256'), pytest.raises(ViTVariantsError, match="timm_proj 'mlp'") as refused:
        read_into_model(folder)
    assert refused.value.key == 'model_cfg.vision_cfg.timm_proj'


def test_a_projection_bias_the_config_does_not_state(tmp_path):
    folder = _edited(tmp_path, timm_proj_bias=True)
    cfg = json.loads((folder / 'open_clip_config.json').read_text())
    cfg['model_cfg']['vision_cfg']['timm_proj_bias'] = False
    (folder / 'open_clip_config.json').write_text(json.dumps(cfg))
    with tiny_timm('vit_medium_patch16_gap_256'), pytest.raises(ViTVariantsError, match='visual.head.proj.bias'):
        read_into_model(folder)


def test_a_pooling_reset_over_another_default_is_refused(tmp_path):
    """open_clip resets MobileCLIP2-L-14's [CLS] pooling to 'avg' after building its trunk (timm_proj 'linear'): the
    final norm stays before the pool, where [CLS] pooling put it, which this family does not express."""
    folder = _edited(tmp_path, 'MobileCLIP2-L-14', timm_proj='linear', timm_pool='avg')
    with tiny_timm('vit_large_patch14_clip_224'), \
            pytest.raises(ViTVariantsError, match="timm_pool 'avg' over a trunk built to pool 'token'") as refused:
        read_into_model(folder)
    assert refused.value.key == 'model_cfg.vision_cfg.timm_pool'


def test_a_trunk_timm_does_not_know_is_named(tmp_path):
    folder = _edited(tmp_path)
    cfg = json.loads((folder / 'open_clip_config.json').read_text())
    cfg['model_cfg']['vision_cfg']['timm_model_name'] = 'vit_no_such_model'
    (folder / 'open_clip_config.json').write_text(json.dumps(cfg))
    with pytest.raises(ViTVariantsError, match="'vit_no_such_model' is not a registered timm model") as refused:
        read_into_model(folder)
    assert refused.value.key == 'model_cfg.vision_cfg.timm_model_name'
