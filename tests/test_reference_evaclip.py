"""EVA-CLIP in BAAI's own layout: ``*.pt`` files EVA-CLIP's code wrote (the whole CLIP model, the image tower under
``visual.``) convert, and the converted model gives what that code's ``encode_image`` wrote (the projected [CLS]
token), its normed [CLS] token and its last block's tokens (first image), at the stored 12x12 grid and at 8x8 and
16x16, where EVA-CLIP's own ``load_checkpoint`` resized the table (tests/data/reference_evaclip, see its README.md):
EVA02-CLIP (B/L's blocks) and EVA01-CLIP (g's blocks). EVA-CLIP defines no non-square grid: the converter's check
says so; the post-norm bigE, a width with no known head count and a foreign RoPE table are refused by name."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from model_probes import load_like_user
from porting.cli import main
from timm_vit_variants.checkpoints import open_checkpoint
from timm_vit_variants.errors import ViTVariantsError

DATA = Path(__file__).parent / 'data' / 'reference_evaclip'
NAMES = {'evaclip_eva02_bl': [], 'evaclip_eva01_g': ['--num-heads', '2']}  # EVA01's head count is not stored
SIZES = (24, 16, 32)  # the stored size first; patch 2
BOUND = 2e-5


@pytest.mark.parametrize('size', SIZES)
@pytest.mark.parametrize('name', NAMES)
def test_evaclip_file_converts_and_matches_eva_clip(name, size, tmp_path, capsys, max_delta):
    out = tmp_path / 'out'
    resize = [] if size == SIZES[0] else ['--img-size', str(size)]
    assert main(['convert', str(DATA / f'{name}.pt'), str(out), *NAMES[name], *resize]) == 0
    printed = ''.join(capsys.readouterr())
    assert 'verification passed' in printed and 'detected: an EVA0' in printed
    assert 'the text tower (ln_final, logit_scale, ' in printed
    if resize:
        assert f'target geometry ({size}x{size}, patch 2) passed' in printed
    args = json.loads((out / 'config.json').read_text())['model_args']
    assert (args['global_pool'], args['pos_embed_resample'], args['final_norm']) == ('token', 'deit', True)
    io = np.load(DATA / f'{name}_io.npz', allow_pickle=False)
    model = load_like_user(out)
    grid = f'{size // 2}x{size // 2}'
    seen = []  # the last block's tokens: what the final norm takes
    model.norm.register_forward_hook(lambda module, args, out: seen.append(args[0]))
    with torch.no_grad():
        x = torch.from_numpy(io[f'x_{size}']).float()
        feats = model.forward_features(x)
        max_delta(f'{name} tokens {grid}', seen[0][:1], io[f'tokens_{size}'], BOUND)
        max_delta(f'{name} embedding {grid}', model.forward_head(feats), io[f'embedding_{size}'], BOUND)
        max_delta(f'{name} pooled {grid}', model.forward_head(feats, pre_logits=True), io[f'pooled_{size}'], BOUND)


def test_a_non_square_grid_is_outside_eva_clip(tmp_path, capsys):
    assert main(['convert', str(DATA / 'evaclip_eva02_bl.pt'), str(tmp_path / 'out'), '--img-size', '16', '24']) == 0
    assert 'was NOT checked: EVA-CLIP takes one integer image size: it defines no non-square grid' in \
        ''.join(capsys.readouterr())


@pytest.mark.parametrize('name, edit, key, reason', [
    ('evaclip_eva01_g', 'bigE', 'visual.blocks.0.norm1.weight', "EVA02-CLIP-bigE's, whose post-norm blocks"),
    ('evaclip_eva01_g', None, 'visual.blocks.0.attn.qkv.weight', 'does not record the number of attention heads'),
    ('evaclip_eva02_bl', 'rope', 'visual.rope.freqs_cos', "not EVA-02's RoPE table for this grid scaled to 16x16"),
])
def test_what_eva_clip_files_do_not_say_is_refused_by_name(name, edit, key, reason, tmp_path):
    state = torch.load(DATA / f'{name}.pt', weights_only=True)
    if edit == 'bigE':  # the tower's tensors at bigE's width 1792 (shapes only matter here)
        state = {k: torch.zeros([1792 if s == 32 else s for s in v.shape]) if k.startswith('visual.') else v
                 for k, v in state.items()}
    elif edit == 'rope':  # a table built for another pretraining grid
        state['visual.rope.freqs_cos'] = state['visual.rope.freqs_cos'].flip(0)
    path = tmp_path / f'{name}.pt'
    torch.save(state, path)
    with pytest.raises(ViTVariantsError) as err:
        with open_checkpoint(path) as src:
            src.config
    assert reason in str(err.value) and err.value.key == key and str(path) in str(err.value)
