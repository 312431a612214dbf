"""GIT's image tower (families/git.py): transformers' ``GitVisionModel`` folders and the captioning model's image
encoder (``GitForCausalLM``, the published form), built tiny by transformers with random weights and saved with
``save_pretrained``. Each converts, verified by the converter against the class itself, loads as a user loads it,
and gives transformers' own tokens at three grids (``interpolate_pos_encoding`` away from the stored one)."""
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
TEXT = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, vocab_size=128,
            max_position_embeddings=8, bos_token_id=1, eos_token_id=2, pad_token_id=0)
BOUND = 2e-5


def _vision_model():
    torch.manual_seed(0)
    return perturb(transformers.GitVisionModel(transformers.GitVisionConfig(**V)))


def _captioner(cls: str = 'GitForCausalLM'):
    torch.manual_seed(0)
    return perturb(getattr(transformers, cls)(transformers.GitConfig(vision_config=V, **TEXT)))


@pytest.mark.parametrize('build', [_vision_model, _captioner, lambda: _captioner('GitModel')],
                         ids=['GitVisionModel', 'GitForCausalLM', 'GitModel'])
def test_git_folder_gives_its_image_encoders_tokens_at_three_grids(build, tmp_path, max_delta):
    source = build()
    source.save_pretrained(str(tmp_path / 'src'))
    result = convert(tmp_path / 'src', tmp_path / 'out')
    assert result.verification.status == 'passed', result.verification.summary()
    ours = load_like_user(tmp_path / 'out')
    tower = source if isinstance(source, transformers.GitVisionModel) else getattr(source, 'git', source).image_encoder
    for size in (32, 48, (40, 24)):
        h, w = (size, size) if isinstance(size, int) else size
        x = torch.randn(2, 3, h, w, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            expected = tower(pixel_values=x, interpolate_pos_encoding=(h, w) != (32, 32)).last_hidden_state
            tokens = ours.forward_features(x)
            pooled = ours(x)
        name = type(source).__name__
        max_delta(f'{name} tokens at {h}x{w}', tokens, expected, BOUND)
        max_delta(f'{name} pooled (the normed [CLS]) at {h}x{w}', pooled, expected[:, 0], BOUND)


def test_git_folder_at_another_grid_is_verified_by_transformers_resize(tmp_path):
    _vision_model().save_pretrained(str(tmp_path / 'src'))
    result = convert(tmp_path / 'src', tmp_path / 'out', img_size=48)
    assert result.verification.status == 'passed', result.verification.summary()
    assert any(n.startswith('target geometry (48x48, patch 8) passed vs transformers GitVisionModel.from_pretrained '
                            'with interpolate_pos_encoding') for n in result.verification.notes), result.verification.notes


def test_git_config_contradicting_its_tensors_is_named(tmp_path):
    _vision_model().save_pretrained(str(tmp_path / 'src'))
    config_path = tmp_path / 'src' / 'config.json'
    config = json.loads(config_path.read_text())
    config['hidden_size'] = 64
    config_path.write_text(json.dumps(config))
    with pytest.raises(ViTVariantsError) as error:
        convert(tmp_path / 'src', tmp_path / 'out')
    assert str(tmp_path / 'src') in str(error.value) and error.value.key is not None, error.value
    assert not (tmp_path / 'out').exists()
