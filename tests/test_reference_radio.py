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
from safetensors.torch import load_file

from model_probes import load_like_user
from porting.cli import main

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
