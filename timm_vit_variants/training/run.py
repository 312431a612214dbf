"""Run any timm script (``train.py``, ``validate.py``, ``benchmark.py``, ``inference.py``, ``onnx_export.py``)
with the ``simple_vit_*`` models registered.

timm's scripts live in the timm repository, not in the wheel, and create models by name. Only
``train.py`` has ``--device-modules``; every other script (and older ``train.py`` copies or forks)
would not find the plugin's models. This runner imports the plugin, then runs the given file as
``__main__`` with the remaining arguments, exactly as ``python SCRIPT ARGS...`` would.

    vit-variants-run PATH/validate.py --model simple_vit_tiny_patch4_32 --data-dir DIR ...
    python -m timm_vit_variants.training.run PATH/train.py ARGS...
"""
import os
import runpy
import sys
import zipfile
from typing import List, Optional

__all__ = ['main', 'run_script']

_USAGE = '''usage: vit-variants-run SCRIPT.py|FOLDER [ARGS...]

Run a timm script (train.py, validate.py, benchmark.py, inference.py, onnx_export.py, ...) as
__main__ with the simple_vit_* models registered. Every argument after SCRIPT goes to it unchanged.
'''


def run_script(script: str, args: List[str]) -> None:
    """Import the plugin, then execute ``script`` as ``__main__`` with ``sys.argv = [script, *args]``.

    As for ``python SCRIPT``: a file's directory goes first on ``sys.path``, so sibling imports in a
    timm checkout keep working; a folder (or zip) runs its ``__main__.py`` with itself first on
    ``sys.path``. ``sys.argv`` and ``sys.path`` are restored afterwards.
    """
    import timm_vit_variants  # noqa: F401  (registers the simple_vit_* entrypoints with timm)

    script = os.path.abspath(script)
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [script, *args]
    if os.path.isfile(script) and not zipfile.is_zipfile(script):
        sys.path.insert(0, os.path.dirname(script))  # runpy puts a folder or zip there itself
    try:
        runpy.run_path(script, run_name='__main__')
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path


def main(argv: Optional[List[str]] = None) -> int:
    """Console entry point: ``SCRIPT [ARGS...]``; the script owns every argument after its path."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ('-h', '--help'):
        print(_USAGE, file=sys.stdout if argv else sys.stderr, end='')
        return 0 if argv else 2
    script, rest = argv[0], argv[1:]
    if os.path.isdir(script) and not os.path.isfile(os.path.join(script, '__main__.py')):
        print(f'vit-variants-run: error: {script} is a folder without a __main__.py, so it cannot run as '
              '`python FOLDER` would', file=sys.stderr)
        return 2
    if not os.path.exists(script):
        print(f'vit-variants-run: error: script not found: {script}', file=sys.stderr)
        return 2
    run_script(script, rest)  # a SystemExit from the script carries its own status
    return 0


if __name__ == '__main__':
    sys.exit(main())
