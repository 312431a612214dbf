"""AIMv2's config parts (torch-free): its attention-pool head (``Aimv2Pool``, kind 'aimv2'), its native towers'
sin-cos (``Aimv2SinCos``, scheme 'aimv2_sincos'), and ``aimv2_parts``, what every AIMv2 tower is as config parts.
Their modules are in ``aimv2_layers.py``."""
from dataclasses import dataclass
from typing import Any, ClassVar, Dict

from ..parts import BlockPart, HeadPart, Learned, PatchPart, PoolPart, PositionScheme, TokensPart
from .aimv2_layouts import AIMV2_NORM_EPS

__all__ = ['Aimv2Pool', 'Aimv2SinCos', 'aimv2_parts']


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
