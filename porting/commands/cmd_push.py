"""``vit-port push REPO_ID FOLDER`` (as ``hf upload``) and the ``--push-to`` options of ``vit-port convert``."""
import argparse
import os
from typing import Tuple

from .options import add_hub_args, add_push_options, say

_DESCRIPTION = """\
Upload a converted model folder (model.safetensors or shards + index, config.json, README.md) to the
Hugging Face Hub as one commit, or one pull request with --create-pr. Files the Hub already holds are
skipped, so pushing an unchanged folder makes no commit. Prints the commit (or PR) URL.

REPO_ID is ORG/NAME, or a bare NAME for the token's own namespace (as `hf upload REPO_ID LOCAL_PATH`).
The older order, FOLDER REPO_ID, still works and says it is deprecated.

Uploaded: the regular files under FOLDER (hidden names left out). Refused, before any request: a symlink
leading out of FOLDER, a FIFO or device, a file holding a Hub token (hf_...), and a folder vit-port did not
write (config.json naming another architecture, weights that are not the safetensors it implies) unless --force.

Token: --token, else the HF_TOKEN environment variable, else the login cache (`hf auth login`).
It is never printed. Endpoint: --endpoint, else HF_ENDPOINT, else https://huggingface.co.
"""


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``push`` on the ``vit-port`` subcommand parsers."""
    parser = subparsers.add_parser('push', help='upload a converted model folder to the Hugging Face Hub',
                                   description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('repo_id', metavar='REPO_ID', help="Hub model repo: ORG/NAME, or NAME in the token's namespace")
    parser.add_argument('folder', metavar='FOLDER', help='folder written by `vit-port convert`')
    add_hub_args(parser)
    add_push_options(parser)
    parser.add_argument('--force', action='store_true',
                        help='push a folder vit-port did not write (another architecture or other weights); '
                             'symlinks out of FOLDER and files holding a token are refused all the same')
    return parser


def push_from_args(args: argparse.Namespace, folder: str, repo_id: str):
    """Run the push described by parsed ``args`` (from ``push`` or ``convert --push-to``); returns a PushResult."""
    from ..publish import push_folder

    result = push_folder(folder, repo_id, private=args.private, revision=args.revision, create_pr=args.create_pr,
                         commit_message=args.commit_message, token=args.token, endpoint=args.endpoint,
                         dry_run=args.dry_run, overwrite_card=args.overwrite_card,
                         force=getattr(args, 'force', False))
    print_result(result)
    return result


def print_result(result) -> None:
    """The push's URL (or dry-run listing, or "nothing changed") on stdout, its notes on stderr."""
    for line, is_note in result.report():
        say(line, err=is_note)


def check_push_args(args: argparse.Namespace, repo_id: str) -> str:
    """The full ``ORG/NAME`` to push to, found before any long work (conversion): a bad id or no token fails here."""
    from ..publish import check_repo_id, require_token, target_repo_id

    check_repo_id(repo_id)
    token = None if args.dry_run else require_token(args.token)
    return target_repo_id(repo_id, token, args.endpoint, dry_run=args.dry_run)


def argument_order(first: str, second: str) -> Tuple[str, str, bool]:
    """(repo id, folder, whether the deprecated FOLDER REPO_ID order was used).

    The old order is recognised only when the first argument is an existing folder and the second is not.
    """
    if os.path.isdir(first) and not os.path.isdir(second):
        return second, first, True
    return first, second, False


def run(args: argparse.Namespace) -> int:
    """Entry for ``vit-port push``; a ViTVariantsError propagates for the CLI to print."""
    repo_id, folder, deprecated = argument_order(args.repo_id, args.folder)
    if deprecated:
        say(f'warning: `vit-port push FOLDER REPO_ID` is deprecated; write `vit-port push {repo_id} {folder}` '
            '(REPO_ID first, as `hf upload`)', err=True)
    push_from_args(args, folder, repo_id)
    return 0
