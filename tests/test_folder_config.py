"""A Hub folder's ``config.json`` must describe the folder's own tensors: a folder whose config lies (depth, width,
heads or class count against the weights, an unknown or mistyped field, a nesting bomb, a negative input size)
is one ViTVariantsError naming ``config.json`` and the key, through ``timm.create_model('local-dir:...')`` and
through torch.hub; it never fails with torch's, timm's or json's errors, nor loads as another model."""
import json
import shutil
from pathlib import Path
from typing import Any, Callable, Dict

import pytest
import timm
import torch

import timm_vit_variants  # noqa: F401  (registers simple_vit_*)
from porting.hub_folder import save_pretrained_folder
from timm_vit_variants import SimpleVisionTransformer, ViTVariantsError
from timm_vit_variants.model_table import MODELS

from model_probes import load_like_user
from test_hubconf import _hubconf

_TINY = dict(embed_dim=64, num_heads=2, mlp_dim=128, depth=2, num_classes=10, img_size=(32, 32))


@pytest.fixture(scope='module')
def tiny() -> SimpleVisionTransformer:
    """A tiny 10-class simple_vit_tiny, its head non-zero (a fresh head would be zeros)."""
    torch.manual_seed(0)
    model = SimpleVisionTransformer(MODELS['simple_vit_tiny'].config().replace(**_TINY)).eval()
    torch.nn.init.normal_(model.head.weight)
    return model


@pytest.fixture(scope='module')
def folder(tmp_path_factory, tiny) -> Path:
    """``tiny`` converted to a Hub folder."""
    out = tmp_path_factory.mktemp('folder') / 'tiny'
    save_pretrained_folder(tiny, out)
    return out


def _lying(folder: Path, tmp_path: Path, change: Callable[[Dict[str, Any]], Any]) -> Path:
    """A copy of ``folder`` whose config.json is ``change(config)`` (a dict, or raw text)."""
    out = tmp_path / 'lying'
    shutil.copytree(folder, out)
    changed = change(json.loads((out / 'config.json').read_text()))
    (out / 'config.json').write_text(changed if isinstance(changed, str) else json.dumps(changed))
    return out


def _args(**changes: Any) -> Callable[[Dict[str, Any]], Dict[str, Any]]:
    return lambda c: dict(c, model_args=dict(c['model_args'], **changes))


LIES = {
    'depth': (_args(depth=3), 'blocks.2.norm1.weight'),
    'width': (_args(embed_dim=96), 'patch_embed.proj.weight'),
    'heads': (_args(num_heads=3), 'model_args.num_heads'),  # 64 wide cannot split into 3 heads
    'unknown field': (_args(foo=1), 'model_args.foo'),
    'mistyped field': (_args(depth='two'), 'model_args.depth'),
    'model_args a list': (lambda c: dict(c, model_args=[1, 2]), 'model_args'),
    'pretrained_cfg a list': (lambda c: dict(c, pretrained_cfg=[1]), 'pretrained_cfg'),
    'negative input_size': (lambda c: dict(c, pretrained_cfg=dict(c['pretrained_cfg'], input_size=[3, -32, 32])),
                            'pretrained_cfg.input_size'),
    'num_classes against head.weight': (_args(num_classes=5), 'model_args.num_classes'),
    'top-level num_classes without model_args.num_classes': (
        lambda c: dict(c, num_classes=5, model_args={k: v for k, v in c['model_args'].items() if k != 'num_classes'}),
        'model_args.num_classes'),
    'nesting bomb': (lambda c: '{"architecture": "simple_vit_tiny", "model_args": ' + '[' * 10**5 + ']' * 10**5 + '}',
                     None),
}


@pytest.mark.parametrize('lie', LIES)
def test_a_lying_config_is_one_error_naming_config_json_and_the_key(folder, tmp_path, lie):
    change, key = LIES[lie]
    lying = _lying(folder, tmp_path, change)
    with pytest.raises(ViTVariantsError) as e:
        load_like_user(lying)
    assert e.value.path == str(lying / 'config.json')
    assert e.value.key == key


def test_a_head_that_contradicts_num_classes_is_named_with_its_shape(folder, tmp_path):
    with pytest.raises(ViTVariantsError, match=r'num_classes 5 contradicts the weights: head.weight holds 10 classes '
                                               r'\(10, 64\)'):
        load_like_user(_lying(folder, tmp_path, _args(num_classes=5)))


def test_a_width_lie_names_both_shapes(folder, tmp_path):
    with pytest.raises(ViTVariantsError) as e:
        load_like_user(_lying(folder, tmp_path, _args(embed_dim=96)))
    assert e.value.shapes == ((64, 3, 16, 16), (96, 3, 16, 16))


@pytest.mark.parametrize('lie', ['depth', 'width', 'unknown field', 'num_classes against head.weight'])
def test_torch_hub_refuses_a_lying_folder(folder, tmp_path, lie):
    lying = _lying(folder, tmp_path, LIES[lie][0])
    with pytest.raises(ViTVariantsError) as e:
        _hubconf().simple_vit_tiny(pretrained=True, pretrained_cfg_overlay=dict(file=str(lying)), **_TINY)
    assert e.value.path.startswith(str(lying))


def test_the_honest_folder_loads_as_itself(folder, tiny):
    loaded = load_like_user(folder)
    theirs = loaded.state_dict()
    for key, tensor in tiny.state_dict().items():
        torch.testing.assert_close(theirs[key], tensor, rtol=0, atol=0, msg=key)


def test_a_users_own_num_classes_is_still_fine_tuning(folder, tiny):
    """timm's fine-tuning path: an explicit num_classes other than the folder's resets the head, the rest loads."""
    tuned = timm.create_model(f'local-dir:{folder}', pretrained=True, num_classes=3)
    assert tuned.num_classes == 3 and tuned.head.weight.shape == (3, 64)
    theirs = tuned.state_dict()
    for key, tensor in tiny.state_dict().items():
        if not key.startswith('head.'):
            torch.testing.assert_close(theirs[key], tensor, rtol=0, atol=0, msg=key)
