"""``vit-port verify SRC CONVERTED``: check a converted folder against its source's reference implementation."""
import argparse
import sys

from .options import SOURCE_HELP, add_hub_args, add_source_args, limits_of, say, source_options, tolerance_arg


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        'verify', help='check a converted folder against the source reference implementation',
        description='Run SRC in its own reference implementation (timm, transformers, or timm\'s npz loader) '
                    'and CONVERTED (a folder written by vit-port) on the same inputs; report max |delta| of '
                    'logits and features. A resized or re-headed folder is checked at its own geometry, against '
                    'the reference resized with the rule the folder records (a new head: features only). '
                    'Exit 0 when within --tol, 1 when not or when no check could run.')
    parser.add_argument('src', metavar='SRC', help=f'the original checkpoint: {SOURCE_HELP}')
    parser.add_argument('converted', metavar='CONVERTED', help='converted folder (any geometry)')
    add_source_args(parser)
    parser.add_argument('--tol', type=tolerance_arg, default=1e-4, help='tolerance (default 1e-4)')
    add_hub_args(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    from ..verification.conversion import verify_folder

    result = verify_folder(args.src, args.converted, source_options(args), args.tol, limits_of(args),
                           progress=sys.stderr.isatty())
    say(result.summary(), err=result.status != 'passed')
    return 0 if result.status == 'passed' else 1
