"""A training checkpoint holding EMA and plain weights: the choice (EMA by default, ``--no-ema`` for the plain ones)
is made once, and the converter and the verification reference both run the chosen weights, so each documented
choice converts, passes its check, and gives the chosen weights' model in the source library (not the other's)."""
from pathlib import Path

import pytest
import timm
import torch

from checkpoint_fixtures import randomize
from model_probes import load_like_user
from porting.cli import main
from porting.verification.eva02_ref import eva02_outputs
from porting.verification.result import Check
from timm_vit_variants.checkpoints import open_checkpoint

EVA02 = Path(__file__).parent / 'data' / 'reference_eva02' / 'eva02_ft_bl_ls_model.pth'
BOUND = 1e-5
APART = 1e-2  # the two weight sets' outputs differ by far more than this


def _convert(src: Path, out: Path, capsys, *flags: str) -> None:
    assert main(['convert', str(src), str(out), '--num-heads', *flags]) == 0
    printed = ''.join(capsys.readouterr())
    assert 'verification passed' in printed, printed


def _apart(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


@pytest.mark.parametrize('no_ema', [False, True], ids=['ema', 'no-ema'])
def test_timm_training_checkpoint(no_ema, tmp_path, capsys, max_delta):
    tiny = dict(img_size=32, patch_size=8, depth=2, num_classes=5)
    plain = randomize(timm.create_model('vit_tiny_patch16_224', **tiny), seed=0)
    ema = randomize(timm.create_model('vit_tiny_patch16_224', **tiny), seed=1)
    src = tmp_path / 'train.pth.tar'
    torch.save({'epoch': 3, 'state_dict': plain.state_dict(), 'state_dict_ema': ema.state_dict()}, src)
    _convert(src, tmp_path / 'out', capsys, '3', *(['--no-ema'] if no_ema else []))
    chosen, other = (plain, ema) if no_ema else (ema, plain)
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours = load_like_user(tmp_path / 'out')(x)
        max_delta(f"timm checkpoint, {'plain' if no_ema else 'EMA'} weights", ours, chosen(x), BOUND)
        assert _apart(ours, other(x)) > APART


@pytest.mark.parametrize('no_ema', [False, True], ids=['ema', 'no-ema'])
def test_baai_eva02_model_ema(no_ema, tmp_path, capsys, max_delta):
    plain = torch.load(EVA02, weights_only=True)['model']
    gen = torch.Generator().manual_seed(7)
    ema = {k: v if 'rope' in k else v + 0.1 * torch.randn(v.shape, generator=gen) for k, v in plain.items()}
    src = tmp_path / 'eva02_ema.pth'
    torch.save({'model': plain, 'model_ema': ema}, src)
    _convert(src, tmp_path / 'out', capsys, '2', *(['--no-ema'] if no_ema else []))
    x = torch.randn(2, 3, 24, 24, generator=torch.Generator().manual_seed(1))

    def evas(weights, name):
        """timm's Eva, as EVA-02's reference builds it, on a bare state dict of ``weights``: no choice to make."""
        path = tmp_path / f'{name}.pth'
        torch.save(weights, path)
        with open_checkpoint(path, num_heads=2) as only:
            return eva02_outputs(Check(str(path), 'eva02', only.config), x).logits

    chosen, other = (plain, ema) if no_ema else (ema, plain)
    with torch.no_grad():
        ours = load_like_user(tmp_path / 'out')(x)
    max_delta(f"BAAI EVA-02, {'model' if no_ema else 'model_ema'} weights", ours, evas(chosen, 'chosen'), BOUND)
    assert _apart(ours, evas(other, 'other')) > APART
