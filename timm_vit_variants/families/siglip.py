"""SigLIP and SigLIP 2 image towers (big_vision; transformers' ``siglip`` / ``siglip2`` folders): the fixed-size
towers and SigLIP 2's NaFlex towers, their published tags, and the routes of transformers' folders. big_vision's
``.npz`` archives are read by the ``bigvision`` family's routes; the transformers readers are ``checkpoints.hf_siglip``.
"""
from typing import Any, Dict

from ..cfgs import pretrained_cfg
from ..checkpoints.hf_siglip import SIGLIP_MODEL_TYPES, HFSiglip2Checkpoint, HFSiglipCheckpoint
from ..checkpoints.routes import Route
from ..model_table import ModelEntry
from .registry import Family

__all__ = ['FAMILY', 'SIGLIP_TOWERS']

# Image towers: a learned table without a cls slot, big_vision's MAPHead, no classifier (model(x) is the image
# embedding: their pretrained_cfg says num_classes=0, so a folder's own count still wins), and the VALID patch
# conv's crop.
_TOWER = {'pos_embed': 'learn', 'global_pool': 'map', 'grid_mode': 'crop'}
# (variant, patch, image sizes) of the published towers (big_vision configs/proj/image_text/README_siglip2.md).
SIGLIP_TOWERS = (('base', 16, (224, 256, 384, 512)), ('base', 32, (256,)), ('large', 16, (256, 384, 512)),
                 ('so400m', 14, (224, 384)), ('so400m', 16, (256, 384, 512)), ('giantopt', 16, (256, 384)))
_LABEL = {'base': 'B', 'large': 'L', 'so400m': 'So400m', 'giantopt': 'g-opt'}
_NAFLEX_SIZES = ('base', 'so400m')

_ROWS = {
    **{f'simple_vit_{size}_patch{patch}_siglip_{img}': ModelEntry(
        size, dict(_TOWER, img_size=img, patch_size=patch),
        f'SigLIP image tower {_LABEL[size]}/{patch} at {img}px (big_vision): learned table, MAP head, no '
        'classifier, so model(x) is the image embedding.') for size, patch, sizes in SIGLIP_TOWERS for img in sizes},
    **{f'simple_vit_{size}_patch16_siglip_naflex': ModelEntry(
        size, dict(_TOWER, img_size=256, patch_size=16, patch_embed='linear', pos_embed_resample='flexi'),
        f'SigLIP 2 NaFlex image tower {_LABEL[size]}/16 (big_vision naflex_vit): a 16x16 learned table '
        "resized to each image's own grid, MAP head; takes a NaFlex dict or a list of images at their own sizes.")
       for size in _NAFLEX_SIZES},
}

_URL = 'https://storage.googleapis.com/big_vision/'
_V2_SHORT = {'base': 'b', 'large': 'l', 'so400m': 'so400m', 'giantopt': 'g-opt'}  # the file names' spelling
# The published image-text files (big_vision configs/proj/image_text/README_siglip2.md, the SigLIP demo
# notebooks): (model, tag) -> file. Each is a whole two-tower file; the plugin reads its image tower.
_FILES = {
    **{(f'simple_vit_base_patch16_siglip_{img}', 'webli'): f'siglip/webli_en_b16_{img}_{n}.npz' for img, n in (
        (224, 63724782), (256, 60500360), (384, 68578854), (512, 68580893))},
    ('simple_vit_base_patch16_siglip_256', 'webli_i18n'): 'siglip/webli_i18n_b16_256_66117334.npz',
    ('simple_vit_large_patch16_siglip_256', 'webli'): 'siglip/webli_en_l16_256_60552751.npz',
    ('simple_vit_large_patch16_siglip_384', 'webli'): 'siglip/webli_en_l16_384_63634585.npz',
    ('simple_vit_so400m_patch14_siglip_224', 'webli'): 'siglip/webli_en_so400m_224_57633886.npz',
    ('simple_vit_so400m_patch14_siglip_384', 'webli'): 'siglip/webli_en_so400m_384_58765454.npz',
    ('simple_vit_so400m_patch16_siglip_256', 'webli_i18n'): 'siglip/webli_i18n_so400m_16_256_78061115.npz',
    # SigLIP 2 publishes every tower of SIGLIP_TOWERS
    **{(f'simple_vit_{size}_patch{patch}_siglip_{img}', 'v2_webli'):
       f'siglip2/siglip2_{_V2_SHORT[size]}{patch}_{img}.npz' for size, patch, sizes in SIGLIP_TOWERS for img in sizes},
    **{(f'simple_vit_{size}_patch16_siglip_naflex', 'v2_webli'): f'siglip2/siglip2_{_V2_SHORT[size]}16_naflex.npz'
       for size in _NAFLEX_SIZES},
}


def _cfg(name: str, tag: str) -> Dict[str, Any]:
    """A tower's published weights: the image embedding (no classifier), big_vision's evaluation transform."""
    img = _ROWS[name].config().img_size
    v2 = tag == 'v2_webli'
    return pretrained_cfg(
        url=_URL + _FILES[(name, tag)],
        custom_load=True,
        num_classes=0,
        input_size=(3, *img),
        # big_vision SigLIP: resize(size)|value_range(-1, 1), the whole image squashed to the model's size
        crop_pct=1.0,
        crop_mode='squash',
        paper_ids='arXiv:2502.14786' if v2 else 'arXiv:2303.15343',
        paper_name='SigLIP 2: Multilingual Vision-Language Encoders with Improved Semantic Understanding, '
                   'Localization, and Dense Features' if v2 else 'Sigmoid Loss for Language Image Pre-Training',
        origin_url='https://github.com/google-research/big_vision',
        notes=(f'big_vision {"SigLIP 2" if v2 else "SigLIP"} image tower ({_FILES[(name, tag)]}); the text tower is '
               'not loaded',),
    )


def _siglip2(p: Any) -> bool:
    return p.model_type in SIGLIP_MODEL_TYPES and str(p.model_type).startswith('siglip2')


FAMILY = Family(
    'siglip',
    rows=_ROWS,
    cfgs={f'{name}.{tag}': _cfg(name, tag) for name, tag in _FILES},
    # transformers' folders by model_type, SigLIP 2's (its NaFlex embedding) first
    routes=(Route(1200., _siglip2, HFSiglip2Checkpoint),
            Route(1300., lambda p: p.model_type in SIGLIP_MODEL_TYPES, HFSiglipCheckpoint)),
)
