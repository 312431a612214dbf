"""``vit-port verify SRC CONVERTED``: compare a converted folder with its source's reference implementation."""
import argparse
import sys

from .options import add_source_args, limits_of, say, source_options


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        'verify', help='check a converted folder against the source reference implementation',
        description='Run SRC in its own reference implementation (timm, transformers, or timm\'s npz loader) '
                    'and CONVERTED (a folder written by vit-port) on the same inputs; report max |delta| of '
                    'logits and features. Exit 0 when within --tol, 1 when not or when no check could run.')
    parser.add_argument('src', metavar='SRC', help='the original checkpoint file or folder')
    parser.add_argument('converted', metavar='CONVERTED', help='converted folder (same geometry as SRC)')
    add_source_args(parser)
    parser.add_argument('--tol', type=float, default=1e-4, help='tolerance (default 1e-4)')
    return parser


def run(args: argparse.Namespace) -> int:
    from ..hub_folder import load_folder, read_config
    from ..pipeline import open_source
    from ..verification import Verification, compare

    converted, _ = read_config(args.converted, limits_of(args))
    with open_source(args.src, source_options(args), limits_of(args)) as src:
        mismatch = _geometry_mismatch(src.config, converted)
        if mismatch:
            result = Verification('skipped', tolerance=args.tol, reason=(
                f'{mismatch}: a resized or re-headed folder cannot equal its source; '
                'verify the unresized conversion instead'))
        else:
            result = compare(src.path, src.format, src.config.to_dict(),
                             lambda: load_folder(args.converted, limits_of(args)),
                             args.tol, progress=sys.stderr.isatty())
    say(result.summary(), err=result.status != 'passed')
    return 0 if result.status == 'passed' else 1


def _geometry_mismatch(source, converted) -> str:
    for key in ('img_size', 'patch_size', 'num_classes'):
        a, b = getattr(source, key), getattr(converted, key)
        if a != b:
            return f'{key} differs (source {a}, converted {b})'
    return ''
