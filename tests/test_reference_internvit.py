"""InternViT in OpenGVLab's own layout: a folder InternVL's ``InternVisionModel`` code saved (config.json +
model.safetensors, model_type ``intern_vit_6b``) converts, and the converted model gives the tokens and [CLS] feature
that code wrote at its stored 6x6 grid, at 8x8 and at the non-square 5x7 (its embedding resizes the table as it runs)
(tests/data/reference_internvit, see its README.md); InternViT-6B's parts are refused by name."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from model_probes import load_like_user
from porting.cli import main
from timm_vit_variants.checkpoints import open_checkpoint
from timm_vit_variants.errors import ViTVariantsError

DATA = Path(__file__).parent / 'data' / 'reference_internvit'
NAME = 'internvit_300m_style'
GRIDS = [(6, 6), (8, 8), (5, 7)]  # the stored grid first; patch 4
BOUND = 2e-5


@pytest.mark.parametrize('grid', GRIDS, ids=lambda g: f'{g[0]}x{g[1]}')
def test_internvl_folder_converts_and_matches_internvl(grid, tmp_path, capsys, max_delta):
    out = tmp_path / 'out'
    size = [] if grid == GRIDS[0] else ['--img-size', str(4 * grid[0]), str(4 * grid[1])]
    assert main(['convert', str(DATA / NAME), str(out), *size]) == 0
    printed = ''.join(capsys.readouterr())
    assert 'verification passed' in printed and "detected: OpenGVLab's InternViT" in printed
    if size:
        assert f'target geometry ({4 * grid[0]}x{4 * grid[1]}, patch 4) passed' in printed
    args = json.loads((out / 'config.json').read_text())['model_args']
    assert (args['pos_embed_resample'], args['global_pool'], args['final_norm']) == ('hf', 'token', False)
    io = np.load(DATA / f'{NAME}_io.npz', allow_pickle=False)
    key = f'{grid[0]}x{grid[1]}'
    model = load_like_user(out)
    with torch.no_grad():
        tokens = model.forward_features(torch.from_numpy(io[f'x_{key}']).float())
        pooled = model.forward_head(tokens, pre_logits=True)
    max_delta(f'InternViT tokens {key}', tokens, io[f'tokens_{key}'], BOUND)
    max_delta(f'InternViT pooled {key}', pooled, io[f'pooled_{key}'], BOUND)


@pytest.mark.parametrize('entry, value, reason', [
    ('norm_type', 'rms_norm', "norm_type 'rms_norm': only layer_norm is expressed"),
    ('qk_normalization', True, 'the q/k RMSNorm (qk_normalization) of InternViT-6B is not expressed'),
    ('qkv_bias', 'yes', "expected true or false, got 'yes'"),
])
def test_internvit_6b_parts_are_refused_by_name(entry, value, reason, tmp_path):
    folder = tmp_path / 'internvit'
    shutil.copytree(DATA / NAME, folder)
    cfg = json.loads((folder / 'config.json').read_text())
    (folder / 'config.json').write_text(json.dumps({**cfg, entry: value}))
    with pytest.raises(ViTVariantsError) as err:
        with open_checkpoint(folder) as src:
            src.config
    assert reason in str(err.value) and entry in str(err.value) and 'config.json' in str(err.value)
