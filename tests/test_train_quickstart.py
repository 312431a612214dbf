"""The quick start, shortened: the digits model must learn, and its Hub folder must reload exactly."""
import importlib.util
import math
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / 'examples' / 'quickstart.py'


@pytest.fixture(scope='module')
def quickstart():
    spec = importlib.util.spec_from_file_location('quickstart', EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_short_digits_run_learns_and_reloads(quickstart, tmp_path):
    ds_train, ds_val = quickstart.digits_split()
    assert (len(ds_train), len(ds_val)) == (1437, 360)
    # The quick start's recipe, shortened: 4 epochs of a 2-block model in batches of 32, no warmup.
    args = quickstart.recipe(epochs=4, extra=['--warmup-epochs', '0', '--model-kwargs', 'depth=2', 'patch_size=8',
                                              '--batch-size', '32', '--lr', '1e-3'])
    args.progress = False
    result = quickstart.train(args, dataset_train=ds_train, dataset_eval=ds_val)

    losses = result.step_losses
    assert all(math.isfinite(x) for x in losses)
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert first > 2.0 and last < first - 0.5, (first, last)  # ln(10) = 2.30 at the zero-initialised head
    model = result.model.eval()
    accs = [quickstart.accuracy_at(model, ds_val, size) for size in quickstart.EVAL_SIZES]
    assert accs[0] >= 50.0, accs  # chance is 10%
    assert min(accs[1:]) >= 30.0, accs  # other resolutions run with the same weights, well above chance
    flexi = quickstart.accuracy_at(quickstart.with_patch_for(model, 48), ds_val, 48)
    assert flexi >= 30.0, flexi

    out = tmp_path / 'hub'
    quickstart.save_hub_folder(model, str(out))
    assert {p.name for p in out.iterdir()} >= {'config.json', 'model.safetensors'}
    assert quickstart.reload_matches(model, str(out), ds_val) == 0.0
