"""SAM's own layers: its blocks (windowed or global attention with decomposed relative positions), the scheme that
tells each block its window, and its neck.

``SamBlock`` is timm's ``vision_transformer_sam.Block`` (same code, same state-dict names: ``attn.rel_pos_h``,
``attn.rel_pos_w``), called as every block of the model's loop is: it takes the loop's [B, N, D] tokens and the NCHW
token grid, and runs timm's block on them as the [B, H, W, D] grid it is written for (timm's ``window_partition``
and ``window_unpartition`` around timm's attention, whose ``get_decomposed_rel_pos_bias`` makes each block's bias
from its queries and its tables, resized by ``get_rel_pos`` to the grid it runs on). Packed NaFlex rows have no one
grid: refused by name, as timm's SAM takes NCHW batches only.

``SamWindowsModule`` is the 'sam_windows' scheme's module: it stores nothing, and gives the 'sam' block builder each
block's window and the nominal grid (``block_options``); its bias is the blocks' own, so it adds none to the mask.

``SamNeckModule`` is the model's 'sam_neck' pool (a ``heads.PoolModule``, in ``attn_pool``): timm's neck (1x1 conv,
``LayerNorm2d``, 3x3 conv, ``LayerNorm2d``; or ``LayerNorm2d`` alone) over the final tokens laid out as their grid,
in ``forward_features`` (``map_grid``), then the mean of its outputs, as timm's ``ClassifierHead`` 'avg' pools them.
"""
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from timm.layers import Attention, LayerNorm2d
from timm.models.vision_transformer_sam import Block as TimmSamBlock

from ..config import SimpleViTConfig
from ..errors import ViTVariantsError
from ..heads import PoolModule
from ..layers import BLOCKS
from ..positions import SCHEMES
from ..scheme import SchemeModule
from .sam_parts import SAM_BLOCK, SamNeck, SamWindows

__all__ = ['SamBlock', 'sam_block', 'SamWindowsModule', 'SamNeckModule']

_NCHW_ONLY = "SAM's windowed attention and neck run on an NCHW batch's token grid; packed NaFlex rows have none"


class SamBlock(TimmSamBlock):
    """timm's SAM block over the loop's tokens and the NCHW ``grid`` (module docstring)."""

    def forward(self, x: torch.Tensor, attn_mask: Optional[torch.Tensor] = None,
                rope: Optional[torch.Tensor] = None, grid: Optional[List[int]] = None) -> torch.Tensor:
        if grid is None:
            raise ViTVariantsError(_NCHW_ONLY)
        b, n, d = x.shape
        return super().forward(x.reshape(b, grid[0], grid[1], d)).reshape(b, n, d)


def sam_block(dim: int, num_heads: int, *, mlp: Any, mlp_width: int, mlp_bias: bool = True, mlp_norm: bool = False,
              attn_norm: bool = False, qkv_fused: bool = True, proj_bias: bool = True,
              rotate_half: Optional[bool] = None, attn_layer: Any = Attention, depth: int = 0,
              sam_windows: Sequence[int] = (),
              sam_grid: Tuple[int, int] = (0, 0), sam_rel_pos: bool = True, **kwargs: Any) -> nn.Module:
    """'sam': block ``depth`` of a SAM encoder, its window ``sam_windows[depth]`` (0: global, its tables sized for
    the grid ``sam_grid``), with the exact MLP ``mlp_width``; the options timm's SAM block has no equivalent of refused."""
    if not sam_windows:
        raise ViTVariantsError("the 'sam' block needs the 'sam_windows' position scheme (each block's window)",
                               key='positions')
    for name, value, want in (('mlp_norm', mlp_norm, False), ('attn_norm', attn_norm, False),
                              ('qkv_fused', qkv_fused, True), ('proj_bias', proj_bias, True)):
        if value != want:
            raise ViTVariantsError(f"timm's SAM block has {name}={want}", key=name)
    if attn_layer is not Attention:
        raise ViTVariantsError("timm's SAM block has timm's own attention (no differential attention)",
                               key='attn_layer')
    if rotate_half is not None or mlp.gated:
        raise ViTVariantsError("timm's SAM block (as published) has no rotary positions and a plain MLP",
                               key='rope' if rotate_half is not None else 'mlp_layer')
    return SamBlock(dim=dim, num_heads=num_heads, mlp_ratio=mlp_width / dim, mlp_layer=mlp.exact(mlp_width, mlp_bias),
                    use_rel_pos=sam_rel_pos, window_size=sam_windows[depth], input_size=sam_grid, **kwargs)


