"""Janus's image tower (families/janus.py): transformers' ``JanusVisionModel``, built tiny with random weights and
saved with ``save_pretrained``. It converts (verified by the converter against the class itself), loads as a user
loads it, and gives the class's tokens and pooled output (the first token normed twice) at three grids
(``interpolate_pos_encoding`` away from the stored one); its q/k norm, and a config that contradicts the tensors, are
refused with file and key."""
import json

import pytest
import torch

from checkpoint_fixtures import perturb
from model_probes import load_like_user
from porting.pipeline import convert
from timm_vit_variants.errors import ViTVariantsError

transformers = pytest.importorskip('transformers')

V = dict(hidden_size=32, mlp_ratio=3.0, num_hidden_layers=2, num_attention_heads=2, image_size=32, patch_size=8)
BOUND = 2e-5


def _vision_model(**kwargs):
    torch.manual_seed(0)
    model = transformers.JanusVisionModel(transformers.JanusVisionConfig(**dict(V, **kwargs)))
    return perturb(model)


@pytest.mark.parametrize('bias', [True, False], ids=['attention_bias', 'no_attention_bias'])
def test_janus_folder_gives_its_tokens_and_pooled_output_at_three_grids(bias, tmp_path, max_delta):
    source = _vision_model(attention_bias=bias)
    source.save_pretrained(str(tmp_path / 'src'))
    result = convert(tmp_path / 'src', tmp_path / 'out')
    assert result.verification.status == 'passed', result.verification.summary()
    ours = load_like_user(tmp_path / 'out')
    for size in (32, 48, (40, 24)):
        h, w = (size, size) if isinstance(size, int) else size
        x = torch.randn(2, 3, h, w, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            expected = source(pixel_values=x, interpolate_pos_encoding=(h, w) != (32, 32))
            tokens = ours.forward_features(x)
            pooled = ours(x)
        max_delta(f'JanusVisionModel tokens at {h}x{w}', tokens, expected.last_hidden_state, BOUND)
        max_delta(f'JanusVisionModel pooled (first token normed twice) at {h}x{w}', pooled, expected.pooler_output,
                  BOUND)


def test_janus_folder_at_another_grid_is_verified_by_transformers_resize(tmp_path):
    _vision_model().save_pretrained(str(tmp_path / 'src'))
    result = convert(tmp_path / 'src', tmp_path / 'out', img_size=48)
    assert result.verification.status == 'passed', result.verification.summary()
    assert any(n.startswith('target geometry (48x48, patch 8) passed vs transformers JanusVisionModel.from_pretrained'
                            ' with interpolate_pos_encoding') for n in result.verification.notes), \
        result.verification.notes


@pytest.mark.parametrize('key, value', [('mlp_ratio', 2.0), ('use_qk_norm', True)])
def test_janus_config_contradicting_or_beyond_its_tensors_is_named(key, value, tmp_path):
    _vision_model().save_pretrained(str(tmp_path / 'src'))
    config_path = tmp_path / 'src' / 'config.json'
    config = json.loads(config_path.read_text())
    config[key] = value
    config_path.write_text(json.dumps(config))
    with pytest.raises(ViTVariantsError) as error:
        convert(tmp_path / 'src', tmp_path / 'out')
    assert str(tmp_path / 'src') in str(error.value) and error.value.key is not None, error.value
    assert not (tmp_path / 'out').exists()
