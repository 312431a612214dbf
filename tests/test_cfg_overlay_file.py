"""``pretrained_cfg_overlay=dict(file=...)`` (timm's and torch.hub's way to load a local file) reads the file as a
tag's download is read: DeiT-III, RoPE-ViT, BEiT v2 and EVA-02 files load as the network their own code runs (the
outputs it wrote, tests/data/reference_*), and a file that is no checkpoint is one ViTVariantsError naming it."""
from pathlib import Path
from typing import Callable, Dict, Tuple

import numpy as np
import pytest
import torch

import timm_vit_variants  # noqa: F401  (registers simple_vit_*)
from timm_vit_variants import ViTVariantsError
from timm_vit_variants.checkpoints import open_checkpoint

from test_hubconf import _hubconf

DATA = Path(__file__).parent / 'data'
BOUND = 2e-5


def _pixels(inputs: str, patch: int, side: int) -> Callable[[np.lib.npyio.NpzFile], torch.Tensor]:
    """The fixtures' input at side x side patches: the top-left crop of the stored uint8 images, mapped to [-1, 1]."""
    def crop(io) -> torch.Tensor:
        u8 = np.load(DATA / inputs)[f'p{patch}_uint8'][:, :, :side * patch, :side * patch]
        return torch.from_numpy(np.float32(-1) + (u8.astype(np.float32) / np.float32(255)) * np.float32(2))
    return crop


# fixture -> (a registered row of its family, its head count (not recorded by the file), the input, the logits key)
SOURCES: Dict[str, Tuple[str, int, Callable, str]] = {
    'reference_deit/deit3_tiny': ('simple_vit_small_patch16_deit3_224', 4,
                                  _pixels('reference_deit/deit3_inputs.npz', 16, 6), 'logits_6x6'),
    'reference_dino/ropevit_tiny_mixed': ('simple_vit_small_patch16_rope_mixed_224', 2,
                                          _pixels('reference_dino/inputs.npz', 16, 6), 'logits_6x6'),
    'reference_beit/beit2_ft_meanpool': ('simple_vit_base_patch16_beitv2_224', 2,
                                         _pixels('reference_beit/inputs.npz', 8, 6), 'logits_6x6'),
    'reference_eva02/eva02_ft_bl_ls_model': ('simple_vit_tiny_patch14_eva02_224', 2,
                                             lambda io: torch.from_numpy(io['x_24']).float(), 'logits_24'),
}


@pytest.mark.parametrize('source', SOURCES)
def test_a_sources_file_loads_as_the_network_its_own_code_runs(source, max_delta):
    row, heads, pixels, logits = SOURCES[source]
    path = DATA / f'{source}.pth'
    with open_checkpoint(path, num_heads=heads) as src:  # the tiny file's sizes and settings, as a user passes them
        args = src.config.to_dict()
    model = getattr(_hubconf(), row)(pretrained=True, pretrained_cfg_overlay=dict(file=str(path)), **args).eval()
    io = np.load(DATA / f'{source}_io.npz')
    with torch.no_grad():
        max_delta(f'{source} through pretrained_cfg_overlay', model(pixels(io)), io[logits], BOUND)


def test_a_file_that_is_no_checkpoint_is_one_error_naming_it(tmp_path):
    path = tmp_path / 'passwd'
    path.write_text('root:x:0:0:root:/root:/bin/bash\n')
    with pytest.raises(ViTVariantsError) as e:
        _hubconf().simple_vit_tiny(pretrained=True, pretrained_cfg_overlay=dict(file=str(path)))
    assert e.value.path == str(path) and 'not a PyTorch weight file' in e.value.reason
    assert 'Error' not in str(e.value)  # no internal error's name (it was IndexError)
