"""Every Hub folder release 0.2.0 converted to still loads, with the same outputs: users never reconvert.

tests/data/release_conversions/ holds one tiny folder per family and source form, as that release's
``vit-port convert`` (or ``save_pretrained_folder``) wrote it, with the outputs that release's model gave on it (its
README says which forms, and how they were made). Each is loaded as a user loads it,
``timm.create_model('local-dir:FOLDER', pretrained=True)``, and its logits and features at two sizes (and a list of
images where stored) are compared with the stored ones. On the release that wrote them they are bitwise equal; the
bound leaves room for float32 noise only.
"""
from pathlib import Path
from typing import Tuple

import pytest
import timm
import torch
from safetensors import safe_open

import timm_vit_variants  # noqa: F401  registers simple_vit_* with timm

RELEASE = '0.2.0'
DATA = Path(__file__).parent / 'data' / 'release_conversions'
FOLDERS = sorted(p for p in DATA.iterdir() if (p / 'config.json').is_file())
EXPECTED_COUNT = 31  # a folder deleted (or one added without updating this) is noticed
BOUND = 1e-6


def release_input(size: Tuple[int, int], in_chans: int = 3, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The input the stored outputs were computed on: two seeded normal images of ``size``, in ``dtype``."""
    return torch.randn(2, in_chans, *size, generator=torch.Generator().manual_seed(0)).to(dtype)


def _size(text: str) -> Tuple[int, int]:
    h, w = text.split('x')
    return int(h), int(w)


def test_every_release_folder_is_here():
    assert len(FOLDERS) == EXPECTED_COUNT, [p.name for p in FOLDERS]
    for folder in FOLDERS:
        assert {p.name for p in folder.iterdir()} == {'config.json', 'model.safetensors', 'expected.safetensors'}


@pytest.mark.parametrize('folder', FOLDERS, ids=[p.name for p in FOLDERS])
def test_release_folder_loads_with_the_same_outputs(folder, max_delta):
    model = timm.create_model(f'local-dir:{folder}', pretrained=True).eval()
    dtype = next(model.parameters()).dtype
    with safe_open(str(folder / 'expected.safetensors'), 'pt') as stored:
        keys = sorted(stored.keys())
        assert any(k.startswith('logits@') for k in keys) and any(k.startswith('features@') for k in keys), keys
        for key in keys:
            output, sizes = key.split('@')
            with torch.no_grad():
                if '+' in sizes:  # a list of images, one of each size (the NaFlex path)
                    ours = model([release_input(_size(s), model.config.in_chans, dtype)[0] for s in sizes.split('+')])
                else:
                    x = release_input(_size(sizes), model.config.in_chans, dtype)
                    ours = model(x) if output == 'logits' else model.forward_features(x)
            max_delta(f'{folder.name} {key}', ours, stored.get_tensor(key), BOUND)
