"""timm's SAM image encoders (``vision_transformer_sam``: ``samvit_*``), built tiny by timm with random weights (the
relative-position tables and the neck included) and saved with its ``save_for_hf``: converted with the CLI, loaded
back as a user does, and equal to timm at the stored grid, another square grid and a non-square one (timm's SAM runs
any whole-patch input, resizing its table and its relative-position tables as it runs)."""
import subprocess
import sys
from pathlib import Path

import pytest
import timm
import torch
from timm.models import save_for_hf

from model_probes import load_like_user
from porting.pipeline import convert
from timm_vit_variants import ViTVariantsError

REPO = Path(__file__).resolve().parents[1]
TOL = 2e-5
# depth 2: block 0 windowed (3x3 windows over an 8x8 grid: padded to 9x9), block 1 global
TINY = dict(img_size=64, patch_size=8, embed_dim=32, depth=2, num_heads=2, window_size=3, global_attn_indexes=[1])
CASES = {
    'samvit_base_patch16': dict(neck_chans=16),  # learned table, conv neck, no classifier (as published)
    'samvit_large_patch16': dict(neck_chans=16, num_classes=5),  # with a classifier over the neck's mean
    'samvit_huge_patch16': dict(neck_chans=16, init_values=0.1, qkv_bias=False),  # LayerScale, no qkv bias
    'samvit_base_patch16_224': {},  # no table, LayerNorm2d neck, a 1000-class head
}
GRIDS = ((64, 64), (96, 96), (72, 40))  # the stored 8x8 grid, 12x12, 9x5 (neither a multiple of the window)


def _folder(tmp_path: Path, arch: str, extra: dict):
    args = dict(TINY, **extra)
    model = timm.create_model(arch, **args).eval()
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(1.0 if p.ndim == 1 and name.endswith('weight') else 0.0, 0.2)
    folder = tmp_path / arch
    save_for_hf(model, str(folder), model_args=args)
    return folder, model


@pytest.mark.parametrize('arch', sorted(CASES))
def test_a_timm_sam_folder_converts_with_the_cli_and_runs_as_timm_at_any_grid(tmp_path, arch, max_delta):
    folder, reference = _folder(tmp_path, arch, CASES[arch])
    out = tmp_path / 'out'
    proc = subprocess.run([sys.executable, '-m', 'porting', 'convert', str(folder), str(out)], capture_output=True,
                          text=True, cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert 'verification passed' in proc.stdout, proc.stdout
    ours = load_like_user(out)
    for grid in GRIDS:
        x = torch.randn(2, 3, *grid, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            max_delta(f'{arch} at {grid}: output', ours(x), reference(x), TOL)
            max_delta(f'{arch} at {grid}: the neck as tokens', ours.forward_features(x),
                      reference.forward_features(x).flatten(2).transpose(1, 2), TOL)


@pytest.mark.parametrize('arch', ['samvit_base_patch16', 'samvit_base_patch16_224'])
def test_a_sam_folder_converted_to_another_grid_runs_as_timm_there(tmp_path, arch, max_delta):
    """The table resized once by timm's rule; the global blocks' tables kept at their trained grid and resized as the
    model runs, as timm resizes them on each call."""
    folder, reference = _folder(tmp_path, arch, CASES[arch])
    out = tmp_path / 'out'
    proc = subprocess.run([sys.executable, '-m', 'porting', 'convert', str(folder), str(out), '--img-size', '72',
                           '40'], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert proc.returncode == 0 and 'target geometry (72x40, patch 8) passed' in proc.stdout, proc.stdout + proc.stderr
    ours = load_like_user(out)
    x = torch.randn(2, 3, 72, 40, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        max_delta(f'{arch} converted to 72x40', ours(x), reference(x), TOL)


def test_a_sam_model_resized_in_place_runs_as_timm_at_its_new_grid(tmp_path, max_delta):
    folder, reference = _folder(tmp_path, 'samvit_base_patch16', CASES['samvit_base_patch16'])
    convert(folder, tmp_path / 'out')
    ours = load_like_user(tmp_path / 'out')
    ours.set_input_size(img_size=(80, 48))
    x = torch.randn(1, 3, 80, 48, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        max_delta('samvit at a new nominal 10x6 grid', ours(x), reference(x), TOL)


def test_sam_takes_no_naflex_input_as_timm_defines_none(tmp_path):
    folder, _ = _folder(tmp_path, 'samvit_base_patch16', CASES['samvit_base_patch16'])
    convert(folder, tmp_path / 'out')
    ours = load_like_user(tmp_path / 'out')
    with pytest.raises(ViTVariantsError, match='NCHW batch'):
        ours([torch.randn(3, 64, 64), torch.randn(3, 48, 64)])


@pytest.mark.parametrize('extra, key', [
    (dict(use_rope=True, use_rel_pos=False), 'architecture'),  # timm's RotaryEmbeddingCat: not expressed
    (dict(pre_norm=True), 'model_args.pre_norm'),
    (dict(global_pool='max'), 'architecture'),  # timm's AdaptiveMaxPool2d
    (dict(head_hidden_size=24), 'architecture'),  # timm's NormMlpClassifierHead
])
def test_sam_options_without_an_equivalent_are_refused_by_name(tmp_path, extra, key):
    folder, _ = _folder(tmp_path, 'samvit_base_patch16', dict(CASES['samvit_base_patch16'], **extra))
    with pytest.raises(ViTVariantsError) as info:
        convert(folder, tmp_path / 'out')
    assert info.value.key == key and str(folder / 'config.json') in str(info.value), str(info.value)
    assert len(str(info.value).splitlines()) == 1


def test_a_sam_config_survives_the_flat_model_args_a_folder_records():
    from timm_vit_variants.config import SimpleViTConfig
    from timm_vit_variants.families.sam_parts import SamNeck, SamWindows
    from timm_vit_variants.parts import BlockPart, HeadPart, Learned

    config = SimpleViTConfig.of(img_size=64, patch_size=8, embed_dim=32, depth=3, num_heads=2, num_classes=0,
                                positions=(Learned(resample='timm'), SamWindows(window_size=3, global_blocks=(1, 2))),
                                block=BlockPart(kind='sam', act='gelu'), head=HeadPart(pool=SamNeck(chans=16)))
    assert SimpleViTConfig.from_dict(config.to_flat()) == config
