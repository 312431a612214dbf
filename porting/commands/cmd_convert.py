"""``vit-port convert SRC OUT``: checkpoint -> verified simple_vit Hub folder."""
import argparse
import sys

from .cmd_push import add_push_to_option, check_push_args, push_from_args
from .options import (
    add_geometry_args, add_output_args, add_source_args, check_sizes, limits_of, say, source_hints)


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        'convert', help='convert a checkpoint into a simple_vit Hub folder',
        description='Convert SRC (big_vision / vit_jax .npz, timm .pth/.safetensors or Hub folder, transformers '
                    'ViT folder) into OUT: model.safetensors, config.json (timm Hub format) and README.md. '
                    'The result is checked against the source reference implementation at the source geometry.')
    parser.add_argument('src', metavar='SRC', help='checkpoint file or folder')
    parser.add_argument('out', metavar='OUT', help='output folder (must not exist unless --overwrite)')
    add_geometry_args(parser)
    parser.add_argument('--num-classes', type=int, metavar='N',
                        help='classifier width: 0 drops the head, any other count than the source gets a zero head')
    add_source_args(parser)
    add_output_args(parser)
    add_verify_args(parser)
    add_push_to_option(parser)
    return parser


def add_verify_args(parser: argparse.ArgumentParser) -> None:
    """--tol and --no-verify, shared with ``resize``."""
    parser.add_argument('--tol', type=float, default=1e-4,
                        help='verification tolerance on max |delta| of logits and features, float32 (default 1e-4)')
    parser.add_argument('--no-verify', action='store_true', help='skip the numerical check against the source')


def run(args: argparse.Namespace, fmt: str = None) -> int:
    from ..pipeline import convert

    check_sizes(args)
    if getattr(args, 'push_to', None):
        check_push_args(args, args.push_to)
    result = convert(
        args.src, args.out, fmt=fmt or getattr(args, 'fmt', None), img_size=args.img_size, patch_size=args.patch_size,
        num_classes=getattr(args, 'num_classes', None), resample_like=args.resample_like,
        hints=source_hints(args), overwrite=args.overwrite, tol=args.tol,
        verify=not args.no_verify, max_shard_size=args.max_shard_size, license=args.license,
        base_model=args.base_model, datasets=args.datasets, command=args.command_line,
        progress=sys.stderr.isatty(), allow_nonfinite=args.allow_nonfinite, limits=limits_of(args))
    report(result)
    if getattr(args, 'push_to', None):
        push_from_args(args, args.out, args.push_to)
    return 0


def report(result) -> None:
    """Quiet success: the output path, then one verification line (skips go to stderr)."""
    say(result.summary())
    say(result.verification.summary(), err=result.verification.status == 'skipped')
