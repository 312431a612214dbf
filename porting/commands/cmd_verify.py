"""``vit-port verify SRC CONVERTED``: compare a converted folder with its source's reference implementation."""
import argparse
import sys

from .options import add_source_args, say, source_hints


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
    from ..convert import open_source, source_model_args
    from ..hub_config import read_config
    from ..loading import load_folder
    from ..verify import Verification, compare

    cfg = read_config(args.converted)
    with open_source(args.src, args.fmt, **source_hints(args)) as src:
        source_args = source_model_args(src)
        mismatch = _geometry_mismatch(source_args, cfg.get('model_args', {}))
        if mismatch:
            result = Verification('skipped', tolerance=args.tol, reason=(
                f'{mismatch}: a resized or re-headed folder cannot equal its source; '
                'verify the unresized conversion instead'))
        else:
            result = compare(src.path, src.format, source_args, lambda: load_folder(args.converted), args.tol,
                             progress=sys.stderr.isatty())
    say(result.summary(), err=result.status != 'passed')
    return 0 if result.status == 'passed' else 1


def _pair(v):
    return tuple(v) if isinstance(v, (list, tuple)) else (v, v)


def _geometry_mismatch(source_args: dict, converted_args: dict) -> str:
    for key in ('img_size', 'patch_size'):
        a, b = _pair(source_args.get(key)), _pair(converted_args.get(key))
        if a != b:
            return f'{key} differs (source {a}, converted {b})'
    if source_args.get('num_classes') != converted_args.get('num_classes'):
        return f'num_classes differs (source {source_args.get("num_classes")}, converted {converted_args.get("num_classes")})'
    return ''
