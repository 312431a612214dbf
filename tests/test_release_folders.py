"""Every Hub folder release 0.2.0 wrote still loads with the same outputs, so users never reconvert.

``tests/data/release_folders/`` holds tiny folders written by that release (one per feature combination of the
registered rows, and a few made by ``vit-port convert``) with the outputs it gave (``expected.safetensors``: the
input and ``forward`` / ``forward_features`` at the stored size and at one other, non-square size). The bound is
float32 noise; today the outputs are bitwise equal. See the folder's README.md for how they were made.
"""
from pathlib import Path

import pytest
import timm
import torch
from safetensors.torch import load_file

import timm_vit_variants  # noqa: F401  (registers simple_vit_* and the local-dir: loader)

DATA = Path(__file__).parent / 'data' / 'release_folders'
FOLDERS = sorted(p.name for p in DATA.iterdir() if (p / 'config.json').is_file())
BOUND = 1e-6


def test_every_release_folder_is_present():
    assert len(FOLDERS) == 26, FOLDERS  # a deleted or added folder changes this count


@pytest.mark.parametrize('name', FOLDERS)
def test_release_folder_loads_with_the_same_outputs(name, max_delta):
    model = timm.create_model(f'local-dir:{DATA / name}', pretrained=True).eval()
    expected = load_file(str(DATA / name / 'expected.safetensors'))
    sizes = [key[len('input_'):] for key in expected if key.startswith('input_')]
    assert len(sizes) == 2, sorted(expected)
    for size in sizes:
        x = expected[f'input_{size}']
        with torch.no_grad():
            max_delta(f'{name} forward {size}', model(x), expected[f'forward_{size}'], BOUND)
            max_delta(f'{name} forward_features {size}', model.forward_features(x),
                      expected[f'forward_features_{size}'], BOUND)
