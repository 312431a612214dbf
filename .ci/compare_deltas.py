"""Compare two ``pytest --deltas`` outputs: a refactor changes no number.

Rows are matched by (what was measured, the value, its bound), not by test id, so renamed tests still match.
Prints how many rows are identical, which measured values changed, which rows are gone and how many are new;
exits 1 when a value changed or a row is gone.

    python -m pytest -q -n 2 tests --deltas > after.txt
    python .ci/compare_deltas.py before.txt after.txt
"""
import re
import sys
from collections import Counter

_ROW = re.compile(r'\s*([0-9.e+-]+)\s+\(bound ([^)]*)\)\s+(.*)\s+\[(.*)\]\s*$')


def rows(path: str) -> Counter:
    """Every ``--deltas`` row of ``path`` as (what, value, bound), counted."""
    found: Counter = Counter()
    with open(path, errors='replace') as f:
        for line in f:
            match = _ROW.match(line)
            if match:
                found[(match.group(3).strip(), match.group(1), match.group(2))] += 1
    return found


def main(before_path: str, after_path: str) -> int:
    before, after = rows(before_path), rows(after_path)
    gone = before - after
    measured_after = {what for what, _, _ in after}
    changed = sorted(k for k in gone if k[0] in measured_after)
    missing = sorted(k for k in gone if k[0] not in measured_after)
    print(f'{sum((before & after).values())} rows identical of {sum(before.values())}; '
          f'{len(changed)} values changed, {len(missing)} rows gone, {sum((after - before).values())} rows new')
    for what, value, bound in changed:
        now = sorted(v for w, v, _ in after if w == what)
        print(f'changed: {what}: {value} -> {", ".join(now)} (bound {bound})')
    for what, value, bound in missing:
        print(f'gone: {what}: {value} (bound {bound})')
    return 1 if gone else 0


if __name__ == '__main__':
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
