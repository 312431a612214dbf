"""InternVL's image tower (families/internvl.py): transformers' ``InternVLVisionModel``, built tiny with random
weights (LayerScale, with and without the final norm and the attention bias) and saved with ``save_pretrained``. It
converts (verified by the converter against the class itself), loads as a user loads it, and gives the class's tokens
at three grids (the class resizes its table itself); what it does not express, and a config that contradicts the
tensors, are refused with file and key."""
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


def _vision_model(**kwargs):
    torch.manual_seed(0)
    model = transformers.InternVLVisionModel(transformers.InternVLVisionConfig(**dict(V, **kwargs)))
    return perturb(model, scale=0.3)


@pytest.mark.parametrize('kwargs', [{}, dict(use_mean_pooling=False, attention_bias=True)],
                         ids=['defaults', 'final_norm_and_bias'])
def test_internvl_folder_gives_its_tokens_at_three_grids(kwargs, tmp_path, max_delta):
    source = _vision_model(**kwargs)
    source.save_pretrained(str(tmp_path / 'src'))
    result = convert(tmp_path / 'src', tmp_path / 'out')
    assert result.verification.status == 'passed', result.verification.summary()
    ours = load_like_user(tmp_path / 'out')
    for size in (32, 48, (40, 24)):
        h, w = (size, size) if isinstance(size, int) else size
        x = torch.randn(2, 3, h, w, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            expected = source(pixel_values=x).last_hidden_state
            tokens = ours.forward_features(x)
        max_delta(f'InternVLVisionModel tokens at {h}x{w}', tokens, expected, BOUND)


@pytest.mark.parametrize('key, value, reason', [
    ('use_qk_norm', True, 'q/k RMSNorm'), ('norm_type', 'rms_norm', 'RMSNorm'),
    ('num_hidden_layers', 1, 'inconsistent depth')])
def test_internvl_config_beyond_or_contradicting_its_tensors_is_named(key, value, reason, tmp_path):
    _vision_model().save_pretrained(str(tmp_path / 'src'))
    config_path = tmp_path / 'src' / 'config.json'
    config = json.loads(config_path.read_text())
    config[key] = value
    config_path.write_text(json.dumps(config))
    with pytest.raises(ViTVariantsError) as error:
        convert(tmp_path / 'src', tmp_path / 'out')
    assert str(tmp_path / 'src') in str(error.value) and error.value.key is not None, error.value
    assert reason in str(error.value), error.value
    assert not (tmp_path / 'out').exists()
