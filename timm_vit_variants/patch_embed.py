"""Patch embedding that accepts any input size and can change its patch size (FlexiViT PI-resize)."""
from functools import partial
from typing import Callable, List, Optional, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.layers import LayerNorm, to_2tuple

from .errors import ViTVariantsError
from .geometry import fixed_patch_reason, grid_for, is_capturing, pi_resize
from .patch_layers import PATCH_KINDS, PATCH_NORMS, PatchPixelNorm, conv_stem, patch_projection

__all__ = ['AdaptivePatchEmbed']


@torch.jit.ignore
def _raise_indivisible(height: int, width: int, patch_h: int, patch_w: int) -> None:
    raise ViTVariantsError(
        f'image size {height}x{width} is not divisible by patch size {patch_h}x{patch_w}; '
        f"resize the input, or create the model with grid_mode='pad' (pad right/bottom), 'crop' or 'pool'")


@torch.jit.ignore
def _raise_too_small(height: int, width: int, patch_h: int, patch_w: int) -> None:
    raise ViTVariantsError(f'image size {height}x{width} is smaller than one {patch_h}x{patch_w} patch, so cropping '
                           'to whole patches leaves nothing')


@torch.jit.ignore
def _raise_bad_input(shape: List[int], in_chans: int) -> None:
    raise ViTVariantsError(f'expected an input of shape (B, {in_chans}, H, W) with H, W >= 1, got {tuple(shape)}')


@torch.jit.ignore
def _raise_not_float(dtype: torch.dtype) -> None:
    raise ViTVariantsError(f'images must be floating point (normalised), got {dtype}')


