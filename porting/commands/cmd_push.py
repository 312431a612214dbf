"""``vit-port push OUT_DIR REPO_ID`` and the ``--push-to`` options of ``vit-port convert``."""
import argparse


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


def add_push_options(parser: argparse.ArgumentParser, title: str = 'Hub upload') -> None:
    """Options shared by ``push`` and ``convert --push-to``."""
    g = parser.add_argument_group(title)
    g.add_argument('--private', action='store_true', help='create the repo as private (if it does not exist)')
    g.add_argument('--revision', metavar='BRANCH', default=None,
                   help='branch to commit to, created from main when missing, or refs/pr/N to add to an open '
                        'pull request (the PR target with --create-pr)')
    g.add_argument('--create-pr', action='store_true', help='open a pull request instead of committing')
    g.add_argument('--commit-message', metavar='MSG', default=None, help='commit title')
    g.add_argument('--token', metavar='TOKEN', default=None, help='Hub token (default: HF_TOKEN, then login cache)')
    g.add_argument('--endpoint', metavar='URL', default=None, help='Hub URL (default: HF_ENDPOINT or huggingface.co)')
    g.add_argument('--dry-run', action='store_true',
                   help='print the files (path, size, sha256) that would be uploaded; send nothing')
    g.add_argument('--overwrite-card', action='store_true',
                   help='replace a README.md on the Hub that differs from the local card (kept otherwise)')


def add_push_to_option(parser: argparse.ArgumentParser) -> None:
    """``--push-to REPO_ID`` plus the upload options, for ``vit-port convert``."""
    parser.add_argument('--push-to', metavar='REPO_ID', default=None,
                        help='after converting, push OUT_DIR to this Hub repo (see `vit-port push --help`)')
    add_push_options(parser, title='Hub upload (with --push-to)')


def push_from_args(args: argparse.Namespace, out_dir: str, repo_id: str):
    """Run the push described by parsed ``args`` (from ``push`` or ``convert --push-to``); returns a PushResult."""
    from ..publish import push_folder

    return push_folder(out_dir, repo_id, private=args.private, revision=args.revision, create_pr=args.create_pr,
                       commit_message=args.commit_message, token=args.token, endpoint=args.endpoint,
                       dry_run=args.dry_run, overwrite_card=args.overwrite_card)


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
