"""Phi-4-multimodal's image tower (families/phi4mm.py): transformers' ``Phi4MultimodalVisionModel``, built tiny with
random weights and saved with ``save_pretrained``. It converts by the SigLIP rules (verified by the converter against
the class itself) and gives the class's tokens and MAP-pooled output at its stored grid; a conversion to another grid
fails naming the class's bucketed table lookup; a config that contradicts the tensors is refused with file and key."""
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
BOUND = 2e-5


def _vision_model():
    torch.manual_seed(0)
    model = transformers.Phi4MultimodalVisionModel(transformers.Phi4MultimodalVisionConfig(**V))
    return perturb(model)


def test_phi4mm_folder_gives_its_tokens_and_pooled_output(tmp_path, max_delta):
    source = _vision_model()
    source.save_pretrained(str(tmp_path / 'src'))
    result = convert(tmp_path / 'src', tmp_path / 'out')
    assert result.verification.status == 'passed', result.verification.summary()
    ours = load_like_user(tmp_path / 'out')
    # eager attention, as the converter's reference runs it (this class's sdpa path gives other numbers in
    # transformers 5.25)
    source = transformers.Phi4MultimodalVisionModel.from_pretrained(str(tmp_path / 'src'),
                                                                    attn_implementation='eager').eval()
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = source(pixel_values=x)
        tokens = ours.forward_features(x)
        pooled = ours(x)
    max_delta('Phi4MultimodalVisionModel tokens', tokens, expected.last_hidden_state, BOUND)
    # the MAP head's output reaches ~75 here: float32 noise scales with it
    scale = max(1.0, float(expected.pooler_output.abs().max()))
    max_delta('Phi4MultimodalVisionModel pooled (MAP head)', pooled, expected.pooler_output, BOUND * scale)


def test_phi4mm_folder_at_another_grid_fails_naming_the_lookup(tmp_path):
    _vision_model().save_pretrained(str(tmp_path / 'src'))
    with pytest.raises(ViTVariantsError) as error:
        convert(tmp_path / 'src', tmp_path / 'out', img_size=48)
    assert 'bucketed patch coordinates' in str(error.value), error.value
    assert not (tmp_path / 'out').exists()


def test_phi4mm_config_contradicting_its_tensors_is_named(tmp_path):
    _vision_model().save_pretrained(str(tmp_path / 'src'))
    config_path = tmp_path / 'src' / 'config.json'
    config = json.loads(config_path.read_text())
    config['intermediate_size'] = 96
    config_path.write_text(json.dumps(config))
    with pytest.raises(ViTVariantsError) as error:
        convert(tmp_path / 'src', tmp_path / 'out')
    assert str(tmp_path / 'src') in str(error.value) and error.value.key is not None, error.value
    assert not (tmp_path / 'out').exists()
