"""``vit-port resize SRC_FOLDER OUT``: change the resolution / patch size of an already-converted folder."""
import argparse
from pathlib import Path

from ..cli import add_geometry_args, check_sizes
from .convert import add_output_args, run as run_convert


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        'resize', help='resample a converted folder to a new image size and/or patch size',
        description='Read a folder written by "vit-port convert" (or any simple_vit Hub folder) and write OUT at '
                    'a new image size and/or patch size: learned tables are resampled, sin-cos tables '
                    'regenerated, the patchifier PI-resized. SRC_FOLDER is checked against timm\'s own '
                    'local-dir loader before resizing.')
    parser.add_argument('src', metavar='SRC_FOLDER', help='converted folder (config.json + model.safetensors)')
    parser.add_argument('out', metavar='OUT', help='output folder (must not exist unless --overwrite)')
    add_geometry_args(parser)
    add_output_args(parser)
    parser.add_argument('--tol', type=float, default=1e-4, help='verification tolerance (default 1e-4)')
    parser.add_argument('--no-verify', action='store_true', help='skip the check of SRC_FOLDER against timm')
    parser.set_defaults(func=lambda args: run(parser, args))
    return parser


def run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from timm_vit_variants.errors import ViTVariantsError

    if args.img_size is None and args.patch_size is None:
        parser.error('give --img-size and/or --patch-size')
    check_sizes(parser, args)
    if not (Path(args.src) / 'config.json').is_file():
        raise ViTVariantsError('resize takes a converted folder with config.json; use "vit-port convert" '
                               'for checkpoint files', path=args.src)
    return run_convert(parser, args, fmt='timm')
