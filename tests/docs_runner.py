"""Run one document's commands in order, in one interpreter: ``python docs_runner.py PLAN.json RESULTS.json``.

Used by ``test_docs_commands.py``. The plan lists the document's steps as the test extracted them:

* ``cli``: a ``vit-port ARGS`` (or ``python -m porting ARGS``) line, run as ``porting.cli.main(ARGS)``, the
  function the console script calls, so the document pays for one torch import instead of one per line;
* ``script``: ``python examples/NAME.py ARGS``, run as ``__main__`` with those arguments;
* ``python``: a fenced Python block, executed in one namespace shared by the document's blocks, as a reader
  pasting them into one session would;
* ``copy``: a download line (``curl -LO URL``) answered from the fixture the test's mapping names.

It stops at the first step that fails (later steps use what earlier ones made) and writes, for every step run,
its exit status, the tail of its output and its duration.
"""
import contextlib
import io
import json
import os
import runpy
import shutil
import sys
import time
import traceback


def run_step(step, namespace):
    if step['kind'] == 'cli':
        from porting.cli import main

        return main(step['argv'])
    if step['kind'] == 'script':
        sys.argv = list(step['argv'])
        try:
            runpy.run_path(step['argv'][0], run_name='__main__')
        except SystemExit as stop:
            return stop.code or 0
        return 0
    if step['kind'] == 'python':
        exec(compile(step['code'], step['where'], 'exec'), namespace)  # noqa: S102  (the document's own code)
        return 0
    if step['kind'] == 'copy':
        shutil.copy(step['fixture'], step['name'])
        return 0
    raise ValueError(f'unknown step kind {step["kind"]!r}')


def main(plan_path, results_path):
    with open(plan_path) as fh:
        plan = json.load(fh)
    namespace = {'__name__': '__docs__'}
    results = []
    for step in plan['steps']:
        out, start = io.StringIO(), time.perf_counter()
        saved = {k: os.environ.get(k) for k in step.get('env', {})}
        os.environ.update(step.get('env', {}))
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                code = run_step(step, namespace)
            except BaseException:  # noqa: BLE001  (reported to the test with the traceback)
                traceback.print_exc()
                code = 'exception'
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        results.append({'where': step['where'], 'code': code, 'output': out.getvalue()[-4000:],
                        'seconds': round(time.perf_counter() - start, 2)})
        if code != 0:
            break
    with open(results_path, 'w') as fh:
        json.dump(results, fh)


if __name__ == '__main__':
    main(sys.argv[1], sys.argv[2])
