"""Every open_clip config whose image tower is a Vision Transformer (``open_clip.list_models()``: a native tower, or a
timm trunk from timm's ViT modules), built tiny with random weights and saved as open_clip users save it, is read to
within 2e-5 of open_clip's own ``encode_image``, or refused by name with the part this tool lacks (the refusals
docs/checkpoints.md lists); never a bare 'missing key'. ViTamin's trunks (timm's ``vitamin`` module: convolutional
stages before the blocks) are not ViT towers here; test_open_clip_timm.py checks their refusal."""
import pytest
import torch

from model_probes import read_into_model
from open_clip_tiny import image_size, save_tiny, tiny_timm, trunk_name
from timm_vit_variants.errors import ViTVariantsError

open_clip = pytest.importorskip('open_clip')
timm = pytest.importorskip('timm')

TOL = 2e-5
_VIT_MODULES = ['vision_transformer', 'vision_transformer_hybrid', 'vision_transformer_relpos', 'eva']
# open_clip config -> the family its refusal names (each with its missing part, see docs/checkpoints.md)
REFUSED = {
    **{name: 'PE-Core: RoPE together with a learned table' for name in (
        'PE-Core-B-16', 'PE-Core-L-14-336', 'PE-Core-S-16-384', 'PE-Core-T-16-384', 'PE-Core-bigG-14-448')},
    **{name: "EVA-02 CLIP: a trunk of timm's Eva" for name in (
        'EVA02-B-16', 'EVA02-L-14', 'EVA02-L-14-336', 'EVA02-E-14', 'EVA02-E-14-plus')},
    'EVA01-g-14': "EVA01 CLIP: timm's Eva without RoPE", 'EVA01-g-14-plus': "EVA01 CLIP: timm's Eva without RoPE",
    'MobileCLIP-B': 'MobileCLIP: its convolutional MCi stem', 'MobileCLIP2-B': 'MobileCLIP: its convolutional MCi stem',
    'vit_relpos_medium_patch16_cls_224': 'vit_relpos: its MLP-generated relative-position bias',
}


def _is_vit_tower(name: str) -> bool:
    vision = open_clip.get_model_config(name)['vision_cfg']
    trunk = vision.get('timm_model_name')
    if trunk is None:
        return isinstance(vision.get('layers'), int)  # a list is a ModifiedResNet
    return timm.models.is_model_in_modules(trunk, _VIT_MODULES)


ZOO = [name for name in open_clip.list_models() if _is_vit_tower(name)]


@pytest.mark.parametrize('name', ZOO)
def test_each_open_clip_vit_tower_converts_or_is_refused_by_name(name, tmp_path, max_delta):
    folder = tmp_path / 'model'
    with tiny_timm(trunk_name(name)):
        reference = save_tiny(name, folder)
        if name in REFUSED:
            with pytest.raises(ViTVariantsError) as refused:
                read_into_model(folder)
            assert REFUSED[name] in refused.value.reason and 'missing key' not in str(refused.value), refused.value
            return
        ours = read_into_model(folder)
    size = image_size(name)
    x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        max_delta(f'open_clip {name}: embedding', ours(x), reference.encode_image(x, normalize=False), TOL)


def test_coverage(capsys):
    """The figure: how many of open_clip's ViT towers convert (each checked above), the rest refused by name."""
    assert set(REFUSED) <= set(ZOO)
    converted = len(ZOO) - len(REFUSED)
    with capsys.disabled():
        print(f'\nopen_clip {open_clip.__version__} ViT image towers: {converted} of {len(ZOO)} convert within {TOL:g} '
              f'of encode_image; {len(REFUSED)} refused by name')
    assert converted >= 86
