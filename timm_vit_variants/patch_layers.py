"""The layers a patch embedding is built from, one per option of ``SimpleViTConfig.patch_embed`` / ``patch_norm``.

Every projection maps an NCHW image whose sides are patch multiples to an NCHW token grid of
exactly (H / P, W / P) cells, so the patch embedding around them is the same for all of them.
"""
import math
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.layers import ConvNormAct, LayerNorm2d

from .errors import ViTVariantsError

__all__ = ['PATCH_KINDS', 'PATCH_NORMS', 'PatchKind', 'UnfoldLinear', 'PatchPixelNorm', 'conv_stem', 'overlap_conv',
           'patch_projection']


class UnfoldLinear(nn.Conv2d):
    """Unfold + Linear: the 'conv' patchifier computed as a matmul over unfolded patches.

    It is an ``nn.Conv2d`` for its parameters only (``weight`` (D, C, P, P), ``bias`` (D)), so its
    state dict, initialisation and timm's input-channel adaptation are those of 'conv', and the two
    are interchangeable weight for weight; only ``forward`` differs.
    """

    def __init__(
            self,
            in_chans: int,
            embed_dim: int,
            patch_size: Tuple[int, int],
            bias: bool = True,
            device=None,
            dtype=None,
    ) -> None:
        super().__init__(in_chans, embed_dim, patch_size, stride=patch_size, bias=bias, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, _, height, width = x.shape
        patch_h, patch_w = self.kernel_size[0], self.kernel_size[1]
        cols = F.unfold(x, kernel_size=(patch_h, patch_w), stride=(patch_h, patch_w))  # (B, C*Ph*Pw, L), OIHW order
        tokens = F.linear(cols.transpose(1, 2), self.weight.reshape(self.out_channels, -1), self.bias)
        # (B, L, D) -> an NCHW view of it, so the caller's permute to NHWC is free
        return tokens.transpose(1, 2).reshape(batch, self.out_channels, height // patch_h, width // patch_w)


class PatchPixelNorm(nn.Module):
    """LayerNorm over each patch's flattened C*Ph*Pw pixels, applied in place in the image (Dual PatchNorm's pre-norm).

    Kumar et al. 2023, *Dual PatchNorm* (arXiv:2302.01327). The statistics and the affine weights
    follow the channel-major (C, Ph, Pw) order in which the patch projection flattens a patch, so
    this equals ``nn.LayerNorm(C*Ph*Pw)`` on unfolded patches; working in image layout avoids the
    unfold for the convolutional projections. Sides must be patch multiples.
    """

    def __init__(
            self,
            in_chans: int,
            patch_size: Tuple[int, int],
            eps: float = 1e-6,
            device=None,
            dtype=None,
    ) -> None:
        super().__init__()
        self.in_chans = in_chans
        self.patch_size = tuple(patch_size)
        self.eps = eps
        size = in_chans * self.patch_size[0] * self.patch_size[1]
        self.weight = nn.Parameter(torch.ones(size, device=device, dtype=dtype))
        self.bias = nn.Parameter(torch.zeros(size, device=device, dtype=dtype))

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)
        nn.init.zeros_(self.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, chans, height, width = x.shape
        patch_h, patch_w = self.patch_size[0], self.patch_size[1]
        cells = x.float().reshape(batch, chans, height // patch_h, patch_h, width // patch_w, patch_w)
        var, mean = torch.var_mean(cells, dim=[1, 3, 5], unbiased=False, keepdim=True)
        cells = (cells - mean) * torch.rsqrt(var + self.eps)
        weight = self.weight.float().reshape(1, chans, 1, patch_h, 1, patch_w)
        bias = self.bias.float().reshape(1, chans, 1, patch_h, 1, patch_w)
        return (cells * weight + bias).reshape(batch, chans, height, width).to(x.dtype)


def conv_stem(
        in_chans: int,
        embed_dim: int,
        patch: int,
        eps: float = 1e-6,
        device=None,
        dtype=None,
) -> nn.Sequential:
    """Xiao et al. 2021, *Early Convolutions Help Transformers See Better* (arXiv:2106.14881): the conv stem.

    log2(patch) 3x3 stride-2 convs, each followed by a norm and ReLU, widths doubling up to
    ``embed_dim`` (ViT_C-1GF: 24, 48, 96, 192 for width 192, patch 16); the caller adds the 1x1
    projection. The norm is a channel LayerNorm rather than the paper's BatchNorm, so the stem does
    not depend on the batch (it trains at batch 1) and every tensor it saves is a float weight.
    """
    if patch < 2 or patch & (patch - 1):
        raise ViTVariantsError(f'a conv stem needs a power-of-2 patch size >= 2, got {patch}', key='patch_size')
    steps = int(math.log2(patch))
    layers = []
    chans = in_chans
    for i in range(steps):
        width = max(1, embed_dim >> (steps - 1 - i))
        layers.append(ConvNormAct(
            chans, width, kernel_size=3, stride=2, norm_layer=LayerNorm2d, act_layer=nn.ReLU,
            norm_kwargs=dict(eps=eps), device=device, dtype=dtype))
        chans = width
    return nn.Sequential(*layers)


def overlap_conv(
        in_chans: int,
        embed_dim: int,
        patch_size: Tuple[int, int],
        bias: bool = True,
        device=None,
        dtype=None,
) -> nn.Conv2d:
    """A stride-P conv whose kernel reaches ceil(P / 4) pixels into each neighbouring patch.

    Kernel P + 2r with zero padding r on every side: on an image whose sides are patch multiples the
    grid is exactly that of the non-overlapping patchifier, and each token stays centred on its patch.
    """
    margin = tuple(-(-p // 4) for p in patch_size)
    kernel = tuple(p + 2 * m for p, m in zip(patch_size, margin))
    return nn.Conv2d(in_chans, embed_dim, kernel, stride=tuple(patch_size), padding=margin, bias=bias,
                     device=device, dtype=dtype)


def _conv(in_chans: int, embed_dim: int, patch_size: Tuple[int, int], bias: bool = True, device=None,
          dtype=None) -> nn.Conv2d:
    """One PxP stride-P conv (ViT's patchifier)."""
    return nn.Conv2d(in_chans, embed_dim, patch_size, stride=patch_size, bias=bias, device=device, dtype=dtype)


def _pointwise(in_chans: int, embed_dim: int, patch_size: Tuple[int, int], bias: bool = True, device=None,
               dtype=None) -> nn.Conv2d:
    """The 1x1 projection of a conv stem's output."""
    return nn.Conv2d(in_chans, embed_dim, 1, bias=bias, device=device, dtype=dtype)


@dataclass(frozen=True)
class PatchKind:
    """A ``patch_embed`` kind: its projection ``proj`` (in_chans, embed_dim, patch, bias, device, dtype), whether a
    conv stem comes before it (``stem``), and whether an activation and a second projection ``fc`` follow (``mlp``)."""
    projection: Callable[..., nn.Conv2d]
    stem: bool = False
    mlp: bool = False


PATCH_KINDS: Dict[str, PatchKind] = {
    'conv': PatchKind(_conv), 'linear': PatchKind(UnfoldLinear), 'conv_stem': PatchKind(_pointwise, stem=True),
    'overlap': PatchKind(overlap_conv), 'mlp': PatchKind(_conv, mlp=True),
}
# Where each ``patch_norm`` normalises: (each patch's pixels before the projection, the embedding after it).
PATCH_NORMS: Dict[Optional[str], Tuple[bool, bool]] = {
    None: (False, False), 'pre': (True, False), 'post': (False, True), 'dual': (True, True)}


def patch_projection(
        kind: str,
        in_chans: int,
        embed_dim: int,
        patch_size: Tuple[int, int],
        bias: bool = True,
        device=None,
        dtype=None,
) -> nn.Conv2d:
    """The pixel-to-token projection ``proj`` of a patch embedding ('conv_stem' projects the stem's output, 1x1)."""
    return PATCH_KINDS[kind].projection(in_chans, embed_dim, tuple(patch_size), bias, device=device, dtype=dtype)
