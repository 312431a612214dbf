"""RADIO in NVIDIA's own layout: a ``model.safetensors`` in ``hf_model.RADIOModel``'s layout (the ViT under
``radio_model.model.``), written from a model RADIO's own code built, converts, and the converted model gives every
token RADIO's ``forward_features`` wrote at the table's own 12x12 grid, at 8x8 and at the non-square 6x10, where
RADIO's patch generator evaluated its CPE table for the grid (tests/data/reference_radio, see its README.md): the
reader evaluates it for the grid ``--source-img-size`` names. A later resize by our rule is said to be unchecked."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from model_probes import load_like_user
from porting.cli import main
from timm_vit_variants.checkpoints import open_checkpoint
from timm_vit_variants.errors import ViTVariantsError

DATA = Path(__file__).parent / 'data' / 'reference_radio'
NAME = 'radio_v3_style'
GRIDS = [(12, 12), (8, 8), (6, 10)]  # the table's own grid first; patch 4
BOUND = 2e-5


@pytest.mark.parametrize('grid', GRIDS, ids=lambda g: f'{g[0]}x{g[1]}')
def test_radio_file_converts_and_matches_radio(grid, tmp_path, capsys, max_delta):
    out = tmp_path / 'out'
    size = [] if grid == GRIDS[0] else ['--source-img-size', str(4 * grid[0]), str(4 * grid[1])]
    assert main(['convert', str(DATA / f'{NAME}.safetensors'), str(out), '--num-heads', '2', *size]) == 0
    printed = ''.join(capsys.readouterr())
    assert 'verification passed' in printed and 'detected: a RADIO ViT (4 [CLS] and register tokens' in printed
    assert ('its own grid' if not size else f'the {grid[0]}x{grid[1]} grid asked for') in printed
    cfg = json.loads((out / 'config.json').read_text())
    assert (cfg['model_args']['reg_tokens'], cfg['model_args']['final_norm']) == (3, False)
    stored = load_file(str(DATA / f'{NAME}.safetensors'))  # RADIO's input conditioner is the preprocessing
    for field in ('mean', 'std'):
        want = stored[f'radio_model.input_conditioner.norm_{field}'].flatten().tolist()
        assert cfg['pretrained_cfg'][field] == pytest.approx(want)
    io = np.load(DATA / f'{NAME}_io.npz', allow_pickle=False)
    key = f'{grid[0]}x{grid[1]}'
    with torch.no_grad():
        tokens = load_like_user(out).forward_features(torch.from_numpy(io[f'x_{key}']).float())
    max_delta(f'RADIO tokens {key}', tokens, io[f'tokens_{key}'], BOUND)


def test_a_later_resize_is_not_radios_and_is_said_unchecked(tmp_path, capsys):
    assert main(['convert', str(DATA / f'{NAME}.safetensors'), str(tmp_path / 'out'), '--num-heads', '2',
                 '--img-size', '32']) == 0
    printed = ''.join(capsys.readouterr())
    assert 'was NOT checked: RADIO evaluates its table for each grid' in printed and '--source-img-size' in printed


@pytest.mark.parametrize('width, heads', [(1280, 16), (1536, 24), (96, None)])
def test_the_head_count_is_c_radio_v3s_of_the_width_or_asked_for(width, heads, tmp_path):
    """No RADIO file records its heads: C-RADIOv3-H's 1280 has 16 (80 wide, not 64), g's 1536 has 24; another width
    is refused by name."""
    state = load_file(str(DATA / f'{NAME}.safetensors'))
    grown = {k: torch.zeros([width if s == 32 else 4 * width if s == 128 else 3 * width if s == 96 else s
                             for s in v.shape]) for k, v in state.items()}
    path = tmp_path / 'radio.safetensors'
    save_file(grown, str(path))
    if heads is None:
        with pytest.raises(ViTVariantsError) as err:
            with open_checkpoint(path) as src:
                src.config
        assert "not one of C-RADIOv3's; give the head count" in str(err.value)
        assert err.value.key == 'radio_model.model.blocks.0.attn.qkv.weight' and str(path) in str(err.value)
        return
    with open_checkpoint(path) as src:
        assert src.config.num_heads == heads and src.assumed['num_heads'][0] == heads
