"""A new user's round trip (issue 32): a timm model with its own head, saved as a state dict, converted with
``vit-port convert SRC OUT`` and loaded as the README says, ``timm.create_model('local-dir:OUT', pretrained=True)``,
is that model: its class count and pooling, and timm's logits. Before, 7 of these 11 printed "verification passed"
and loaded with another head."""
import pytest
import timm
import torch

from model_probes import load_like_user
from porting.cli import main

BOUND = 2e-5
_TINY = dict(embed_dim=192, num_heads=3, depth=2)
# timm architecture -> what the user built (small widths keep timm's standard head count for 192: 3)
CASES = {
    'vit_small_patch16_224': dict(_TINY, img_size=64),
    'deit3_small_patch16_224': dict(_TINY, img_size=64),
    'vit_small_patch16_224-layerscale-gap': dict(_TINY, img_size=64, init_values=1e-5, global_pool='avg',
                                                 class_token=False),
    'vit_small_patch14_dinov2': dict(_TINY, img_size=56),
    'vit_small_patch14_reg4_dinov2': dict(_TINY, img_size=56),
    'vit_small_patch16_dinov3': dict(_TINY, img_size=64),
    'vit_base_patch16_clip_224': dict(_TINY, img_size=64),
    'vit_small_patch16_rope_224': dict(_TINY, img_size=64),
    'vit_small_patch16_rope_mixed_224': dict(_TINY, img_size=64),
    'deit_tiny_distilled_patch16_224': dict(_TINY, img_size=64),
    'vit_base_patch16_siglip_224': dict(_TINY, img_size=64),
}
CLASSES = {'vit_base_patch16_clip_224': 32}  # CLIP's projection: a head without classes, 32 wide here


@pytest.mark.parametrize('name', CASES)
def test_a_converted_timm_model_loads_back_as_itself(name, tmp_path, capsys, max_delta):
    torch.manual_seed(0)
    classes = CLASSES.get(name, 10)
    timm_model = timm.create_model(name.split('-')[0], pretrained=False, num_classes=classes, **CASES[name]).eval()
    with torch.no_grad():  # timm zero-initialises some heads: a dropped head must show in the logits
        for module in timm_model.modules():
            if isinstance(module, torch.nn.Linear) and module.out_features == classes:
                module.weight.normal_(std=0.2)
    src, out = tmp_path / f'{name}.pth', tmp_path / 'out'
    torch.save(timm_model.state_dict(), src)
    assert main(['convert', str(src), str(out)]) == 0
    assert 'verification passed' in capsys.readouterr().out
    model = load_like_user(out)
    assert model.num_classes == classes
    x = torch.randn(2, 3, CASES[name]['img_size'], CASES[name]['img_size'])
    with torch.no_grad():
        max_delta(f'{name} ({classes} classes) loaded as the README says: logits', model(x), timm_model(x), BOUND)
