"""FLAVA's image tower (families/flava.py): transformers' ``FlavaImageModel`` and ``FlavaModel``, built tiny with
random weights and saved with ``save_pretrained``. Each converts to its image model (verified by the converter against
the class itself), loads as a user loads it, and gives the image model's tokens and pooled output at three grids
(``interpolate_pos_encoding`` away from the stored one); a config that contradicts the tensors is refused with file
and key."""
import json

import pytest
import torch

from checkpoint_fixtures import perturb
from model_probes import load_like_user
from porting.pipeline import convert
from timm_vit_variants.errors import ViTVariantsError

transformers = pytest.importorskip('transformers')

V = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=32,
         patch_size=8)
T = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, vocab_size=64,
         max_position_embeddings=8)
BOUND = 2e-5


def _image_model():
    torch.manual_seed(0)
    return perturb(transformers.FlavaImageModel(transformers.FlavaImageConfig(**V)))


def _model():
    torch.manual_seed(0)
    return perturb(transformers.FlavaModel(transformers.FlavaConfig(
        image_config=V, text_config=T, projection_dim=16,
        multimodal_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2))))


@pytest.mark.parametrize('build', [_image_model, _model], ids=['FlavaImageModel', 'FlavaModel'])
def test_flava_folder_gives_its_image_models_output_at_three_grids(build, tmp_path, max_delta):
    source = build()
    source.save_pretrained(str(tmp_path / 'src'))
    result = convert(tmp_path / 'src', tmp_path / 'out')
    assert result.verification.status == 'passed', result.verification.summary()
    ours = load_like_user(tmp_path / 'out')
    tower = getattr(source, 'image_model', source)
    for size in (32, 48, (40, 24)):
        h, w = (size, size) if isinstance(size, int) else size
        x = torch.randn(2, 3, h, w, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            expected = tower(pixel_values=x, interpolate_pos_encoding=(h, w) != (32, 32))
            tokens = ours.forward_features(x)
            pooled = ours(x)
        name = type(source).__name__
        max_delta(f'{name} tokens at {h}x{w}', tokens, expected.last_hidden_state, BOUND)
        max_delta(f'{name} pooled (tanh pooler) at {h}x{w}', pooled, expected.pooler_output, BOUND)


def test_flava_folder_at_another_grid_is_verified_by_transformers_resize(tmp_path):
    _model().save_pretrained(str(tmp_path / 'src'))
    result = convert(tmp_path / 'src', tmp_path / 'out', img_size=48)
    assert result.verification.status == 'passed', result.verification.summary()
    assert any(n.startswith('target geometry (48x48, patch 8) passed vs transformers FlavaModel.from_pretrained'
                            '.image_model with interpolate_pos_encoding')
               for n in result.verification.notes), result.verification.notes


def test_flava_config_contradicting_its_tensors_is_named(tmp_path):
    _model().save_pretrained(str(tmp_path / 'src'))
    config_path = tmp_path / 'src' / 'config.json'
    config = json.loads(config_path.read_text())
    config['image_config']['num_attention_heads'] = 3
    config_path.write_text(json.dumps(config))
    with pytest.raises(ViTVariantsError) as error:
        convert(tmp_path / 'src', tmp_path / 'out')
    assert 'config.json' in str(error.value) and error.value.key is not None, error.value
    assert not (tmp_path / 'out').exists()
