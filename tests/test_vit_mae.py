"""MAE's encoder (families/vit_mae.py): transformers' ``ViTMAEModel`` and ``ViTMAEForPreTraining`` folders, built tiny
by transformers with random weights and saved with ``save_pretrained``. Each converts, verified by the converter
against the class itself, loads as a user loads it, and gives transformers' own tokens at three grids.

Assumed, as the reference assumes it: the encoder is compared unmasked and in order (``mask_ratio=0``, rising
``noise``); its random masking is a training-time input, not part of the network."""
import json

import pytest
import torch

from checkpoint_fixtures import perturb
from model_probes import load_like_user
from porting.pipeline import convert
from timm_vit_variants.errors import ViTVariantsError

transformers = pytest.importorskip('transformers')

V = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, image_size=32, patch_size=8)
BOUND = 2e-5


def _build(cls: str):
    torch.manual_seed(0)
    model = getattr(transformers, cls)(transformers.ViTMAEConfig(**V))
    return perturb(model)


@pytest.mark.parametrize('cls', ['ViTMAEModel', 'ViTMAEForPreTraining'])
def test_vit_mae_folder_gives_its_encoders_tokens_at_three_grids(cls, tmp_path, max_delta):
    source = _build(cls)
    source.save_pretrained(str(tmp_path / 'src'))
    result = convert(tmp_path / 'src', tmp_path / 'out')
    assert result.verification.status == 'passed', result.verification.summary()
    ours = load_like_user(tmp_path / 'out')
    encoder = source.vit if cls == 'ViTMAEForPreTraining' else source
    encoder.config.mask_ratio = 0.0
    for h, w in ((32, 32), (48, 48), (40, 24)):
        x = torch.randn(2, 3, h, w, generator=torch.Generator().manual_seed(1))
        patches = (h // 8) * (w // 8)
        noise = torch.arange(patches, dtype=torch.float32).expand(2, patches)
        with torch.no_grad():
            expected = encoder(pixel_values=x, noise=noise, interpolate_pos_encoding=(h, w) != (32, 32)).last_hidden_state
            tokens, pooled = ours.forward_features(x), ours(x)
        max_delta(f'{cls} tokens at {h}x{w}', tokens, expected, BOUND)
        max_delta(f'{cls} pooled (the normed [CLS]) at {h}x{w}', pooled, expected[:, 0], BOUND)


def test_vit_mae_pretraining_folder_leaves_the_decoder_out_with_a_note(tmp_path):
    _build('ViTMAEForPreTraining').save_pretrained(str(tmp_path / 'src'))
    result = convert(tmp_path / 'src', tmp_path / 'out')
    assert any('pre-training decoder' in n for n in result.notes), result.notes
    assert not any(k.startswith('decoder') for k in load_like_user(tmp_path / 'out').state_dict())


def test_vit_mae_config_contradicting_its_tensors_is_named(tmp_path):
    _build('ViTMAEModel').save_pretrained(str(tmp_path / 'src'))
    config_path = tmp_path / 'src' / 'config.json'
    config = dict(json.loads(config_path.read_text()), num_hidden_layers=1)
    config_path.write_text(json.dumps(config))
    with pytest.raises(ViTVariantsError) as error:
        convert(tmp_path / 'src', tmp_path / 'out')
    assert str(tmp_path / 'src') in str(error.value) and error.value.key is not None, error.value
    assert not (tmp_path / 'out').exists()
