"""``vit-port push OUT_DIR REPO_ID`` and the ``--push-to`` options of ``vit-port convert``."""
import argparse

from .options import add_push_options, say

_DESCRIPTION = """\
Upload a converted model folder (model.safetensors or shards + index, config.json, README.md) to the
Hugging Face Hub as one commit, or one pull request with --create-pr. Files the Hub already holds are
skipped, so pushing an unchanged folder makes no commit. Prints the commit (or PR) URL.

Token: --token, else the HF_TOKEN environment variable, else the login cache (`hf auth login`).
It is never printed. Endpoint: --endpoint, else HF_ENDPOINT, else https://huggingface.co.
"""


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``push`` on the ``vit-port`` subcommand parsers."""
    parser = subparsers.add_parser('push', help='upload a converted model folder to the Hugging Face Hub',
                                   description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('out_dir', metavar='OUT_DIR', help='folder written by `vit-port convert`')
    parser.add_argument('repo_id', metavar='REPO_ID', help='Hub model repo, ORG/NAME')
    add_push_options(parser)
    return parser


def push_from_args(args: argparse.Namespace, out_dir: str, repo_id: str):
    """Run the push described by parsed ``args`` (from ``push`` or ``convert --push-to``); returns a PushResult."""
    from ..publish import push_folder

    result = push_folder(out_dir, repo_id, private=args.private, revision=args.revision, create_pr=args.create_pr,
                         commit_message=args.commit_message, token=args.token, endpoint=args.endpoint,
                         dry_run=args.dry_run, overwrite_card=args.overwrite_card)
    print_result(result)
    return result


def print_result(result) -> None:
    """The push's URL (or dry-run listing, or "nothing changed") on stdout, its notes on stderr."""
    for line, is_note in result.report():
        say(line, err=is_note)


def check_push_args(args: argparse.Namespace, repo_id: str) -> None:
    """Fail before any long work (conversion) when the push could not start: bad repo id, no token."""
    from ..publish import check_repo_id, require_token

    check_repo_id(repo_id)
    if not args.dry_run:
        require_token(args.token)


def run(args: argparse.Namespace) -> int:
    """Entry for ``vit-port push``; a ViTVariantsError propagates for the CLI to print."""
    push_from_args(args, args.out_dir, args.repo_id)
    return 0
