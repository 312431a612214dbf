"""``python -m porting`` and the ``vit-port`` script: the command line, with Ctrl-C and SIGTERM answered from the
first instruction to the last (``porting.stopping``)."""
import atexit
import os
import sys
from typing import NoReturn, Optional

from . import stopping

_status: Optional[int] = None  # what the CLI returned; None until it has


def run() -> NoReturn:
    """Exit with ``vit-port``'s status. The stop handler is in place before anything else is imported; a signal that
    comes while the CLI loads is recorded, and the CLI reports it."""
    global _status
    stopping.install()
    atexit.register(_exit_now)  # registered first, so it runs last
    with stopping.held(raise_after=False):
        from .cli import main
    _status = main()
    sys.exit(_status)


def _exit_now() -> None:
    """The last exit handler: report a stop signal that came after the CLI's own report, then end the process.

    Every other exit handler has run by now. What is left is the interpreter's teardown (over a second with torch
    loaded), during which Python puts back the signals' default action: a Ctrl-C then would kill the process
    without a word. Nothing in it is ours to wait for, so the process ends here, with signals ignored meanwhile.
    """
    if _status is None:  # the CLI did not return (a bug's traceback): Python's usual exit
        return
    from .cli import report_stop

    stopping.close()
    status, signum = _status, stopping.received()
    if signum is not None and status < 128:  # came after the CLI's report
        status = report_stop(signum)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):  # gone, closed, or a reader that went away: nothing to save
            pass
    os._exit(status)


if __name__ == '__main__':
    run()
