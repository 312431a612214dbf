"""The AIMv2 family (Apple, arXiv:2411.14402): its parts, rows, tags and routes.

Facts and the three source layouts: ``aimv2_layouts.py``; its config parts: ``aimv2_parts.py``; their modules (the
native towers' sin-cos, the attention-pool head): ``aimv2_layers.py``; its reader: ``aimv2_reader.py``. The
published towers (Apple's Hub repos ``apple/aimv2-*``): L/H/1B/3B at 224, 336 and 448 px (a learned table, no head;
L also distilled at 224 and 336), L native (AIMv2's computed sin-cos, any grid) and the image tower of the L LiT
model (the attention-pool head).
"""
from typing import Any, Dict, Tuple

from ..checkpoints.routes import Probe, Route
from ..model_table import ModelEntry
from . import aimv2_layers  # noqa: F401  (registers the 'aimv2' pool module and the 'aimv2_sincos' scheme module)
from .aimv2_parts import Aimv2Pool, Aimv2SinCos, aimv2_parts
from .aimv2_reader import Aimv2Checkpoint, is_aimv2
from .registry import Family

__all__ = ['Aimv2Pool', 'Aimv2SinCos', 'AIMV2_ROWS', 'AIMV2_CFGS', 'AIMV2_MODEL_TYPES', 'aimv2_parts', 'FAMILY']


# size -> (Apple's name, width, depth, heads, SwiGLU width): aim.v2.torch.models.aimv2_{large,huge,1B,3B}
_SIZES: Dict[str, Tuple[str, int, int, int, int]] = {
    'large': ('large', 1024, 24, 8, 2816), 'huge': ('huge', 1536, 24, 12, 4096),
    '1b': ('1B', 2048, 24, 16, 5632), '3b': ('3B', 3072, 24, 24, 8192),
}
_IMG = (224, 336, 448)
_NATIVE_IMG = 224  # the native tower takes any grid; 224 px is its nominal size (Apple's PatchEmbed default)


def _args(size: str, img: int, native: bool = False, pool: bool = False) -> Dict[str, Any]:
    _, dim, depth, heads, mlp = _SIZES[size]
    return dict(img_size=img, patch_size=14, embed_dim=dim, depth=depth, num_heads=heads, num_classes=0,
                **aimv2_parts(mlp, native=native, pool=pool))


def _name(size: str, what: Any) -> str:
    return f'simple_vit_{size}_patch14_aimv2_{what}'


_DOC = 'AIMv2 {label}/14 (apple/ml-aim): RMSNorm, SwiGLU, no biases, no [CLS]'
# name -> (variant, arguments, description): the family's rows (sizes given in full, so no variant default counts).
AIMV2_ROWS: Dict[str, Tuple[str, Dict[str, Any], str]] = {
    **{_name(size, img): ('large', _args(size, img), _DOC.format(label=label) +
                          f', a learned {img // 14}x{img // 14} table, mean pooling, no classifier.')
       for size, (label, *_rest) in _SIZES.items() for img in _IMG},
    _name('large', 'native'): ('large', _args('large', _NATIVE_IMG, native=True),
                               _DOC.format(label='large') + ", AIMv2's sin-cos at every grid, mean pooling."),
    _name('large', 'lit_224'): ('large', _args('large', 224, pool=True),
                                _DOC.format(label='large') + ', the LiT image tower: its attention-pool head.'),
}

_PAPER = ('arXiv:2411.14402', 'Multimodal Autoregressive Pre-training of Large Vision Encoders')
_ORIGIN = 'https://github.com/apple/ml-aim'
_MEAN, _STD = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)  # OpenAI CLIP's


def _cfg(repo: str, img: int) -> Dict[str, Any]:
    return dict(url='', hf_hub_id=f'apple/{repo}', hf_hub_filename='model.safetensors', custom_load='hf',
                num_classes=0, input_size=(3, img, img), pool_size=None, crop_pct=1.0, interpolation='bicubic',
                fixed_input_size=False, first_conv='patch_embed.proj', classifier='head', mean=_MEAN, std=_STD,
                license='apple-ascl', origin_url=_ORIGIN, paper_ids=_PAPER[0], paper_name=_PAPER[1])


# 'name.tag' -> pretrained cfg: Apple's Hub repos (timm's tags for the same files: apple_pt, apple_pt_dist).
AIMV2_CFGS: Dict[str, Dict[str, Any]] = {
    **{f'{_name(size, img)}.apple_pt': _cfg(f'aimv2-{label}-patch14-{img}', img)
       for size, (label, *_rest) in _SIZES.items() for img in _IMG},
    **{f'{_name("large", img)}.apple_pt_dist': _cfg(f'aimv2-large-patch14-{img}-distilled', img) for img in (224, 336)},
    f'{_name("large", "native")}.apple_pt': _cfg('aimv2-large-patch14-native', _NATIVE_IMG),
    f'{_name("large", "lit_224")}.apple_pt': _cfg('aimv2-large-patch14-224-lit', 224),
}

# transformers' model types of an AIMv2 image tower: the vision model, and the two-tower model holding it.
AIMV2_MODEL_TYPES = ('aimv2_vision_model', 'aimv2')


def _timm_folder(probe: Probe) -> bool:
    """A timm folder of an ``aimv2_*`` entry (its ``architecture``)."""
    return str(probe.config.get('architecture', '')).startswith('aimv2_') and is_aimv2(probe.local)


def _bare(probe: Probe) -> bool:
    """A bare state dict in Apple's layout (a LiT file's tower included) or timm's ``aimv2_*`` one."""
    return 'model_type' not in probe.config and 'architecture' not in probe.config and is_aimv2(probe.local)


FAMILY = Family(
    name='aimv2',
    rows={name: ModelEntry(*row) for name, row in AIMV2_ROWS.items()},
    cfgs=AIMV2_CFGS,
    routes=(
        Route(1050., _timm_folder, Aimv2Checkpoint),  # before timm's folders (their architecture)
        Route(1950., lambda p: p.model_type in AIMV2_MODEL_TYPES, Aimv2Checkpoint),  # before other model types' refusal
        Route(3150., _bare, Aimv2Checkpoint),  # before timm's bare ViT and NaFlexVit state dicts
    ),
)
