"""``vit-port convert SRC OUT``: checkpoint -> verified simple_vit Hub folder."""
import argparse

from .cmd_push import check_push_args, push_from_args
from .options import (
    add_geometry_args, add_output_args, add_push_to_option, add_source_args, add_verify_args, check_sizes,
    convert_request, report)


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


def run(args: argparse.Namespace) -> int:
    from ..pipeline import convert

    check_sizes(args)
    if args.push_to:
        check_push_args(args, args.push_to)
    result = convert(args.src, args.out, convert_request(args))
    report(result)
    if args.push_to:
        push_from_args(args, args.out, args.push_to)
    return 0
