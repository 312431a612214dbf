"""``vit-port inspect SRC``: tensor table, inferred config and an optional position-similarity plot."""
import argparse

from .options import (
    SOURCE_HELP, UsageError, add_geometry_args, add_hub_args, add_source_args, check_sizes, request_from_args, say)


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        'inspect', help='list tensors and the inferred config; optionally plot position-embedding similarity',
        description='Print every stored tensor (name, shape, dtype) and the SimpleVisionTransformer kwargs '
                    'inferred from SRC. With --plot, draw each position\'s cosine similarity to all others '
                    '(ViT paper, Fig. 7) for the source grid and, with --img-size/--patch-size, after resizing '
                    '(needs matplotlib: the plot extra).')
    parser.add_argument('src', metavar='SRC', help=SOURCE_HELP)
    add_source_args(parser)
    parser.add_argument('--plot', metavar='FILE.png', help='write the position-embedding similarity plot here')
    add_geometry_args(parser)
    add_hub_args(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    check_sizes(args)
    if args.plot is None and (args.img_size or args.patch_size or args.resample_like):
        raise UsageError('--img-size/--patch-size/--resample-like only apply to --plot')
    from ..extras import require

    if args.plot:
        require('plot', 'inspect --plot')
    from ..inspection import config_table, plot_position_similarity, tensor_table
    from ..plan import make_plan, open_source
    from ..sources import resolve_source

    request = request_from_args('convert', args)
    options = request.source
    resolved = resolve_source(args.src, options.endpoint, options.token, progress=request.progress,
                              download_timeout=options.download_timeout, stall_timeout=options.stall_timeout)
    with open_source(resolved.path, options, request.limits) as src:
        say(tensor_table(src.inventory()))
        say('')
        say(config_table(src.format, src.model_args, src.grid))
        if args.plot:
            plan = make_plan(src, request.target, request.limits)
            say(f'plot: {plot_position_similarity(src, plan, args.plot, source_name=resolved.label)}')
    return 0
