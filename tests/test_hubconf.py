"""torch.hub entrypoints served from a local checkout."""
import importlib.util
import inspect
from pathlib import Path

import timm
import torch

import timm_vit_variants  # noqa: F401

REPO = Path(__file__).resolve().parents[1]


def _hubconf():
    spec = importlib.util.spec_from_file_location('hubconf_under_test', REPO / 'hubconf.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_torch_hub_load_local_with_kwargs():
    model = torch.hub.load(str(REPO), 'simple_vit_tiny', source='local', num_classes=7, depth=2)
    assert type(model).__name__ == 'SimpleVisionTransformer'
    assert model.num_classes == 7 and len(model.blocks) == 2
    assert model(torch.randn(1, 3, 32, 48)).shape == (1, 7)


def test_entrypoints_are_exactly_the_registered_models():
    hub = _hubconf()
    public = sorted(n for n in dir(hub) if not n.startswith('_') and callable(getattr(hub, n)))
    assert public == sorted(timm.list_models('simple_vit_*'))
    for name in public:
        fn = getattr(hub, name)
        assert fn.__name__ == name and fn.__doc__ and name in fn.__doc__
        assert 'pretrained' in inspect.signature(fn).parameters


def test_dependencies_are_importable():
    hub = _hubconf()
    assert set(hub.dependencies) == {'torch', 'timm', 'safetensors', 'huggingface_hub'}
    for dep in hub.dependencies:
        assert importlib.util.find_spec(dep) is not None
