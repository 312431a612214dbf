"""torch.hub entrypoints: one per registered ``simple_vit_*`` model.

    model = torch.hub.load('path/to/timm-vit-variants', 'simple_vit_tiny', source='local', num_classes=7)
"""
import timm as _timm

import timm_vit_variants as _timm_vit_variants  # noqa: F401  (registers the models)

dependencies = ['torch', 'timm', 'safetensors', 'huggingface_hub']


def _make_entrypoint(name: str):
    def entrypoint(pretrained: bool = False, **kwargs):
        return _timm.create_model(name, pretrained=pretrained, **kwargs)

    summary = (_timm.models.model_entrypoint(name).__doc__ or '').strip()
    entrypoint.__name__ = entrypoint.__qualname__ = name
    entrypoint.__doc__ = (
        f'{summary}\n\n'
        f'Same as ``timm.create_model({name!r}, pretrained=pretrained, **kwargs)``; any timm model kwarg\n'
        f'(num_classes, img_size, patch_size, global_pool, ...) is accepted.\n')
    return entrypoint


for _name in _timm.list_models('simple_vit_*'):
    globals()[_name] = _make_entrypoint(_name)
del _name
