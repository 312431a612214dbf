"""``python -m timm_vit_variants.training.trainer``: one process end to end, and its error exits."""
from timm_vit_variants.training.trainer import main
from train_fixtures import TINY_MODEL_KWARGS, make_image_folder


def test_cli_trains_prints_epochs_and_saves(tmp_path, capsys):
    data = make_image_folder(tmp_path / 'data')
    rc = main(['--data-dir', str(data), '--model', 'simple_vit_tiny', '--model-kwargs', *TINY_MODEL_KWARGS,
               '--img-size', '16', '--num-classes', '2', '--batch-size', '4', '--epochs', '2', '--warmup-epochs', '0',
               '--device', 'cpu', '--model-ema', '--model-ema-decay', '0.9', '--output', str(tmp_path / 'out')])
    out = capsys.readouterr().out
    assert rc == 0
    assert out.count('val_top1') == 2 and 'done in' in out
    assert {p.name for p in (tmp_path / 'out').iterdir()} >= {'last.pth.tar', 'model_best.pth.tar', 'args.yaml'}


def test_cli_errors_exit_non_zero(tmp_path, capsys):
    assert main(['--device', 'cpu']) == 2
    assert main(['--data-dir', str(tmp_path / 'missing'), '--device', 'cpu']) == 2
    err = capsys.readouterr().err
    assert '--data-dir is required' in err and 'not a folder' in err and 'Traceback' not in err
