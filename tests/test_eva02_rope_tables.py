"""A BAAI EVA-02 file's stored RoPE tables (``rope.freqs_cos``/``freqs_sin``, buffers EVA's code loads) are evidence:
the pretraining grid is read from them (the grid for which EVA's formula reproduces them), the verification runs the
file's own tables as EVA's code does, and tables no grid reproduces, or that are not finite, are refused.

The variants rewrite the tables of ``tests/data/reference_eva02/eva02_ft_ts_module`` (a 12x12 grid, 2 heads of width
16) with ``eva_rope_tables``, EVA's ``VisionRotaryEmbeddingFast`` written here in numpy from its source
(baaivision/EVA ``EVA-02/asuka/rope.py`` at the commit the fixture README records)."""
from pathlib import Path

import numpy as np
import pytest
import torch

from model_probes import load_like_user
from porting.cli import main
from porting.verification.eva02_ref import eva02_outputs
from porting.verification.result import Check
from timm_vit_variants.checkpoints import open_checkpoint
from timm_vit_variants.checkpoints.eva02 import Eva02Checkpoint
from timm_vit_variants.parts import Rope

DATA = Path(__file__).parent / 'data' / 'reference_eva02'
NAME, GRID, HEAD_DIM = 'eva02_ft_ts_module', 12, 16  # stored at 24 px, patch 2
BOUND = 2e-5


