"""``max_delta``: the one comparison of our outputs with a reference's, recorded so that ``pytest --deltas``
prints every measured max |Δ| (what, measured, bound) at the end of the run."""
import os
from typing import Any, List, Tuple

import numpy as np
import pytest
import torch

_DELTAS: List[Tuple[str, str, float, float]] = []

if os.environ.get('PYTEST_XDIST_WORKER'):
    torch.set_num_threads(1)  # pytest -n: the workers share the cores, one thread each


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption('--deltas', action='store_true',
                     help='print every max |Δ| measured against a reference output, with its bound')


def _array(x: Any) -> np.ndarray:
    return x.detach().cpu().double().numpy() if isinstance(x, torch.Tensor) else np.asarray(x, dtype=np.float64)


@pytest.fixture
def max_delta(request):
    """``max_delta(what, ours, expected, bound)``: assert max |ours - expected| <= bound, and record it."""
    def check(what: str, ours: Any, expected: Any, bound: float) -> float:
        a, b = _array(ours), _array(expected)
        assert a.shape == b.shape, f'{what}: shape {a.shape} != {b.shape}'
        measured = float(np.abs(a - b).max()) if a.size else 0.0
        request.node.user_properties.append(('max_delta', (what, measured, bound)))  # reaches xdist's controller
        assert measured <= bound, f'{what}: max|d|={measured:.2e} > {bound:.0e}'
        return measured
    return check


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == 'call':
        _DELTAS.extend((report.nodeid, *value) for name, value in report.user_properties if name == 'max_delta')


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not config.getoption('--deltas') or not _DELTAS:
        return
    terminalreporter.section('max |Δ| against reference outputs')
    for nodeid, what, measured, bound in _DELTAS:
        terminalreporter.write_line(f'{measured:9.2e}  (bound {bound:.0e})  {what}  [{nodeid}]')