@torch.fx.wrap
def check_and_pad(x: torch.Tensor, in_chans: int, patch_h: int, patch_w: int, mode: str) -> torch.Tensor:
    """Validate an NCHW batch and bring it to whole patches as ``mode`` says (``SimpleViTConfig.grid_mode``).

    'pad' and 'pool' pad right/bottom, 'crop' drops the last rows and columns (a VALID conv), 'strict'
    raises. While a graph is captured the pad or crop is always recorded (a zero pad or a full slice is
    a no-op), so the graph fits whatever size it is given; ``torch.jit.trace`` would only freeze the
    checks, so it skips them.
    """
    tracing, capturing = False, False
    if not torch.jit.is_scripting():
        tracing, capturing = torch.jit.is_tracing(), is_capturing()
    if not tracing and (x.ndim != 4 or x.shape[1] != in_chans or x.shape[2] < 1 or x.shape[3] < 1):
        _raise_bad_input(list(x.shape), in_chans)
    if not tracing and not x.is_floating_point():
        _raise_not_float(x.dtype)
    height, width = x.shape[-2], x.shape[-1]
    if mode == 'crop':
        if not tracing and (height < patch_h or width < patch_w):
            _raise_too_small(height, width, patch_h, patch_w)
        if capturing or height % patch_h or width % patch_w:  # a negative pad crops; torch.export can reason on it
            x = F.pad(x, (0, width // patch_w * patch_w - width, 0, height // patch_h * patch_h - height))
        return x
    # ceil division: torch.export can then prove a symbolic padded size is at least one patch
    pad_h = (height + patch_h - 1) // patch_h * patch_h - height
    pad_w = (width + patch_w - 1) // patch_w * patch_w - width
    pad = mode != 'strict'
    if capturing and pad:
        return F.pad(x, (0, pad_w, 0, pad_h))
    if pad_h > 0 or pad_w > 0:
        if not pad:
            _raise_indivisible(height, width, patch_h, patch_w)
        x = F.pad(x, (0, pad_w, 0, pad_h))
    return x


class AdaptivePatchEmbed(nn.Module):
    """Patchifier returning NHWC tokens for whatever H x W it is given.

    Pad, crop (or refuse) to a patch multiple, then: optional per-patch pixel LayerNorm ('pre'), optional
    conv stem, the projection ``proj`` ('conv', 'linear', 'overlap', or the stem's 1x1), for 'mlp' an
    activation and a second (1x1) projection ``fc``, optional adaptive pooling to the nominal grid,
    optional LayerNorm of the embedding ('post'). Differs from timm's PatchEmbed in that a
    patch-size change resamples with big_vision's FlexiViT rule (bilinear, no antialias) where that
    is defined, and bad sizes raise the package's error type.
    """

    def __init__(
            self,
            img_size: Union[int, Tuple[int, int]] = 224,
            patch_size: Union[int, Tuple[int, int]] = 16,
            in_chans: int = 3,
            embed_dim: int = 768,
            bias: bool = True,
            grid_mode: str = 'pad',
            kind: str = 'conv',
            norm: Optional[str] = None,
            norm_eps: float = 1e-6,
            act_layer: Callable[[], nn.Module] = nn.GELU,
            norm_layer: Optional[Callable[..., nn.Module]] = None,
            device=None,
            dtype=None,
    ) -> None:
        """
        Args:
            grid_mode: ``SimpleViTConfig.grid_mode``: pad, refuse ('strict') or crop a size the patch does not
                divide; 'pool' pads, then pools every token grid to the nominal one.
            kind: ``SimpleViTConfig.patch_embed``; norm: ``SimpleViTConfig.patch_norm``.
            act_layer: The activation between the two projections of 'mlp'.
            norm_layer: The embedding's norm ('post', 'dual'): the model's norm layer; timm's ``LayerNorm`` of
                ``norm_eps`` when None. The pixel norm ('pre') and the stem's norms are LayerNorms of ``norm_eps``.
        """
        super().__init__()
        dd = dict(device=device, dtype=dtype)
        self.img_size = to_2tuple(img_size)
        self.patch_size = to_2tuple(patch_size)
        self.in_chans = in_chans
        self.embed_dim = embed_dim
        self.grid_mode = grid_mode
        self.dynamic_img_pad = grid_mode in ('pad', 'pool')  # timm's name: whether sizes are padded up
        self.kind = kind
        self.norm_kind = norm
        self.pool_grid = grid_mode == 'pool'
        self.grid_size = grid_for(self.img_size, self.patch_size, self.dynamic_img_pad)
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        layout, (pixel_norm, embed_norm) = PATCH_KINDS[kind], PATCH_NORMS[norm]
        self.norm_pre = PatchPixelNorm(in_chans, self.patch_size, norm_eps, **dd) if pixel_norm else nn.Identity()
        self.stem = conv_stem(in_chans, embed_dim, self.patch_size[0], norm_eps, **dd) if layout.stem \
            else nn.Identity()
        stem_chans = self.stem[-1].out_channels if layout.stem else in_chans
        self.proj = patch_projection(kind, stem_chans, embed_dim, self.patch_size, bias, **dd)
        self.act = act_layer() if layout.mlp else nn.Identity()
        self.fc = nn.Linear(embed_dim, embed_dim, **dd) if layout.mlp else nn.Identity()
        norm_layer = norm_layer or partial(LayerNorm, eps=norm_eps)
        self.norm = norm_layer(embed_dim, **dd) if embed_norm else nn.Identity()

    def set_input_size(
            self,
            img_size: Optional[Union[int, Tuple[int, int]]] = None,
            patch_size: Optional[Union[int, Tuple[int, int]]] = None,
    ) -> None:
        """Change the nominal image size and/or the patch size; the projection kernel is PI-resized in place."""
        if patch_size is not None:
            new_patch = to_2tuple(patch_size)
            if new_patch != self.patch_size:
                why = fixed_patch_reason(self.kind, self.norm_kind)
                if why:
                    raise ViTVariantsError(f'cannot change the patch size of a {self.kind!r} patch embedding '
                                           f'(patch norm {self.norm_kind!r}): {why}')
                old = self.proj
                with torch.no_grad():
                    new_proj = patch_projection(self.kind, self.in_chans, self.embed_dim, new_patch,
                                                old.bias is not None, device=old.weight.device, dtype=old.weight.dtype)
                    new_proj.weight.copy_(pi_resize(old.weight, new_patch))
                    if old.bias is not None:
                        new_proj.bias.copy_(old.bias)
                new_proj.requires_grad_(old.weight.requires_grad)
                self.proj = new_proj
                self.patch_size = new_patch
        if img_size is not None:
            self.img_size = to_2tuple(img_size)
        self.grid_size = grid_for(self.img_size, self.patch_size, self.dynamic_img_pad)
        self.num_patches = self.grid_size[0] * self.grid_size[1]

    def embed_patches(self, patches: torch.Tensor, channels_last: bool = False) -> torch.Tensor:
        """(T, D) tokens of T flattened patches (T, C*Ph*Pw), each seen alone: the NaFlex path, one matmul for all.

        ``channels_last`` says the patches are flattened P-P-C (timm's NaFlex loader, big_vision) rather
        than C-P-P; the weights are permuted to match, never the (larger) patches. Only for embeddings
        that see one patch at a time ('conv', 'linear', 'mlp').
        """
        (ph, pw), chans = self.patch_size, self.in_chans
        weight = self.proj.weight
        pre = self.norm_pre if isinstance(self.norm_pre, PatchPixelNorm) else None
        norm_w, norm_b = (pre.weight, pre.bias) if pre is not None else (None, None)
        if channels_last:
            weight = weight.permute(0, 2, 3, 1)
            if pre is not None:
                norm_w = norm_w.view(chans, ph, pw).permute(1, 2, 0).reshape(-1)
                norm_b = norm_b.view(chans, ph, pw).permute(1, 2, 0).reshape(-1)
        if pre is not None:
            patches = F.layer_norm(patches, (patches.shape[-1],), norm_w, norm_b, pre.eps)
        x = F.linear(patches, weight.reshape(weight.shape[0], -1), self.proj.bias)
        return self.norm(self.fc(self.act(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = check_and_pad(x, self.in_chans, self.patch_size[0], self.patch_size[1], self.grid_mode)
        x = self.proj(self.stem(self.norm_pre(x))).permute(0, 2, 3, 1)
        x = self.fc(self.act(x))
        if self.pool_grid:
            x = pool_to_grid(x, self.grid_size)
        return self.norm(x)


def pool_to_grid(tokens: torch.Tensor, grid: Tuple[int, int]) -> torch.Tensor:
    """Adaptive average pooling of an NHWC token grid to ``grid`` cells (upsampling by repetition when smaller)."""
    return F.adaptive_avg_pool2d(tokens.permute(0, 3, 1, 2), [grid[0], grid[1]]).permute(0, 2, 3, 1)
