"""Run timm's own ``train.py`` with the ``simple_vit_*`` models registered.

timm's training script lives in the timm repository, not in the wheel, and creates models by
name. Recent versions import the modules named by ``--device-modules`` before ``create_model``,
so ``train.py --device-modules timm_vit_variants ...`` is enough there. This wrapper serves every
other script (older train.py copies, forks, ``validate.py``): it imports the plugin, then runs the
given file as ``__main__`` with the remaining arguments, exactly as ``python PATH ARGS...`` would.

    python -m timm_vit_variants.train --timm-train PATH/train.py ARGS...
    vit-variants-train --timm-train PATH/train.py ARGS...
"""
import argparse
import os
import runpy
import sys
from typing import List, Optional

__all__ = ['main', 'run_script']

_USAGE = 'vit-variants-train --timm-train PATH/train.py [ARGS...]'


def run_script(script: str, args: List[str]) -> None:
    """Import the plugin, then execute ``script`` as ``__main__`` with ``sys.argv = [script, *args]``.

    The script's directory goes first on ``sys.path``, as for ``python script.py``, so sibling
    imports in a timm checkout keep working. ``sys.argv`` and ``sys.path`` are restored afterwards.
    """
    import timm_vit_variants  # noqa: F401  (registers the simple_vit_* entrypoints with timm)

    script = os.path.abspath(script)
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(script))
    try:
        runpy.run_path(script, run_name='__main__')
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path


def main(argv: Optional[List[str]] = None) -> int:
    """Console entry point: every argument after ``--timm-train PATH`` goes to the script untouched."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(
        prog='vit-variants-train', usage=_USAGE,
        description='Run a timm training script (train.py) as __main__ with the simple_vit_* models registered. '
                    'Arguments after --timm-train PATH are passed to the script unchanged.')
    parser.add_argument('--timm-train', metavar='PATH', required=True, help="path to timm's train.py (or any script)")
    # Only the wrapper's own flag may come first; the script owns everything after its path.
    split = _script_arg_end(argv)
    ours, theirs = argv[:split], argv[split:]
    opts = parser.parse_args(ours)
    if not os.path.isfile(opts.timm_train):
        print(f'vit-variants-train: error: script not found: {opts.timm_train}', file=sys.stderr)
        return 2
    run_script(opts.timm_train, theirs)
    return 0


def _script_arg_end(argv: List[str]) -> int:
    """Index just past the ``--timm-train`` value (``--timm-train X`` or ``--timm-train=X``)."""
    for i, arg in enumerate(argv):
        if arg.startswith('--timm-train='):
            return i + 1
        if arg == '--timm-train':
            return min(i + 2, len(argv))
    return len(argv)


if __name__ == '__main__':
    sys.exit(main())
