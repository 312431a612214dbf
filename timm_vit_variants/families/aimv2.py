"""The AIMv2 family (Apple, arXiv:2411.14402): its parts, rows, tags and routes.

Facts and the three source layouts: ``aimv2_layouts.py``; its own layers (the native towers' sin-cos, the
attention-pool head): ``aimv2_layers.py``; its reader: ``aimv2_reader.py``. The published towers (Apple's Hub repos
``apple/aimv2-*``): L/H/1B/3B at 224, 336 and 448 px (a learned table, no head; L also distilled at 224 and 336),
L native (AIMv2's computed sin-cos, any grid) and the image tower of the L LiT model (the attention-pool head).
"""
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, Tuple

from ..parts import BlockPart, HeadPart, Learned, PatchPart, PoolPart, PositionScheme, TokensPart
from .aimv2_layouts import AIMV2_NORM_EPS

__all__ = ['Aimv2Pool', 'Aimv2SinCos', 'AIMV2_ROWS', 'AIMV2_CFGS', 'aimv2_parts']


@dataclass(frozen=True)
class Aimv2Pool(PoolPart, kind='aimv2'):
    """AIMv2's attention-pool head (Apple's ``AttentionPoolingClassifier``, no batch norm): ``queries`` learned
    queries over k/v projections of every token with the trunk's heads, averaged, then a D -> D map."""
    queries: int = 1

    def __post_init__(self) -> None:
        self._check('queries', lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0,
                    'expected a positive integer')


@dataclass(frozen=True)
class Aimv2SinCos(PositionScheme, scheme='aimv2_sincos'):
    """The native towers' computed 2D sin-cos (MAE's frequencies ``T ** -(k / q)``; ``aimv2_layers.aimv2_sincos``),
    recomputed for every grid and never saved."""
    temperature: float = 10000.
    slot: ClassVar[str] = 'abs_pos'
    width_multiple: ClassVar[int] = 4

    def __post_init__(self) -> None:
        self._check('temperature', lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0,
                    'expected a positive number')


def aimv2_parts(mlp_dim: int, native: bool = False, pool: bool = False) -> Dict[str, Any]:
    """What every AIMv2 tower is, as config parts: a conv patch embedding with a bias and an RMSNorm after it; no
    prefix tokens; a learned table without a cls slot resized as timm does (or, ``native``, AIMv2's sin-cos);
    RMSNorm (eps 1e-5) blocks without q/k/v, projection or MLP biases, a SwiGLU of gated width ``mlp_dim``; the
    final norm on every token, then the mean of the tokens (or, ``pool``, the attention-pool head)."""
    return dict(
        patch=PatchPart(kind='conv', norm='post', bias=True),
        tokens=TokensPart(),
        positions=(Aimv2SinCos() if native else Learned(cls_slot=False, resample='timm'),),
        block=BlockPart(norm='rmsnorm', norm_eps=AIMV2_NORM_EPS, act='silu', mlp='swiglu', mlp_dim=mlp_dim,
                        mlp_bias=False, qkv_bias=False, proj_bias=False),
        head=HeadPart(pool=Aimv2Pool() if pool else PoolPart.parse('avg')),
    )


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
