"""timm's own scripts with the plugin: validate, benchmark, inference, onnx_export and onnx_validate run through
``vit-variants-run`` on a digits ImageFolder, as stand-ins that make the real scripts' calls (tests/timm_standins).

Each result is checked against a computation that does not go through the script: top-1 counted image by image,
class names from the folder's config.json, and the exported ONNX file validated by ONNX Runtime at two sizes
with the top-1 that PyTorch gets there.
"""
import json
from pathlib import Path

import pytest
import timm
import torch
from PIL import Image

import timm_vit_variants  # noqa: F401  (the in-process reference models; the scripts get it from the runner)
from porting.hub_folder import save_pretrained_folder
from timm_vit_variants.training.run import main as run_main

from train_fixtures import make_digits_folder

STANDINS = Path(__file__).resolve().parent / 'timm_standins'
LABELS = [f'digit {d}' for d in range(10)]
TINY_KWARGS = ['embed_dim=32', 'depth=1', 'num_heads=2', 'mlp_dim=64', 'patch_size=8']
SIZES = (32, 36)  # the nominal size and one the patch (8) does not divide


def _fit_head(model, data):
    """A least-squares linear probe on the digits at both test sizes, so predictions depend on the image."""
    paths = sorted((data / 'validation').glob('*/*.png'))
    labels = torch.tensor([int(p.parent.name) for p in paths])
    features = []
    with torch.no_grad():
        for size in SIZES:
            transform = timm.data.create_transform(**timm.data.resolve_data_config({'img_size': size}, model=model))
            x = torch.stack([transform(Image.open(p).convert('RGB')) for p in paths])
            features.append(model.forward_head(model.forward_features(x), pre_logits=True))
        design = torch.cat([torch.cat(features), torch.ones(len(paths) * len(SIZES), 1)], dim=1)
        targets = torch.nn.functional.one_hot(labels.repeat(len(SIZES)), 10).float()
        solution = torch.linalg.lstsq(design, targets).solution
        model.head.weight.copy_(solution[:-1].T)
        model.head.bias.copy_(solution[-1])


@pytest.fixture(scope='module')
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp('scripts')
    data = make_digits_folder(root / 'digits')
    torch.manual_seed(0)
    model = timm.create_model('simple_vit_tiny', embed_dim=32, depth=1, num_heads=2, mlp_dim=64, patch_size=8,
                              img_size=32, num_classes=10).eval()
    model.pretrained_cfg = dict(model.pretrained_cfg, crop_pct=1.0)
    _fit_head(model, data)
    folder = save_pretrained_folder(model, root / 'model', label_names=LABELS)
    return dict(root=root, data=data, folder=folder, model=f'local-dir:{folder}')


def _run(capsys, script, *args):
    capsys.readouterr()
    assert run_main([str(STANDINS / script), *map(str, args)]) == 0
    out = capsys.readouterr().out.splitlines()
    return json.loads(out[out.index('--result') + 1])


def _predictions(setup, img_size):
    """(file, predicted class, true class) for every image, computed without the scripts."""
    model = timm.create_model(setup['model'], pretrained=True).eval()
    transform = timm.data.create_transform(**timm.data.resolve_data_config({'img_size': img_size}, model=model))
    rows = []
    with torch.no_grad():
        for path in sorted((setup['data'] / 'validation').glob('*/*.png')):
            x = transform(Image.open(path).convert('RGB')).unsqueeze(0)
            rows.append((path, int(model(x).argmax()), int(path.parent.name)))
    return rows


def _top1(rows):
    return 100 * sum(pred == true for _, pred, true in rows) / len(rows)


def _validate(capsys, setup, img_size):
    return _run(capsys, 'validate.py', setup['data'], '--model', setup['model'], '--img-size', img_size,
                '--device', 'cpu', '-b', 16, '-j', 0)


def test_validate_top1_is_the_count_image_by_image(setup, capsys):
    for size in SIZES:
        result = _validate(capsys, setup, size)
        assert (result['img_size'], result['crop_pct']) == (size, 1.0)
        assert result['top1'] == pytest.approx(_top1(_predictions(setup, size)), abs=1e-3) and result['top1'] > 50


def test_benchmark_infers_and_trains_a_registry_model(capsys):
    result = _run(capsys, 'benchmark.py', '--model', 'simple_vit_tiny', '--model-kwargs', *TINY_KWARGS,
                  '--img-size', 36, '--bench', 'both', '-b', 4, '--num-warm-iter', 1, '--num-bench-iter', 2,
                  '--device', 'cpu')
    assert result['img_size'] == 36 and result['infer_samples_per_sec'] > 0 and result['train_samples_per_sec'] > 0


def test_inference_names_classes_from_the_folder(setup, capsys, tmp_path):
    results = tmp_path / 'predictions.json'
    _run(capsys, 'inference.py', setup['data'], '--model', setup['model'], '--label-type', 'name',
         '--device', 'cpu', '-b', 16, '-j', 0, '--results-file', results)
    rows = json.loads(results.read_text())
    validation = setup['data'] / 'validation'
    expected = {str(path.relative_to(validation)): (pred, LABELS[pred]) for path, pred, _ in _predictions(setup, 32)}
    assert len(set(expected.values())) > 1  # the probe tells the digits apart
    assert {name: (row['index'][0], row['label'][0]) for name, row in rows.items()} == expected


def test_onnx_export_then_onnx_validate_at_two_sizes(setup, capsys, tmp_path):
    onnx_file = tmp_path / 'model.onnx'
    _run(capsys, 'onnx_export.py', onnx_file, '--model', setup['model'], '--img-size', 32, '--dynamic-size',
         '--check-forward', '-b', 2)
    for size in SIZES:
        result = _run(capsys, 'onnx_validate.py', setup['data'] / 'validation', '--onnx-input', onnx_file,
                      '--img-size', size, '--mean', 0.5, 0.5, 0.5, '--std', 0.5, 0.5, 0.5, '--crop-pct', 1.0,
                      '--interpolation', 'bilinear', '-b', 16, '-j', 0)
        assert result['img_size'] == size
        assert result['top1'] == pytest.approx(_validate(capsys, setup, size)['top1'], abs=1e-3)
