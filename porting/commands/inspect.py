"""``vit-port inspect SRC``: tensor table, inferred config and an optional position-similarity plot."""
import argparse

from ..cli import add_geometry_args, add_source_args, check_sizes, source_hints


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        'inspect', help='list tensors and the inferred config; optionally plot position-embedding similarity',
        description='Print every stored tensor (name, shape, dtype) and the SimpleVisionTransformer kwargs '
                    'inferred from SRC. With --plot, draw each position\'s cosine similarity to all others '
                    '(ViT paper, Fig. 7) for the source grid and, with --img-size/--patch-size, after resizing.')
    parser.add_argument('src', metavar='SRC', help='checkpoint file or folder')
    add_source_args(parser)
    parser.add_argument('--plot', metavar='FILE.png', help='write the position-embedding similarity plot here')
    add_geometry_args(parser)
    parser.set_defaults(func=lambda args: run(parser, args))
    return parser


def run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from ..convert import open_source, source_model_args
    from ..inspect import config_table, plot_position_similarity, tensor_table
    from ..transforms import make_plan

    check_sizes(parser, args)
    if args.plot is None and (args.img_size or args.patch_size or args.resample_like):
        parser.error('--img-size/--patch-size/--resample-like only apply to --plot')
    with open_source(args.src, args.fmt, **source_hints(args)) as src:
        print(tensor_table(src.inventory()))
        print()
        print(config_table(src.format, source_model_args(src), src.grid))
        if args.plot:
            plan = make_plan(src.path, source_model_args(src), src.grid, img_size=args.img_size,
                             patch_size=args.patch_size, resample_like=args.resample_like)
            print(f'plot: {plot_position_similarity(src, plan, args.plot)}')
    return 0