class SamWindowsModule(SchemeModule):
    """The 'sam_windows' scheme: each block's window for the block builder; no tensors, no mask."""

    def __init__(self, windows: Sequence[int], grid: Tuple[int, int], rel_pos: bool) -> None:
        super().__init__()
        self.windows = tuple(int(w) for w in windows)
        self.grid = (int(grid[0]), int(grid[1]))
        self.rel_pos = rel_pos

    @torch.jit.ignore
    def block_options(self) -> Dict[str, Any]:
        return {'sam_windows': self.windows, 'sam_grid': self.grid, 'sam_rel_pos': self.rel_pos}

    def join_mask(self, layer: int, grid: Optional[List[int]], mask: Optional[torch.Tensor],
                  tensors: Dict[str, torch.Tensor], sizes: Dict[str, List[int]]) -> Optional[torch.Tensor]:
        """The mask as it is: each block makes its relative-position bias from its own queries."""
        return mask


def _build_windows(cfg: SimpleViTConfig, part: SamWindows, grid: Tuple[int, int], dd: Dict[str, Any]
                   ) -> SchemeModule:
    if cfg.block.kind != SAM_BLOCK:
        raise ViTVariantsError(f"the 'sam_windows' scheme windows SAM's blocks: set block_type={SAM_BLOCK!r}",
                               key='block_type')
    outside = [i for i in part.global_blocks if i >= cfg.depth]
    if outside:
        raise ViTVariantsError(f'global_blocks {outside} are beyond the {cfg.depth} blocks', key='positions')
    return SamWindowsModule([part.window_of(i) for i in range(cfg.depth)], part.table_grid or grid, part.rel_pos)


class SamNeckModule(PoolModule, kind='sam_neck'):
    """The model's 'sam_neck' pool (module docstring); keys ``attn_pool.neck.*``, timm's ``neck.*``."""
    weighted = True

    def __init__(self, dim: int, chans: Optional[int], device: Optional[torch.device] = None,
                 dtype: Optional[torch.dtype] = None) -> None:
        super().__init__()
        dd = {'device': device, 'dtype': dtype}
        if chans:
            self.neck: nn.Module = nn.Sequential(
                nn.Conv2d(dim, chans, kernel_size=1, bias=False, **dd), LayerNorm2d(chans, **dd),
                nn.Conv2d(chans, chans, kernel_size=3, padding=1, bias=False, **dd), LayerNorm2d(chans, **dd))
        else:
            self.neck = LayerNorm2d(dim, **dd)

    @classmethod
    def create(cls, cfg: SimpleViTConfig, norm_layer: Callable[..., nn.Module], act_layer: Any,
               dd: Dict[str, Any]) -> PoolModule:
        neck: SamNeck = cfg.head.pool  # this kind's part
        return cls(cfg.embed_dim, neck.chans, **dd).with_prefix(cfg.num_prefix_tokens)

    def map_grid(self, x: torch.Tensor, grid: List[int]) -> torch.Tensor:
        b, n, d = x.shape
        y = self.neck(x.reshape(b, grid[0], grid[1], d).permute(0, 3, 1, 2))
        return y.flatten(2).transpose(1, 2)

    def pool_tokens(self, x: torch.Tensor, patch_valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        if patch_valid is not None:
            raise ViTVariantsError(_NCHW_ONLY)
        return x.mean(dim=1)


BLOCKS[SAM_BLOCK] = sam_block
SCHEMES[SamWindows.scheme] = _build_windows
