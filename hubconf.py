"""torch.hub entrypoints: one per registered ``simple_vit_*`` model, built from the same table as the registry.

    model = torch.hub.load('path/to/timm-vit-variants', 'simple_vit_tiny', source='local', num_classes=7)
"""
import timm as _timm

from timm_vit_variants.model_table import MODELS as _MODELS

dependencies = ['torch', 'timm', 'safetensors', 'huggingface_hub']


def _make_entrypoint(name: str):
    def entrypoint(pretrained: bool = False, **kwargs):
        return _timm.create_model(name, pretrained=pretrained, **kwargs)

    entrypoint.__name__ = entrypoint.__qualname__ = name
    entrypoint.__doc__ = (
        f'{_MODELS[name].doc}\n\n'
        f'Same as ``timm.create_model({name!r}, pretrained=pretrained, **kwargs)``; any timm model kwarg\n'
        f'(num_classes, img_size, patch_size, global_pool, ...) is accepted.\n')
    return entrypoint


for _name in _MODELS:
    globals()[_name] = _make_entrypoint(_name)
del _name