def eva_rope_tables(head_dim: int, pt_seq_len: int, ft_seq_len: int, theta: float = 10000.):
    """(freqs_cos, freqs_sin) of EVA's ``VisionRotaryEmbeddingFast(dim=head_dim // 2, pt_seq_len, ft_seq_len)``:
    ``freqs = 1 / theta ** (arange(0, dim, 2)[:dim // 2] / dim)``, ``t = arange(ft) / ft * pt``, ``t x freqs`` with each
    frequency repeated twice (``'... n -> ... (n r)', r=2``), then ``broadcat`` of the row and column halves, flattened
    row-major to (ft * ft, head_dim); in float64."""
    dim = head_dim // 2
    freqs = 1.0 / theta ** (np.arange(0, dim, 2)[:dim // 2] / dim)
    t = np.arange(ft_seq_len) / ft_seq_len * pt_seq_len
    angles = np.repeat(np.outer(t, freqs), 2, axis=-1)  # (ft, dim)
    both = np.concatenate([np.broadcast_to(angles[:, None], (ft_seq_len, ft_seq_len, dim)),
                           np.broadcast_to(angles[None, :], (ft_seq_len, ft_seq_len, dim))], axis=-1)
    return np.cos(both).reshape(-1, head_dim), np.sin(both).reshape(-1, head_dim)


def _state():
    return torch.load(DATA / f'{NAME}.pth', weights_only=True)['module']


def _with_tables(path: Path, tables, only=None) -> Path:
    """The fixture with every stored RoPE table (or those whose key starts with ``only``) replaced by ``tables``."""
    cos, sin = (torch.as_tensor(t, dtype=torch.float32) for t in tables)
    state = {k: cos if k.endswith('rope.freqs_cos') and k.startswith(only or '') else
             sin if k.endswith('rope.freqs_sin') and k.startswith(only or '') else v for k, v in _state().items()}
    torch.save({'module': state}, path)
    return path


def _convert(src: Path, out: Path, capsys, *extra: str, heads: int = 2):
    code = main(['convert', str(src), str(out), '--num-heads', str(heads), *extra])
    return code, ''.join(capsys.readouterr())


def test_the_formula_is_evas(max_delta):
    """The numpy formula reproduces the tables EVA's own code stored (its 16x16 pretraining grid, at 12x12)."""
    cos, sin = eva_rope_tables(HEAD_DIM, 16, GRID)
    state = _state()
    max_delta('EVA-stored freqs_cos vs the numpy formula', state['rope.freqs_cos'], cos, 1e-6)
    max_delta('EVA-stored freqs_sin vs the numpy formula', state['rope.freqs_sin'], sin, 1e-6)


@pytest.mark.parametrize('size', [24, 40])
def test_tables_of_another_pretraining_grid_are_reproduced(size, tmp_path, capsys, max_delta):
    """Tables built for a 12x12 pretraining grid: the grid is read from them, and the conversion (at the stored grid
    and resized) gives what EVA's code computes from the file, not what a 16x16 grid would."""
    src = _with_tables(tmp_path / 'pt12.pth', eva_rope_tables(HEAD_DIM, 12, GRID))
    code, printed = _convert(src, tmp_path / 'out', capsys, *([] if size == 24 else ['--img-size', str(size)]))
    assert code == 0 and 'verification passed' in printed, printed
    assert 'positions scaled to 12x12, the pretraining grid its stored rope.freqs_cos was built for' in printed
    model = load_like_user(tmp_path / 'out')
    assert model.config.position(Rope).ref_grid == 12
    x = torch.from_numpy(np.load(DATA / f'{NAME}_io.npz')[f'x_{size}']).float()
    with open_checkpoint(src, num_heads=2) as opened:
        source, entry = opened.config, opened.weights_key
    target = None if size == 24 else source.replace(img_size=size)
    evas = eva02_outputs(Check(str(src), 'eva02', source, target, None if target is None else 'deit',
                               weights_key=entry), x).logits
    with torch.no_grad():
        ours = model(x)
    max_delta(f'12x12-pretraining tables, {size // 2}x{size // 2} grid', ours, evas, BOUND)
    # EVA's outputs for the same weights with the 16x16 tables are far from it: the tables decide the function
    assert float((ours - torch.from_numpy(np.load(DATA / f'{NAME}_io.npz')[f'logits_{size}'])).abs().max()) > 1e-2


def test_the_check_does_not_share_the_grid_read(tmp_path, capsys, monkeypatch):
    """Were the converter to ignore the tables (the 16x16 assumption), the check, which runs the file's own tables as
    EVA's code does, fails."""
    src = _with_tables(tmp_path / 'pt12.pth', eva_rope_tables(HEAD_DIM, 12, GRID))
    monkeypatch.setattr(Eva02Checkpoint, '_ref_grid', lambda self, names, head_dim: 16)
    code, printed = _convert(src, tmp_path / 'out', capsys)
    assert code != 0 and 'verification failed' in printed and "the file's own RoPE tables" in printed, printed


@pytest.mark.parametrize('value', [float('nan'), float('inf')])
def test_tables_that_are_not_finite_are_refused(value, tmp_path, capsys):
    cos, sin = eva_rope_tables(HEAD_DIM, 16, GRID)
    cos[3, 5] = value
    code, printed = _convert(_with_tables(tmp_path / 'bad.pth', (cos, sin)), tmp_path / 'out', capsys)
    lines = [line for line in printed.splitlines() if line.startswith('error:')]
    assert code != 0 and len(lines) == 1 and 'Traceback' not in printed
    assert "bad.pth', key 'rope.freqs_cos'" in lines[0] and 'not finite' in lines[0]


def test_tables_no_grid_reproduces_are_refused(tmp_path, capsys):
    cos, sin = eva_rope_tables(HEAD_DIM, 16, GRID)
    noisy = cos + 0.01 * np.random.default_rng(0).standard_normal(cos.shape)
    code, printed = _convert(_with_tables(tmp_path / 'bad.pth', (noisy, sin)), tmp_path / 'out', capsys)
    assert code != 0 and "key 'rope.freqs_cos'" in printed
    assert "not EVA-02's RoPE table (VisionRotaryEmbeddingFast) for this 12x12 grid at any pretraining grid" in printed


def test_a_block_copy_that_differs_is_refused(tmp_path, capsys):
    src = _with_tables(tmp_path / 'bad.pth', eva_rope_tables(HEAD_DIM, 12, GRID), only='blocks.1.')
    code, printed = _convert(src, tmp_path / 'out', capsys)
    assert code != 0 and "key 'blocks.1.attn.rope.freqs_cos'" in printed
    assert "not the table rope.freqs_cos/sin hold (the 16x16 pretraining grid)" in printed


def test_tables_of_another_head_width_are_refused(tmp_path, capsys):
    """4 heads make 8-wide heads; the stored tables are 16 wide: the head count given contradicts the file."""
    code, printed = _convert(DATA / f'{NAME}.pth', tmp_path / 'out', capsys, heads=4)
    assert code != 0 and "key 'rope.freqs_cos'" in printed and '8-wide head' in printed, printed
