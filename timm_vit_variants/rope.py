"""2D rotary position embeddings (RoPE) computed from each token's own image grid, and a block that applies them.

Four published forms, each a module called once per forward as ``rope(coords, grids)``, with ``coords`` the
(T, 2) (row, col) of every patch token and ``grids`` the (T, 2) (rows, cols) of that token's image. Each returns
timm's "cat" layout, (L, H, T, 2 * head_dim): ``[sin | cos]`` per token, L = depth for per-layer frequencies
(else 1) and H = heads for per-head frequencies (else 1). Because the angles depend only on a token's own
(row, col) and its own image's grid, the same tensors serve an NCHW batch, a list of images and packed NaFlex rows.

* ``DinoV3Rope`` (DINOv3 ``RopePositionEmbedding``, eval): coordinates normalised per side ('separate'),
  ``(i + 0.5) / n`` mapped to [-1, 1]; angles ``2 pi c / period`` laid out [rows | cols], tiled twice, for a
  half-split rotation (``rotate_half``). ``periods`` is a persistent buffer, loaded from the file: the published
  distilled models store bf16 values, and recomputing them in fp32 moves the outputs by ~1e-4. The train-time
  shift, jitter and rescale of the coordinates are not applied (they sit behind ``self.training`` there).
* ``AxialRope`` (RoPE-ViT ``compute_axial_cis``): integer coordinates, frequencies ``1 / theta^(4k / hd)``,
  the first hd/4 pairs rotated by the column, the next hd/4 by the row, on interleaved pairs.
* ``MixedRope`` (RoPE-ViT ``compute_mixed_cis``): learned per-layer, per-head frequencies ``freqs``
  (2, depth, heads, hd/2) in timm's layout (``rope.freqs`` of timm's ``RotaryEmbeddingMixed``); the angle is
  ``col * fx + row * fy``, on interleaved pairs.
* ``Eva02Rope`` (EVA-02 ``VisionRotaryEmbeddingFast``): each side's positions scaled to the pretraining grid
  (``rope_ref_grid``), the same frequencies as axial, [rows | cols], on interleaved pairs.

Prefix tokens ([CLS], registers) and padding are never rotated: their slots get the identity (sin 0, cos 1),
which leaves q and k exactly as they are.

Each form is a position scheme of the attention-input kind (``positions.py``): ``rotations`` gives the rotations of
the sequences in the one embedding step, ``prepare_rows`` lays them into packed NaFlex rows, ``layer`` hands each
block its own, and ``rotate_half`` says which pairs a block rotates.
"""
import math
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.nn as nn
from timm.layers import AttentionRope
from timm.models.vision_transformer import Block

from .config import ROPE_TYPES
from .scheme import SchemeModule

__all__ = ['ROPE_TYPES', 'ROPE_FORMS', 'DinoV3Rope', 'AxialRope', 'MixedRope', 'Eva02Rope', 'RopeBlock',
           'RotaryScheme', 'create_rope', 'dinov3_periods', 'identity_rotation', 'inverse_powers', 'rope_frequencies']


def inverse_powers(theta: float, exponents: torch.Tensor) -> torch.Tensor:
    """``1 / theta ** exponents``: the one form of every rotary and sin-cos frequency in the package."""
    return 1.0 / (theta ** exponents)


def rope_frequencies(dim: int, theta: float, device: Optional[torch.device] = None) -> torch.Tensor:
    """The dim / 2 float32 frequencies ``1 / theta ** (2k / dim)`` of a rotary embedding over ``dim`` channels
    (timm's and RoPE-ViT's bands; for 2D axial RoPE, dim = head_dim / 2 per axis)."""
    return inverse_powers(theta, torch.arange(0, dim, 2, device=device).float() / dim)


def dinov3_periods(quarter: int, theta: float, dtype: Optional[torch.dtype] = None,
                   device: Optional[torch.device] = None) -> torch.Tensor:
    """DINOv3's ``quarter`` (head_dim / 4) RoPE periods ``theta ** (2k / (head_dim / 2))``, computed in ``dtype``
    (DINOv3's ``_init_weights``; transformers and timm compute the same in float32)."""
    k = torch.arange(quarter, device=device, dtype=dtype)
    return theta ** (2 * k / (2 * quarter))



