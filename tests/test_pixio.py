"""Pixio: a transformers ``PixioModel`` folder, tiny with random weights (its class tokens, table and norms moved off
their init), converts, verified against the class itself; the converted folder, loaded as a user loads it, gives
the class's tokens and pooled output (the mean of its normed class tokens) at its own grid and, where the class
resizes its table by itself, at a larger and a non-square one; a config contradicting the tensors is refused by
name."""
import json

import pytest
import torch

from model_probes import load_like_user
from porting.cli import main

transformers = pytest.importorskip('transformers')

BOUND = 2e-5
_CONFIG = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, mlp_ratio=2, image_size=32, patch_size=8)


def _folder(path, n_cls_tokens):
    torch.manual_seed(0)
    model = transformers.PixioModel(transformers.PixioConfig(**_CONFIG, n_cls_tokens=n_cls_tokens)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(str(path))
    return model


@pytest.mark.parametrize('n_cls_tokens', [1, 4])
def test_folder_converts_and_matches_the_class_at_three_grids(tmp_path, n_cls_tokens, capsys, max_delta):
    source = _folder(tmp_path / 'src', n_cls_tokens)
    assert main(['convert', str(tmp_path / 'src'), str(tmp_path / 'out')]) == 0
    assert 'verification passed vs transformers PixioModel.from_pretrained' in capsys.readouterr().out
    assert load_like_user(tmp_path / 'out').num_prefix_tokens == n_cls_tokens
    for size in ((32, 32), (48, 48), (40, 56)):
        x = torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(1))
        model = load_like_user(tmp_path / 'out')  # each grid resized from the stored one, as the class does
        model.set_input_size(img_size=size)
        with torch.no_grad():
            expected = source(pixel_values=x)
            tokens = model.forward_features(x)
            max_delta(f'pixio {n_cls_tokens} class tokens {size}: tokens', tokens, expected.last_hidden_state, BOUND)
            max_delta(f'pixio {n_cls_tokens} class tokens {size}: pooled', model.forward_head(tokens),
                      expected.pooler_output, BOUND)


def test_a_config_contradicting_the_tensors_is_refused(tmp_path, capsys):
    _folder(tmp_path / 'src', 4)
    path = tmp_path / 'src' / 'config.json'
    path.write_text(json.dumps(dict(json.loads(path.read_text()), n_cls_tokens=2)))
    capsys.readouterr()
    assert main(['convert', str(tmp_path / 'src'), str(tmp_path / 'out')]) == 1
    err = capsys.readouterr().err
    assert err.count('error:') == 1 and 'n_cls_tokens=2' in err and 'embeddings.cls_token' in err, err
    assert 'Traceback' not in err and not (tmp_path / 'out').exists()
