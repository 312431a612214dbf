"""``vit-port convert SRC OUT``: checkpoint -> verified simple_vit Hub folder."""
import argparse

from .cmd_push import check_push_args, push_from_args
from .options import (
    SOURCE_HELP, UsageError, add_geometry_args, add_hub_args, add_output_args, add_push_to_option, add_source_args, add_verify_args,
    check_folder_out, check_sizes, count_arg, report, request_from_args)

# Upload options that mean nothing without --push-to (the token and endpoint also serve a Hub-id source).
_PUSH_ONLY = {'private': '--private', 'revision': '--revision', 'create_pr': '--create-pr',
              'commit_message': '--commit-message', 'dry_run': '--dry-run', 'overwrite_card': '--overwrite-card'}


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        'convert', help='convert a checkpoint into a simple_vit Hub folder',
        description='Convert SRC (big_vision / vit_jax .npz, timm .pth/.safetensors or Hub folder, transformers '
                    'ViT folder; a local path, a Hub id, a URL or a registered tag) into the folder OUT: '
                    'model.safetensors, config.json (timm Hub format) and README.md. The result is checked against '
                    'the source reference implementation at the source geometry.')
    parser.add_argument('src', metavar='SRC', help=SOURCE_HELP)
    parser.add_argument('out', metavar='OUT', help='output folder (must not exist unless --overwrite)')
    add_geometry_args(parser)
    parser.add_argument('--num-classes', type=count_arg, metavar='N',
                        help='classifier width: 0 drops the head, any other count than the source gets a zero head')
    add_source_args(parser)
    add_output_args(parser)
    add_verify_args(parser)
    add_hub_args(parser)
    add_push_to_option(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    from ..pipeline import convert

    check_sizes(args)
    check_folder_out(args.out)
    if not args.push_to:
        given = [flag for dest, flag in _PUSH_ONLY.items() if getattr(args, dest)]
        if given:
            raise UsageError(f'{", ".join(given)} only apply with --push-to REPO_ID')
    repo_id = check_push_args(args, args.push_to) if args.push_to else None
    result = convert(args.src, args.out, request_from_args('convert', args))
    report(result)
    if repo_id:
        push_from_args(args, args.out, repo_id)
    return 0
