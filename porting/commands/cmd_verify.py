"""``vit-port verify SRC CONVERTED``: check a converted folder against its source's reference implementation."""
import argparse

from .options import SOURCE_HELP, add_hub_args, add_source_args, add_tol_arg, request_from_args, say


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
    add_tol_arg(parser)
    add_hub_args(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    from ..verification.conversion import verify_folder

    request = request_from_args('convert', args)
    result = verify_folder(args.src, args.converted, request.source, request.tol, request.limits, request.progress)
    say(result.summary(), err=result.status != 'passed')
    return 0 if result.status == 'passed' else 1
