"""``vit-port resize SRC_FOLDER OUT``: change the resolution / patch size of an already-converted folder."""
import argparse

from .options import (
    UsageError, add_geometry_args, add_output_args, add_safety_args, add_verify_args, check_folder_out, check_sizes,
    report, request_from_args)


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
    add_safety_args(parser)
    add_verify_args(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    if args.img_size is None and args.patch_size is None:
        raise UsageError('give --img-size and/or --patch-size')
    check_sizes(args)
    check_folder_out(args.out)
    from ..pipeline import resize

    result = resize(args.src, args.out, request_from_args('convert', args))
    report(result)
    return 0
