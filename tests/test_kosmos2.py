"""Kosmos-2's image tower (families/kosmos2.py): transformers' ``Kosmos2Model`` and
``Kosmos2ForConditionalGeneration``, built tiny with random weights and saved with ``save_pretrained``. Each
converts to its vision model (verified by the converter against the class itself), loads as a user loads it, and
gives the vision model's tokens and pooled output at three grids (``interpolate_pos_encoding`` away from the stored
one); a config that contradicts the tensors is refused with file and key."""
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
TEXT = dict(embed_dim=16, ffn_dim=32, layers=1, attention_heads=2, vocab_size=64)
BOUND = 2e-5


def _kosmos2(cls: str = 'Kosmos2Model'):
    torch.manual_seed(0)
    model = getattr(transformers, cls)(transformers.Kosmos2Config(vision_config=V, text_config=TEXT,
                                                                  latent_query_num=4))
    return perturb(model)


@pytest.mark.parametrize('cls', ['Kosmos2Model', 'Kosmos2ForConditionalGeneration'])
def test_kosmos2_folder_gives_its_vision_models_output_at_three_grids(cls, tmp_path, max_delta):
    source = _kosmos2(cls)
    source.save_pretrained(str(tmp_path / 'src'))
    result = convert(tmp_path / 'src', tmp_path / 'out')
    assert result.verification.status == 'passed', result.verification.summary()
    ours = load_like_user(tmp_path / 'out')
    for size in (32, 48, (40, 24)):
        h, w = (size, size) if isinstance(size, int) else size
        x = torch.randn(2, 3, h, w, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            expected = source.vision_model(pixel_values=x, interpolate_pos_encoding=(h, w) != (32, 32))
            tokens = ours.forward_features(x)
            pooled = ours(x)
        max_delta(f'{cls} tokens at {h}x{w}', tokens, expected.last_hidden_state, BOUND)
        max_delta(f'{cls} pooled (the [CLS] through post_layernorm) at {h}x{w}', pooled, expected.pooler_output,
                  BOUND)


def test_kosmos2_folder_at_another_grid_is_verified_by_transformers_resize(tmp_path):
    _kosmos2().save_pretrained(str(tmp_path / 'src'))
    result = convert(tmp_path / 'src', tmp_path / 'out', img_size=48)
    assert result.verification.status == 'passed', result.verification.summary()
    assert any(n.startswith('target geometry (48x48, patch 8) passed vs transformers Kosmos2Model.from_pretrained'
                            '.vision_model with interpolate_pos_encoding')
               for n in result.verification.notes), result.verification.notes


def test_kosmos2_config_contradicting_its_tensors_is_named(tmp_path):
    _kosmos2().save_pretrained(str(tmp_path / 'src'))
    config_path = tmp_path / 'src' / 'config.json'
    config = json.loads(config_path.read_text())
    config['vision_config']['hidden_size'] = 64
    config_path.write_text(json.dumps(config))
    with pytest.raises(ViTVariantsError) as error:
        convert(tmp_path / 'src', tmp_path / 'out')
    assert str(tmp_path / 'src') in str(error.value) and error.value.key is not None, error.value
    assert not (tmp_path / 'out').exists()