def _check_head_dim(head_dim: int) -> None:
    if head_dim % 4:
        raise ValueError(f'2D rotary positions need a head width divisible by 4, got {head_dim}')


def identity_rotation(like: torch.Tensor) -> torch.Tensor:
    """The (2R,) [sin | cos] of no rotation (sin 0, cos 1), for rotations ``like`` (..., 2R)."""
    half = like.shape[-1] // 2
    return torch.cat([like.new_zeros(half), like.new_ones(half)])


class RotaryScheme(SchemeModule):
    """What the rotary forms share as a position scheme: the sequences' rotations, laid out for the blocks."""
    rotate_half = False  # the blocks rotate interleaved pairs, or (DINOv3) the two halves

    def rotations(self, coords: torch.Tensor, grids: torch.Tensor, counts: List[int],
                  num_prefix_tokens: int) -> torch.Tensor:
        """(L, 1, H, sequence, 2R) rotations of the sequences (image after image; a batch-broadcast dim), the
        identity on each image's prefix tokens."""
        rope = self(coords, grids)
        if num_prefix_tokens:
            identity = identity_rotation(rope).expand(rope.shape[0], rope.shape[1], num_prefix_tokens, -1)
            images = [rope] if len(counts) == 1 else list(rope.split(counts, dim=2))
            pieces: List[torch.Tensor] = []
            for image in images:
                pieces.append(identity)
                pieces.append(image)
            rope = torch.cat(pieces, dim=2)
        return rope[:, None]

    @torch.jit.ignore
    def prepare_rows(self, chunk, patches, inputs: Dict[str, torch.Tensor], tensors: Dict[str, torch.Tensor],
                     sizes: Dict[str, List[int]]) -> None:
        """The sequences' rotations as the chunk's (L, rows, H, capacity, 2R); empty slots get the identity."""
        rope = inputs['rope'][:, 0]
        layers, heads, _, width = rope.shape
        flat = rope.permute(2, 0, 1, 3).reshape(rope.shape[2], -1)
        rows = chunk.scatter(flat, fill=identity_rotation(rope).repeat(layers * heads))
        tensors['rope'] = rows.view(chunk.rows, chunk.capacity, layers, heads, width).permute(2, 0, 3, 1, 4)

    def layer(self, index: int, tensors: Dict[str, torch.Tensor]) -> torch.Tensor:
        """Block ``index``'s rotations: its own (L = depth) or the shared ones (L = 1), with no branch to trace."""
        rope = tensors['rope']
        return rope[index % rope.shape[0]]


def _interleaved(angles: torch.Tensor) -> torch.Tensor:
    """[sin | cos] of angles (..., hd/2) for interleaved pairs: each angle twice, side by side."""
    angles = angles.repeat_interleave(2, dim=-1)
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


