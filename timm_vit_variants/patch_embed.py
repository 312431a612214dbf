"""Patch embedding that accepts any input size and can change its patch size (FlexiViT PI-resize)."""
from typing import List, Optional, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.layers import to_2tuple

from .errors import ViTVariantsError
from .geometry import grid_for, is_capturing, pi_resize

__all__ = ['AdaptivePatchEmbed']


@torch.jit.ignore
def _raise_indivisible(height: int, width: int, patch_h: int, patch_w: int) -> None:
    raise ViTVariantsError(
        f'image size {height}x{width} is not divisible by patch size {patch_h}x{patch_w}; '
        f'resize the input or create the model with dynamic_img_pad=True to pad right/bottom')


@torch.jit.ignore
def _raise_bad_input(shape: List[int], in_chans: int) -> None:
    raise ViTVariantsError(f'expected an input of shape (B, {in_chans}, H, W) with H, W >= 1, got {tuple(shape)}')


@torch.fx.wrap
def check_and_pad(x: torch.Tensor, in_chans: int, patch_h: int, patch_w: int, pad: bool) -> torch.Tensor:
    """Validate an NCHW batch and pad it right/bottom to a patch multiple (or raise if padding is off).

    While a graph is captured the pad is always recorded (a zero pad is a no-op), so the graph pads
    whatever size it is given; ``torch.jit.trace`` would only freeze the checks, so it skips them.
    """
    tracing, capturing = False, False
    if not torch.jit.is_scripting():
        tracing, capturing = torch.jit.is_tracing(), is_capturing()
    if not tracing and (x.ndim != 4 or x.shape[1] != in_chans or x.shape[2] < 1 or x.shape[3] < 1):
        _raise_bad_input(list(x.shape), in_chans)
    height, width = x.shape[-2], x.shape[-1]
    # ceil division: torch.export can then prove a symbolic padded size is at least one patch
    pad_h = (height + patch_h - 1) // patch_h * patch_h - height
    pad_w = (width + patch_w - 1) // patch_w * patch_w - width
    if capturing and pad:
        return F.pad(x, (0, pad_w, 0, pad_h))
    if pad_h > 0 or pad_w > 0:
        if not pad:
            _raise_indivisible(height, width, patch_h, patch_w)
        x = F.pad(x, (0, pad_w, 0, pad_h))
    return x


class AdaptivePatchEmbed(nn.Module):
    """Conv2d patchifier returning NHWC tokens for whatever H x W it is given.

    Differs from timm's PatchEmbed in two ways that matter here: a patch-size change
    resamples with big_vision's FlexiViT rule (bilinear, no antialias), and bad sizes
    raise the package's error type.
    """

    def __init__(
            self,
            img_size: Union[int, Tuple[int, int]] = 224,
            patch_size: Union[int, Tuple[int, int]] = 16,
            in_chans: int = 3,
            embed_dim: int = 768,
            bias: bool = True,
            dynamic_img_pad: bool = True,
            device=None,
            dtype=None,
    ) -> None:
        super().__init__()
        self.img_size = to_2tuple(img_size)
        self.patch_size = to_2tuple(patch_size)
        self.in_chans = in_chans
        self.embed_dim = embed_dim
        self.dynamic_img_pad = dynamic_img_pad
        self.grid_size = grid_for(self.img_size, self.patch_size, dynamic_img_pad)
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.proj = nn.Conv2d(
            in_chans, embed_dim, kernel_size=self.patch_size, stride=self.patch_size, bias=bias,
            device=device, dtype=dtype)

    def feat_size(self, img_size: Tuple[int, int]) -> Tuple[int, int]:
        return grid_for(img_size, self.patch_size, self.dynamic_img_pad)

    def set_input_size(
            self,
            img_size: Optional[Union[int, Tuple[int, int]]] = None,
            patch_size: Optional[Union[int, Tuple[int, int]]] = None,
    ) -> None:
        """Change the nominal image size and/or the patch size; the kernel is PI-resized in place."""
        if patch_size is not None:
            new_patch = to_2tuple(patch_size)
            if new_patch != self.patch_size:
                with torch.no_grad():
                    new_proj = nn.Conv2d(
                        self.in_chans, self.embed_dim, kernel_size=new_patch, stride=new_patch,
                        bias=self.proj.bias is not None, device=self.proj.weight.device, dtype=self.proj.weight.dtype)
                    new_proj.weight.copy_(pi_resize(self.proj.weight, new_patch))
                    if self.proj.bias is not None:
                        new_proj.bias.copy_(self.proj.bias)
                new_proj.requires_grad_(self.proj.weight.requires_grad)
                self.proj = new_proj
                self.patch_size = new_patch
        if img_size is not None:
            self.img_size = to_2tuple(img_size)
        self.grid_size = grid_for(self.img_size, self.patch_size, self.dynamic_img_pad)
        self.num_patches = self.grid_size[0] * self.grid_size[1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = check_and_pad(x, self.in_chans, self.patch_size[0], self.patch_size[1], self.dynamic_img_pad)
        return self.proj(x).permute(0, 2, 3, 1)
