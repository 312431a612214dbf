"""``vit-port``: convert, resize, inspect, verify, export and push ViT checkpoints for the ``simple_vit_*`` family.

This module only parses and reports. Each command module in ``porting.commands`` adds its parser
and a ``run(args) -> int``; heavy imports (torch, timm) happen inside ``run``, so ``--help`` is
instant. Exit status: 0 success, 1 failure (``error: <message>`` on stderr, no traceback),
2 usage error, 128 + N when stopped by signal N (Ctrl-C: 130, SIGTERM: 143) whenever it comes, with nothing
left behind (or, once OUT is in place, a line saying it is complete). Set ``VIT_PORT_DEBUG=1`` to see the
traceback of an unexpected failure.
"""
import argparse
import os
import signal
import sys
import warnings
from typing import List, NoReturn, Optional, Sequence

from . import stopping
from .commands import cmd_convert, cmd_export, cmd_inspect, cmd_push, cmd_resize, cmd_verify
from .commands.options import UsageError, recorded_command, remedy, say

COMMANDS = (cmd_convert, cmd_resize, cmd_inspect, cmd_verify, cmd_export, cmd_push)
PROG = 'vit-port'


class Parser(argparse.ArgumentParser):
    """argparse without option abbreviations, reporting usage errors as ``error: <message>`` (exit 2).

    Abbreviations are off because ``--tok SECRET`` would otherwise be taken for ``--token`` and escape
    the rules that keep tokens out of cards and logs. The message never echoes unrecognised values.
    """

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault('allow_abbrev', False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f'error: {_safe_usage_message(message)}\n')


def _safe_usage_message(message: str) -> str:
    from .redact import redact

    head, sep, rest = message.partition('unrecognized arguments: ')
    if sep:  # name the unknown options, never their values (one may be a token)
        names = [w.split('=', 1)[0] for w in rest.split() if w.startswith('-')]
        message = head + sep + (' '.join(names) if names else '(values not shown)')
    return redact(message)


class _Version(argparse.Action):
    """``--version``: the version is looked up only when asked for (the metadata lookup costs ``--help`` time)."""

    def __call__(self, parser, namespace, values, option_string=None) -> NoReturn:
        print(f'{PROG} {version()}')
        parser.exit(0)


def version() -> str:
    """The installed timm-vit-variants version, read from the package metadata (no torch import)."""
    from importlib.metadata import PackageNotFoundError, version as installed

    try:
        return f'{installed("timm-vit-variants")} (timm-vit-variants)'
    except PackageNotFoundError:
        return 'unknown (timm-vit-variants is not installed; run from a checkout)'


def build_parser() -> Parser:
    parser = Parser(
        prog=PROG,
        description='Convert official ViT weights (big_vision / vit_jax .npz, timm, transformers) into '
                    'timm-vit-variants simple_vit_* Hub folders, with numerical verification.')
    parser.add_argument('--version', action=_Version, nargs=0, help="show vit-port's version and exit")
    sub = parser.add_subparsers(dest='command', metavar='COMMAND', parser_class=Parser)
    sub.required = True
    for command in COMMANDS:
        command.add_parser(sub).set_defaults(run=command.run)
    parser.subcommands = sub.choices
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run ``vit-port``; returns the exit status.

    Ctrl-C and SIGTERM are answered by ``porting.stopping`` for the whole call (from the process's start when run
    as ``vit-port`` or ``python -m porting``): one that arrived at any moment decides the status, 128 + N.
    """
    installed_here = stopping.install()  # False under porting.__main__.run, which did it first
    try:
        code = _run_to_end(list(sys.argv[1:] if argv is None else argv))
        signum = stopping.received() or (signal.SIGINT if code is None else None)
        return code if signum is None else report_stop(signum)
    finally:
        if installed_here:
            stopping.uninstall()


def _run_to_end(argv: List[str]) -> Optional[int]:
    """``_main``'s status, or None when a ``KeyboardInterrupt`` ended it; once it is over, signals are only
    recorded, so the report that follows is never cut short."""
    try:
        try:
            return _main(argv)
        finally:
            stopping.finish()
    except KeyboardInterrupt:  # stopping.Stopped, or one raised by hand
        return None


def report_stop(signum: int) -> int:
    """Say that stop signal ``signum`` ended the run, and what state the output is in; returns 128 + signum."""
    name = signal.Signals(signum).name
    done = stopping.done()
    if done:
        say(f'error: interrupted by {name}; {" and ".join(done)} was already complete and in place', err=True)
    else:
        say(f'error: interrupted by {name}; no output was written', err=True)
    return 128 + int(signum)


def _main(argv: List[str]) -> int:
    from .redact import register_token, tokens_in_argv

    stopping.check()  # a signal that came while the CLI loaded

    for token in tokens_in_argv(argv):
        register_token(token)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    subparser = parser.subcommands[args.command]
    register_token(getattr(args, 'token', None))
    _load_torch()
    args.command_line = recorded_command(subparser, args, f'{PROG} {args.command}')
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            return int(args.run(args) or 0)
    except UsageError as e:
        subparser.print_usage(sys.stderr)
        say(f'error: {_safe_usage_message(str(e))}', err=True)
        return 2
    except SystemExit as e:
        return int(e.code or 0)
    except Exception as e:  # noqa: BLE001  (the CLI promises a message, not a traceback)
        stopping.check()  # an interrupt that a library turned into another error is still the interrupt
        return _report_failure(e)


def _load_torch() -> None:
    """Import torch with stop signals held: torch's C++ calls back into Python while it loads, and an exception
    raised there (our ``Stopped``) reaches C++ code that cannot pass it on, which aborts the process (SIGABRT)."""
    with stopping.held():
        import torch  # noqa: F401


def _report_failure(e: Exception) -> int:
    from .redact import redact

    errors = sys.modules.get('timm_vit_variants.errors')
    if errors is not None and isinstance(e, errors.ViTVariantsError):
        say(f'error: {redact(str(e))}{remedy(e.needs)}', err=True)
        return 1
    if os.environ.get('VIT_PORT_DEBUG'):
        raise e
    say(f'error: {type(e).__name__}: {redact(str(e))} (set VIT_PORT_DEBUG=1 for a traceback)', err=True)
    return 1


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    from .redact import redact

    say(f'warning: {redact(str(message))}', err=True)