class DinoV3Rope(RotaryScheme):
    """DINOv3's RoPE at eval: base ``theta``, per-side normalised coordinates, half-split rotation."""
    rotate_half = True

    def __init__(self, head_dim: int, theta: float = 100., device=None, dtype=None) -> None:
        super().__init__()
        _check_head_dim(head_dim)
        self.head_dim, self.theta = head_dim, float(theta)
        # persistent, as DINOv3's: the stored values (bf16 in the published files) are loaded over these
        self.register_buffer('periods', torch.empty(head_dim // 4, device=device, dtype=dtype), persistent=True)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """DINOv3's ``_init_weights``: ``theta ** (2k / (hd/2))`` in the buffer's dtype."""
        if self.periods.device.type == 'meta':
            return
        with torch.no_grad():
            self.periods.copy_(dinov3_periods(self.head_dim // 4, self.theta, self.periods.dtype, self.periods.device))

    def forward(self, coords: torch.Tensor, grids: torch.Tensor) -> torch.Tensor:
        dtype = self.periods.dtype
        c = (coords.to(dtype) + 0.5) / grids.to(dtype)  # (T, 2): DINOv3's arange(0.5, n) / n per side
        c = 2.0 * c - 1.0
        angles = 2 * math.pi * c[:, :, None] / self.periods[None, None, :]  # (T, 2, hd/4), [rows | cols]
        angles = angles.flatten(1, 2).tile(2)  # (T, hd)
        return torch.cat([angles.sin(), angles.cos()], dim=-1)[None, None]


class AxialRope(RotaryScheme):
    """RoPE-ViT's axial RoPE: integer coordinates, fixed frequencies, interleaved pairs (no tensors stored)."""

    def __init__(self, head_dim: int, theta: float = 100.) -> None:
        super().__init__()
        _check_head_dim(head_dim)
        self.head_dim, self.theta = head_dim, float(theta)

    def forward(self, coords: torch.Tensor, grids: torch.Tensor) -> torch.Tensor:
        hd = self.head_dim
        freqs = rope_frequencies(hd // 2, self.theta, coords.device)
        t = coords.float()
        angles = torch.cat([t[:, 1, None] * freqs, t[:, 0, None] * freqs], dim=-1)  # (T, hd/2): [cols | rows]
        return _interleaved(angles)[None, None]


class MixedRope(RotaryScheme):
    """RoPE-ViT's mixed RoPE: learned frequencies per layer and head, ``freqs`` (2, depth, heads, hd/2)."""

    def __init__(self, head_dim: int, depth: int, num_heads: int, theta: float = 10., device=None,
                 dtype=None) -> None:
        super().__init__()
        _check_head_dim(head_dim)
        self.head_dim, self.depth, self.num_heads, self.theta = head_dim, depth, num_heads, float(theta)
        self.freqs = nn.Parameter(torch.empty(2, depth, num_heads, head_dim // 2, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """RoPE-ViT's ``init_random_2d_freqs``: magnitudes ``1 / theta^(4k / hd)``, each head at a random angle."""
        if self.freqs.device.type == 'meta':
            return
        mag = rope_frequencies(self.head_dim // 2, self.theta)
        angles = torch.rand(self.depth, self.num_heads, 1) * 2 * torch.pi
        fx = torch.cat([mag * torch.cos(angles), mag * torch.cos(torch.pi / 2 + angles)], dim=-1)
        fy = torch.cat([mag * torch.sin(angles), mag * torch.sin(torch.pi / 2 + angles)], dim=-1)
        with torch.no_grad():
            self.freqs.copy_(torch.stack([fx, fy]))

    @torch.jit.ignore
    def keep_layers(self, depth: int) -> None:
        """Keep the first ``depth`` layers' frequencies (``prune_intermediate_layers``)."""
        self.depth = depth
        self.freqs = nn.Parameter(self.freqs.detach()[:, :depth].clone(), requires_grad=self.freqs.requires_grad)

    def forward(self, coords: torch.Tensor, grids: torch.Tensor) -> torch.Tensor:
        t = coords.to(self.freqs.dtype)
        fx, fy = self.freqs[0][:, :, None, :], self.freqs[1][:, :, None, :]  # (depth, heads, 1, hd/2)
        angles = t[None, None, :, 1, None] * fx + t[None, None, :, 0, None] * fy  # (depth, heads, T, hd/2)
        return _interleaved(angles)


def create_rope(kind: str, head_dim: int, depth: int, num_heads: int, theta: float, device=None,
                dtype=None, ref_grid: Optional[int] = None) -> nn.Module:
    """The rotary-position module of a ``rope_type`` (``ROPE_TYPES``), built by its row of ``ROPE_FORMS``."""
    if kind not in ROPE_FORMS:
        raise ValueError(f'unknown rope_type {kind!r}; expected one of {ROPE_TYPES}')
    return ROPE_FORMS[kind](head_dim, depth, num_heads, theta, ref_grid, {'device': device, 'dtype': dtype})


class RopeBlock(Block):
    """timm's pre-norm ``Block`` (same state-dict names) whose attention is timm's ``AttentionRope``.

    ``AttentionRope`` is built with no prefix tokens: the model hands it a rope tensor covering every slot
    of the sequence, identity on prefix and padding slots, so one code path serves NCHW and packed rows.
    """

    def __init__(self, dim: int, num_heads: int, *, rotate_half: bool, qkv_bias: bool = True,
                 qk_norm: bool = False, scale_attn_norm: bool = False, proj_bias: bool = True, attn_drop: float = 0.,
                 proj_drop: float = 0., norm_layer=None, device=None, dtype=None, **kwargs) -> None:
        super().__init__(dim, num_heads, qkv_bias=qkv_bias, qk_norm=qk_norm, scale_attn_norm=scale_attn_norm,
                         proj_bias=proj_bias, attn_drop=attn_drop, proj_drop=proj_drop, norm_layer=norm_layer,
                         device=device, dtype=dtype, **kwargs)
        # Block's own attention has no rope argument; AttentionRope has the same qkv/proj (and q/k norm) names.
        self.attn = AttentionRope(dim, num_heads=num_heads, qkv_bias=qkv_bias, num_prefix_tokens=0,
                                  attn_drop=attn_drop, proj_drop=proj_drop, norm_layer=norm_layer, qk_norm=qk_norm,
                                  scale_norm=scale_attn_norm, proj_bias=proj_bias, rotate_half=rotate_half,
                                  device=device, dtype=dtype)

    def forward(self, x: torch.Tensor, attn_mask: Optional[torch.Tensor] = None,
                rope: Optional[torch.Tensor] = None, grid: Optional[List[int]] = None) -> torch.Tensor:
        """``grid``, the loop's token grid, is not needed: every token attends to every other."""
        x = x + self.drop_path1(self.ls1(self.attn(self.norm1(x), rope=rope, attn_mask=attn_mask)))
        x = x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))
        return x


class Eva02Rope(RotaryScheme):
    """EVA-02's ``VisionRotaryEmbeddingFast`` (baaivision/EVA ``EVA-02/asuka/rope.py``) for any grid.

    Each side's positions are ``arange(n) / n * ref_grid``: scaled to the pretraining grid (16 for 224 px at patch
    14), which is how EVA-02 builds its rotations for a fine-tuning size (``ft_seq_len``) and what timm's ``Eva`` does
    with ``ref_feat_shape``. Frequencies ``rope_frequencies(head_dim / 2, theta)`` per axis, laid out [rows | cols]
    and rotated on interleaved pairs (EVA's ``rotate_half``). No tensor is stored: the files' ``freqs_cos`` /
    ``freqs_sin`` buffers are the training grid's (``tables``; the reader reads ``ref_grid`` from them), recomputed
    here for each image's own grid. EVA-02 defines square grids only (one integer image size); a non-square grid
    scales each side by its own length, as timm's does.
    """

    def __init__(self, head_dim: int, theta: float = 10000., ref_grid: Optional[int] = 16) -> None:
        super().__init__()
        _check_head_dim(head_dim)
        if not ref_grid:
            raise ValueError("EVA-02's RoPE needs the pretraining grid it scales positions to (ref_grid)")
        self.head_dim, self.theta, self.ref_grid = head_dim, float(theta), int(ref_grid)

    def forward(self, coords: torch.Tensor, grids: torch.Tensor) -> torch.Tensor:
        freqs = rope_frequencies(self.head_dim // 2, self.theta, coords.device)
        t = coords.float() / grids.float() * self.ref_grid  # (T, 2): EVA's arange(ft) / ft * pt, per side
        angles = torch.cat([t[:, 0, None] * freqs, t[:, 1, None] * freqs], dim=-1)  # (T, hd/2): [rows | cols]
        return _interleaved(angles)[None, None]

    def tables(self, rows: int, cols: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """(cos, sin), each (rows * cols, head_dim): the ``freqs_cos`` / ``freqs_sin`` buffers EVA-02's files store,
        its ``VisionRotaryEmbeddingFast(pt_seq_len=ref_grid, ft_seq_len=the grid)``, row-major."""
        y, x = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing='ij')
        coords = torch.stack([y.reshape(-1), x.reshape(-1)], dim=1)
        sin, cos = self(coords, torch.tensor([rows, cols]).expand_as(coords))[0, 0].chunk(2, dim=-1)
        return cos, sin


# Each rotary form by its ``rope_type``: (head_dim, depth, heads, theta, ref_grid, device/dtype) -> its module.
ROPE_FORMS: Dict[str, Callable[[int, int, int, float, Optional[int], Dict[str, Any]], RotaryScheme]] = {
    'dinov3': lambda hd, depth, heads, theta, ref, dd: DinoV3Rope(hd, theta, **dd),
    'axial': lambda hd, depth, heads, theta, ref, dd: AxialRope(hd, theta),
    'mixed': lambda hd, depth, heads, theta, ref, dd: MixedRope(hd, depth, heads, theta, **dd),
    'eva02': lambda hd, depth, heads, theta, ref, dd: Eva02Rope(hd, theta, ref),
}
