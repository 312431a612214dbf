"""Coverage of timm's plain-ViT zoo: every name in timm's nine plain-ViT modules, built by timm with random weights
at reduced depth, saved with timm's ``save_for_hf``, and converted by ``vit-port convert`` (which verifies the
converted model against timm's own forward). Each name ends converted, refused (the ``error:`` line), or as a
failure of ours (a traceback: a bug).

This is the whole registry, minutes of work on two cores, so it lives here and not in the test suite; the suite
checks the families it finds. The figures go to stdout and, with ``--json``, to a file.

``--speed`` also times each converted model against timm's own, alternately in this process (the machine is shared
and noisy, so only the ratio means anything): timm's forward time over ours at the entry's input size, per name
and as the median per module (> 1.0: ours is faster).

Run: ``OMP_NUM_THREADS=1 python benchmarks/timm_zoo.py --depth 1 --json /tmp/timm_zoo.json``
     ``OMP_NUM_THREADS=1 python benchmarks/timm_zoo.py --depth 2 --speed --only vit_base_patch16_224 eva02_base_patch14_224``
"""
import argparse
import collections
import contextlib
import io
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import timm
import torch
from timm.data import resolve_model_data_config
from timm.models import is_model_in_modules, save_for_hf

from porting.cli import main

MODULES = ('vision_transformer', 'eva', 'deit', 'naflexvit', 'vision_transformer_relpos', 'qwen3_vit', 'beit',
           'gemma4_vit', 'vision_transformer_sam')


def names() -> List[str]:
    """timm's registered names in the nine plain-ViT modules."""
    return [n for n in timm.list_models() if is_model_in_modules(n, MODULES)]


MAX_PARAMS = 500_000_000  # an entry that only builds at its full depth is skipped above this (memory)


class TooLarge(Exception):
    """An entry that builds only at its full depth, too large to build here."""


def build(name: str, depth: int) -> 'timm.models.VisionTransformer':
    """``name`` with random weights at ``depth`` blocks (at timm's own depth where the entry fixes a per-block
    setting, such as Sapiens 2's key/value head counts, unless that is over ``MAX_PARAMS``)."""
    try:
        return timm.create_model(name, pretrained=False, depth=depth)
    except (TypeError, AssertionError):
        with torch.device('meta'):
            size = sum(p.numel() for p in timm.create_model(name, pretrained=False).parameters())
        if size > MAX_PARAMS:
            raise TooLarge(f'{size / 1e9:.1f}B parameters at its full depth') from None
        return timm.create_model(name, pretrained=False)


def speed_ratio(ref: torch.nn.Module, folder: Path, rounds: int = 7, batch: int = 2) -> float:
    """timm's forward time over ours (the converted ``folder``) at ``ref``'s input size: the median of ``rounds``
    alternating timings, after a warm-up of each."""
    ours = timm.create_model(f'local-dir:{folder}', pretrained=True).eval()
    ref = ref.eval()
    x = torch.randn(batch, *resolve_model_data_config(ref)['input_size'])
    times: Dict[str, List[float]] = {'ours': [], 'timm': []}
    with torch.inference_mode():
        for model in (ours, ref):
            model(x)
        for _ in range(rounds):
            for key, model in (('timm', ref), ('ours', ours)):
                start = time.perf_counter()
                model(x)
                times[key].append(time.perf_counter() - start)
    return statistics.median(times['timm']) / statistics.median(times['ours'])


def convert(name: str, depth: int, root: Path, speed: int = 0) -> Tuple[str, str, Optional[float]]:
    """(outcome, detail, speed ratio or None) of converting ``name``: 'converts', 'refused' with its error line,
    'skipped' (too large to build), or 'failure'; ``speed`` rounds of timing (0: none)."""
    try:
        model = build(name, depth)
    except TooLarge as e:
        return 'skipped', str(e), None
    save_for_hf(model, str(root / 'src'))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(['convert', str(root / 'src'), str(root / 'out')])
    lines = [line for line in err.getvalue().splitlines() if line.startswith('error:')]
    if rc == 0:
        return 'converts', '', speed_ratio(model, root / 'out', rounds=speed) if speed else None
    if len(lines) == 1 and 'Traceback' not in err.getvalue():
        return 'refused', lines[0].replace(str(root), 'FOLDER'), None
    return 'failure', err.getvalue()[-500:], None


def run(selected: List[str], depth: int, speed: int = 0) -> Dict[str, Tuple[str, str, Optional[float]]]:
    results: Dict[str, Tuple[str, str, Optional[float]]] = {}
    for i, name in enumerate(selected, 1):
        start = time.monotonic()
        with tempfile.TemporaryDirectory() as tmp:
            results[name] = convert(name, depth, Path(tmp), speed)
        outcome, detail, ratio = results[name]
        timing = f', timm / ours {ratio:.2f}' if ratio is not None else ''
        print(f'[{i}/{len(selected)}] {name}: {outcome} ({time.monotonic() - start:.1f} s{timing}) {detail[:160]}',
              file=sys.stderr)
    return results


def main_() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--depth', type=int, default=1, help='blocks per model (default 1)')
    parser.add_argument('--only', nargs='*', help='names (default: the whole zoo)')
    parser.add_argument('--json', type=Path, help='write {name: [outcome, detail, speed ratio]} here')
    parser.add_argument('--speed', type=int, nargs='?', const=7, default=0, metavar='ROUNDS',
                        help="time each converted model against timm's own over ROUNDS alternating rounds (default 7): "
                             'the ratio timm / ours')
    args = parser.parse_args()
    results = run(args.only or names(), args.depth, args.speed)
    counts = collections.Counter(outcome for outcome, _, _ in results.values())
    by_module: Dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    ratios: Dict[str, List[float]] = collections.defaultdict(list)
    for name, (outcome, _, ratio) in results.items():
        module = next(m for m in MODULES if is_model_in_modules(name, [m]))
        by_module[module][outcome] += 1
        if ratio is not None:
            ratios[module].append(ratio)
    print(f"timm zoo: {counts['converts']} of {len(results)} names convert, {counts['refused']} refused by name, "
          f"{counts['skipped']} skipped (too large to build at full depth), {counts['failure']} failures")
    for module, c in by_module.items():
        timing = (f'; timm / ours median {statistics.median(ratios[module]):.2f} '
                  f'(range {min(ratios[module]):.2f} to {max(ratios[module]):.2f})') if ratios[module] else ''
        print(f"  {module}: {c['converts']} of {sum(c.values())} convert{timing}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == '__main__':
    main_()
