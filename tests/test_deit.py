"""DeiT v1, plain and distilled: DeiT's own ``{'model': ...}`` releases against outputs written by facebookresearch/deit's
own code (tests/data/reference_deit, see its README), and timm's ``deit_*_distilled`` weights against timm, each
converted with ``vit-port convert`` and loaded the way the README tells users."""
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from safetensors.torch import save_file

from model_probes import load_like_user
from porting.cli import main
from timm_vit_variants.checkpoints import open_checkpoint
from timm_vit_variants.errors import ViTVariantsError

DATA = Path(__file__).parent / 'data' / 'reference_deit'
GRIDS = {'6x6': 6, '12x12': 12, '4x4': 4}  # stored, and the two that DeiT's main.py resized to
BOUND = 2e-5
_MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 3, 1, 1)
_STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(1, 3, 1, 1)


def _input(side: int) -> torch.Tensor:
    """The fixtures' input at a side x side grid: the top-left crop of the stored uint8 images, ImageNet-normalised."""
    u8 = np.load(DATA / 'inputs.npz')['p16_uint8'][:, :, :side * 16, :side * 16]
    return torch.from_numpy((u8.astype(np.float32) / np.float32(255) - _MEAN) / _STD)


def _convert(src: Path, out: Path, capsys, *extra: str) -> str:
    assert main(['convert', str(src), str(out), '--num-heads', '4', *extra]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize('name', ['deit_tiny', 'deit_tiny_distilled'])
def test_deit_release_matches_deit_at_three_grids(name, tmp_path, capsys, max_delta):
    printed = _convert(DATA / f'{name}.pth', tmp_path / 'out', capsys)
    kind = 'DistilledVisionTransformer' if name.endswith('distilled') else 'VisionTransformer'
    assert 'verification passed' in printed and f"DeiT's {kind}" in printed  # the architecture, named as assumed
    assert 'the head count 4 was given' in printed and "table resize rule 'deit'" in printed
    model = load_like_user(tmp_path / 'out')
    assert model.num_classes == 10 and model.head.out_features == 10
    io = np.load(DATA / f'{name}_io.npz')
    for grid, side in GRIDS.items():  # the stored 6x6 table resized by the model's 'deit' rule at run time
        x = _input(side)
        with torch.no_grad():
            max_delta(f'{name} logits {grid}', model(x), io[f'logits_{grid}'], BOUND)
            max_delta(f'{name} tokens {grid}', model.forward_features(x), io[f'tokens_{grid}'], BOUND)
            if kind == 'DistilledVisionTransformer':
                model.set_distilled_training()
                model.train()
                head, head_dist = model(x)
                model.eval()
                max_delta(f'{name} head {grid}', head, io[f'head_{grid}'], BOUND)
                max_delta(f'{name} head_dist {grid}', head_dist, io[f'head_dist_{grid}'], BOUND)


@pytest.mark.parametrize('name', ['deit_tiny', 'deit_tiny_distilled'])
@pytest.mark.parametrize('grid', ['12x12', '4x4'])
def test_deit_release_converted_to_deits_grids(name, grid, tmp_path, capsys, max_delta):
    side = GRIDS[grid]
    printed = _convert(DATA / f'{name}.pth', tmp_path / 'out', capsys, '--img-size', str(16 * side))
    assert f'target geometry ({16 * side}x{16 * side}, patch 16) passed' in printed
    model = load_like_user(tmp_path / 'out')
    assert model.num_classes == 10
    io = np.load(DATA / f'{name}_io.npz')
    max_delta(f'{name} written table {grid}', model.pos_embed, io[f'pos_embed_{grid}'], BOUND)
    with torch.no_grad():
        max_delta(f'{name} logits at {grid}', model(_input(side)), io[f'logits_{grid}'], BOUND)


def test_deit_release_to_a_non_square_grid_is_not_verified(tmp_path, capsys):
    """DeiT's main.py resizes square grids only (its load_state_dict refuses a 9x6 model): no reference, said so."""
    assert main(['convert', str(DATA / 'deit_tiny_distilled.pth'), str(tmp_path / 'out'), '--num-heads', '4',
                 '--img-size', '144', '96']) == 0
    printed = capsys.readouterr().out
    assert "was NOT checked: DeiT's main.py resizes the table to square grids only, and 9x6 is not one" in printed


def _timm_distilled(**kwargs) -> torch.nn.Module:
    torch.manual_seed(0)
    model = timm.create_model('deit_tiny_distilled_patch16_224', pretrained=False, img_size=96, embed_dim=64, depth=2,
                              num_heads=4, num_classes=10, **kwargs).eval()
    with torch.no_grad():  # timm zero-initialises nothing that matters here but the heads: give them values
        for head in (model.head, model.head_dist):
            head.weight.normal_(std=0.2)
            head.bias.normal_(std=0.2)
    return model


def test_timm_deit_distilled_state_dict_matches_timm(tmp_path, capsys, max_delta):
    ref = _timm_distilled(dynamic_img_size=True)
    save_file(ref.state_dict(), str(tmp_path / 'model.safetensors'))
    printed = _convert(tmp_path / 'model.safetensors', tmp_path / 'out', capsys)
    assert 'verification passed' in printed and 'VisionTransformerDistilled' in printed
    model = load_like_user(tmp_path / 'out')
    assert model.num_classes == 10
    for side in GRIDS.values():  # timm resizes at run time with its own resample_abs_pos_embed (our 'timm' rule)
        x = _input(side)
        with torch.no_grad():
            max_delta(f'timm distilled logits {side}x{side}', model(x), ref(x), BOUND)
            max_delta(f'timm distilled tokens {side}x{side}', model.forward_features(x), ref.forward_features(x), BOUND)
            max_delta(f'timm distilled pooled {side}x{side}', model.forward_head(model.forward_features(x), True),
                      ref.forward_head(ref.forward_features(x), True), BOUND)


def test_timm_deit_distilled_folder_matches_timm(tmp_path, capsys, max_delta):
    from timm.models import save_for_hf

    ref = _timm_distilled()
    save_for_hf(ref, str(tmp_path / 'timm'))
    printed = _convert(tmp_path / 'timm', tmp_path / 'out', capsys, '--img-size', '192')
    assert 'verification passed' in printed and 'target geometry (192x192, patch 16) passed' in printed
    model = load_like_user(tmp_path / 'out')
    assert model.num_classes == 10
    at_192 = _timm_distilled(dynamic_img_size=True)
    with torch.no_grad():
        max_delta('timm distilled folder logits 12x12', model(_input(12)), at_192(_input(12)), BOUND)


def test_dist_token_of_another_width_is_refused(tmp_path, capsys):
    state = torch.load(DATA / 'deit_tiny_distilled.pth', weights_only=True)['model']
    state['dist_token'] = state['dist_token'][..., :32]
    path = tmp_path / 'bad_deit.pth'
    torch.save({'model': state}, path)
    with pytest.raises(ViTVariantsError) as caught:
        open_checkpoint(path, num_heads=4)
    assert caught.value.key == 'dist_token' and caught.value.path == str(path)
    assert main(['convert', str(path), str(tmp_path / 'out'), '--num-heads', '4']) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith('error:') and 'dist_token' in err[0] and 'bad_deit.pth' in err[0]
    assert not (tmp_path / 'out').exists()
