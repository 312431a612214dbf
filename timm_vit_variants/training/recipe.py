"""The trainer's command line: flags spelt as in timm's ``train.py``, its YAML recipes, and the run record.

One YAML config (``-c FILE``) serves both ``train.py`` and our trainer, because every flag keeps train.py's
name and dest. Unlike train.py, a recipe key the trainer does not know is refused rather than ignored. The run
record (``args.yaml`` in ``--output``) is written as train.py writes it. The training itself is ``trainer.py``.
"""
import argparse
import os
import sys
from typing import Optional, Sequence

import torch
from timm.utils import ParseKwargs

__all__ = ['build_parser', 'parse_args', 'write_args_yaml']


def build_parser() -> argparse.ArgumentParser:
    """Flags spelt as in timm's train.py (same dest names, so one YAML config serves both)."""
    p = argparse.ArgumentParser(
        prog='vit-variants-train-ddp',
        description='Data-parallel fine-tuning of simple_vit_* models with timm components. '
                    'Launch with torchrun for several processes (gloo on CPU, nccl on GPU).')
    p.add_argument('-c', '--config', default='', metavar='FILE',
                   help='timm train.py YAML config; its keys set the defaults of the flags below')
    g = p.add_argument_group('data')
    g.add_argument('--data-dir', metavar='DIR', help='ImageFolder root with train/ and validation/ splits')
    g.add_argument('--dataset', default='', help='timm dataset spec ("" = ImageFolder)')
    g.add_argument('--train-split', default='train')
    g.add_argument('--val-split', default='validation', help='"" to skip validation')
    g.add_argument('-b', '--batch-size', type=int, default=128, help='per-process batch size')
    g.add_argument('-vb', '--validation-batch-size', type=int, default=None)
    g.add_argument('-j', '--workers', type=int, default=0, help='DataLoader workers per process')
    g.add_argument('--img-size', type=int, default=None, help='training resolution (the patch embedding adapts)')
    g.add_argument('--input-size', type=int, nargs=3, default=None, metavar='N')
    g.add_argument('--crop-pct', type=float, default=None)
    g.add_argument('--mean', type=float, nargs='+', default=None)
    g.add_argument('--std', type=float, nargs='+', default=None)
    g.add_argument('--interpolation', default='')
    g.add_argument('--train-interpolation', default='random')
    g.add_argument('--train-img-sizes', type=int, nargs='+', default=None,
                   help='per-batch square resolutions for multi-resolution training')
    g.add_argument('--train-batch-sizes', type=int, nargs='+', default=None)
    g.add_argument('--train-size-probs', type=float, nargs='+', default=None)
    g.add_argument('--naflex-loader', action='store_true', default=False,
                   help="timm's NaFlex loader: each image at its own aspect ratio, batched by sequence length")
    g.add_argument('--naflex-train-seq-lens', type=int, nargs='+', default=[128, 256, 576, 784, 1024],
                   help='token budgets of the training batches (--naflex-loader)')
    g.add_argument('--naflex-max-seq-len', type=int, default=576, help='token budget for validation (--naflex-loader)')
    g.add_argument('--naflex-loss-scale', default='linear', choices=('none', 'sqrt', 'linear'),
                   help='scale each batch loss by its size relative to --batch-size, as train.py does')
    g = p.add_argument_group('model')
    g.add_argument('--model', default='simple_vit_tiny_patch4_32')
    g.add_argument('--model-kwargs', nargs='*', default={}, action=ParseKwargs)
    g.add_argument('--pretrained', action='store_true', default=False)
    g.add_argument('--pretrained-path', default=None, help='weights file used as the pretrained source')
    g.add_argument('--initial-checkpoint', default='', help='checkpoint loaded with timm.models.load_checkpoint')
    g.add_argument('--num-classes', type=int, default=None)
    g.add_argument('--in-chans', type=int, default=None)
    g.add_argument('--gp', default=None, help='global pool override')
    g.add_argument('--drop', type=float, default=0.0)
    g.add_argument('--drop-path', type=float, default=None)
    g.add_argument('--grad-checkpointing', action='store_true', default=False)
    g.add_argument('--torchcompile', nargs='?', default=None, const='inductor')
    g.add_argument('--torchcompile-mode', default=None)
    g = p.add_argument_group('optimisation')
    g.add_argument('--opt', default='adamw')
    g.add_argument('--opt-eps', type=float, default=None)
    g.add_argument('--opt-betas', type=float, nargs='+', default=None)
    g.add_argument('--momentum', type=float, default=0.9)
    g.add_argument('--lr', type=float, default=3e-4)
    g.add_argument('--weight-decay', type=float, default=0.05)
    g.add_argument('--layer-decay', type=float, default=None)
    g.add_argument('--clip-grad', type=float, default=None)
    g.add_argument('--clip-mode', default='norm')
    g.add_argument('--sched', default='cosine')
    g.add_argument('--sched-on-updates', action='store_true', default=False)
    g.add_argument('--epochs', type=int, default=10)
    g.add_argument('--warmup-epochs', type=int, default=1)
    g.add_argument('--warmup-lr', type=float, default=1e-5)
    g.add_argument('--min-lr', type=float, default=0.0)
    g.add_argument('--warmup-prefix', action='store_true', default=False)
    g.add_argument('--cooldown-epochs', type=int, default=0)
    g = p.add_argument_group('augmentation and regularisation')
    g.add_argument('--no-aug', action='store_true', default=False)
    g.add_argument('--scale', type=float, nargs='+', default=[0.08, 1.0])
    g.add_argument('--ratio', type=float, nargs='+', default=[3. / 4., 4. / 3.])
    g.add_argument('--hflip', type=float, default=0.5)
    g.add_argument('--vflip', type=float, default=0.0)
    g.add_argument('--color-jitter', type=float, default=0.4)
    g.add_argument('--aa', default=None, help='AutoAugment / RandAugment spec')
    g.add_argument('--reprob', type=float, default=0.0)
    g.add_argument('--smoothing', type=float, default=0.1)
    g.add_argument('--mixup', type=float, default=0.0)
    g.add_argument('--cutmix', type=float, default=0.0)
    g.add_argument('--model-ema', action='store_true', default=False)
    g.add_argument('--model-ema-decay', type=float, default=0.9998)
    g.add_argument('--model-ema-warmup', action='store_true', default=False)
    g = p.add_argument_group('device and output')
    g.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    g.add_argument('--amp', action='store_true', default=False)
    g.add_argument('--amp-dtype', default='float16', choices=('float16', 'bfloat16'))
    g.add_argument('--seed', type=int, default=42)
    g.add_argument('--output', default='', help='checkpoint folder (CheckpointSaver); nothing saved if empty')
    g.add_argument('--checkpoint-hist', type=int, default=3)
    g.add_argument('--eval-metric', default='top1')
    g.add_argument('--progress', action='store_true', default=False, help='show a tqdm bar on the primary process')
    return p


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Parse flags after applying ``--config`` as defaults, the way train.py does.

    Unlike train.py (which silently accepts any YAML key), a key this trainer does not know is an
    error: a recipe must not appear to set something that is ignored.
    """
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument('-c', '--config', default='')
    known, _ = pre.parse_known_args(argv)
    if known.config:
        with open(known.config, 'r') as f:
            cfg = _yaml().safe_load(f) or {}
        dests = {a.dest for a in parser._actions}
        unknown = sorted(set(cfg) - dests)
        if unknown:
            parser.error(f'{known.config}: keys not supported by this trainer: {", ".join(unknown)}')
        parser.set_defaults(**cfg)
    args = parser.parse_args(argv)
    if args.naflex_loader and args.train_img_sizes is not None:
        parser.error('--naflex-loader and --train-img-sizes are alternative loader modes')
    return args


def write_args_yaml(args: argparse.Namespace, folder: str) -> None:
    """The run record, ``FOLDER/args.yaml``: every flag's value, as train.py writes it."""
    with open(os.path.join(folder, 'args.yaml'), 'w') as f:
        _yaml().safe_dump(vars(args), f)


def _yaml():
    """PyYAML, which recipes (-c FILE) and run records (args.yaml) need; part of the ``train`` extra."""
    try:
        import yaml
    except ImportError:
        raise SystemExit("the trainer needs PyYAML for recipes and run records: pip install 'timm-vit-variants[train]'")
    return yaml
