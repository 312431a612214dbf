"""How Ctrl-C (SIGINT) and SIGTERM stop ``vit-port``, whenever they arrive.

The entry point (``porting.__main__.run``, also ``porting.cli.main``) calls ``install`` before anything else, and
from then until the process exits one handler, ``_on_signal``, answers both signals. It records the signal and
raises ``Stopped`` (a ``KeyboardInterrupt``) in the main thread. Raising alone is not enough: a library may swallow
the exception (torch's C extension catches any error while it imports numpy, and carries on without it) or turn
it into another one (an interrupted import that fails again as ``ImportError``). So the record is what counts:

  * ``held()`` blocks (the renames of our own entries) record a signal without raising, and raise it at their end;
  * ``check()`` raises ``Stopped`` once any signal was received: output is put in place only after it, so a
    swallowed interrupt still never leaves output behind;
  * the CLI reports any recorded signal as the outcome of the run (exit 128 + N), whatever else happened, and
    ``completed`` tells it what was already in place when the signal came;
  * ``finish()`` marks the run as over: later signals are only recorded, so the report is never cut short; and
    ``close()``, once the status is decided, ignores them until the process exits.

``Stopped`` is a subclass: CPython kills itself with SIGINT at exit (status -2, no message) once a *plain*
``KeyboardInterrupt`` went through certain C calls, even if it was caught later; ours never is one.

A signal that the process started with ignored (``nohup``, a background job of a non-interactive shell) stays
ignored, as Python itself leaves it. Without ``install`` (the Python API inside someone else's program), ``held()``
swaps the handlers only for its block and hands a held signal to the caller's handler at its end.
"""
import signal
import threading
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Optional

__all__ = ['Stopped', 'install', 'uninstall', 'held', 'check', 'received', 'completed', 'done', 'finish', 'close']

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

_received: List[int] = []  # every stop signal since install (or within one held block without it), in order
_completed: List[str] = []  # what was put in place, for the report of a signal that came after
_holding = 0  # > 0: signals are recorded, not raised
_installed: Optional[Dict[int, Any]] = None  # the handlers install() replaced; None when not installed


class Stopped(KeyboardInterrupt):
    """Raised in the main thread by SIGINT or SIGTERM, so cleanup runs as for Ctrl-C."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _on_signal(signum: int, frame: Any) -> None:
    _received.append(signum)
    if not _holding:
        raise Stopped(signum)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _take_over() -> Dict[int, Any]:
    """Our handler for each stop signal the process does not ignore; returns the handlers it replaced."""
    return {s: signal.signal(s, _on_signal) for s in STOP_SIGNALS if signal.getsignal(s) is not signal.SIG_IGN}


def _give_back(previous: Dict[int, Any]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, signal.SIG_DFL if handler is None else handler)


def install() -> bool:
    """Answer SIGINT and SIGTERM here until ``uninstall``; False (nothing done) if already installed or not called
    from the main thread, where signal handlers cannot be set."""
    global _installed
    if _installed is not None or not _main_thread():
        return False
    _installed = _take_over()
    return True


def uninstall() -> None:
    """Put back the handlers ``install`` replaced and forget what was recorded (an in-process run is over)."""
    global _installed, _holding
    if _installed is not None:
        _give_back(_installed)
    _installed = None
    _holding = 0
    _received.clear()
    _completed.clear()


def received() -> Optional[int]:
    """The first stop signal received since ``install``, or None."""
    return _received[0] if _received else None


def check() -> None:
    """Raise ``Stopped`` if a stop signal was received since ``install`` (even one that something swallowed)."""
    if _installed is not None and _received:
        raise Stopped(_received[0])


def completed(what: str) -> None:
    """Record that ``what`` (an output path, a Hub commit) is now complete and in place."""
    _completed.append(what)


def done() -> List[str]:
    """What ``completed`` recorded, in order."""
    return list(_completed)


def finish() -> None:
    """The run is over: from now on signals are only recorded, so what follows (the report) runs to its end."""
    global _holding
    if _installed is not None:
        _holding += 1


def close() -> None:
    """Ignore the stop signals from now until the process exits, keeping what was recorded: its status is decided.

    Python puts back the default action of a handled signal as it shuts down, and a signal then would kill the
    process without a word; ignored, it cannot.
    """
    if _installed is not None:
        for signum in _installed:
            signal.signal(signum, signal.SIG_IGN)


@contextmanager
def held(raise_after: bool = True) -> Iterator[None]:
    """A block that Ctrl-C and SIGTERM do not cut in two: a signal that arrives inside is recorded and raised as
    ``Stopped`` at its end (``raise_after=False``: left for the CLI's report, e.g. once OUT is in place).

    Without ``install``, the block's signal goes to the handler that was in place before, at its end. Never hold a
    block while waiting for something another process controls (a lock, a file).
    """
    global _holding
    if not _main_thread():  # handlers run in the main thread only; nothing to hold here
        yield
        return
    previous = _take_over() if _installed is None else {}
    _holding += 1
    try:
        yield
    finally:
        _holding -= 1
        if _installed is None:
            _give_back(previous)
            first = _received[:1]
            _received.clear()
            if first:
                signal.raise_signal(first[0])
        elif raise_after and _received and not _holding:
            raise Stopped(_received[0])
