"""Fitting weights to a geometry: the only place a patch kernel or a position table is resized.

A ``Geometry`` says how a checkpoint's input side is laid out: the token grid of its learned
table, the patch size of its kernel, whether the table has a class-token slot, the rule its
ecosystem resizes tables with, its input channels, and the patch embedding and patch norm that
decide which kernel meets the pixels and whether it can follow a patch-size change. ``fit_stream``
takes tensors from a source geometry to a target one; the timm filter, the streaming loader, the
conversion pipeline and ``set_input_size`` all go through it (``check_fit`` refuses, saying why, a
change no rule defines), and the model's runtime resampling calls ``interpolate_grid``.
"""
import math
from dataclasses import dataclass
from typing import Iterable, Iterator, Optional, Tuple

import torch
import torch.nn.functional as F
from timm.layers import resample_patch_embed
from timm.models import adapt_input_conv

from .config import SimpleViTConfig, grid_for, pair, resample_rule
from .parts import Learned, RelPos
from .errors import ViTVariantsError
from .limits import DEFAULT_LIMITS, Limits
from .relpos_resize import RESIZERS as REL_POS_RESIZERS, table_rows
from .source_rules import DEFAULT_REL_POS_RULE, RESAMPLE_OFFSETS, RESAMPLE_RULES

__all__ = [
    'RESAMPLE_RULES', 'RESAMPLE_OFFSETS', 'Geometry', 'grid_for', 'is_capturing', 'interpolate_grid', 'resample_table', 'pi_resize',
    'adapt_in_chans', 'infer_grid', 'fixed_patch_reason', 'pi_resize_bytes', 'check_fit', 'fit_tensor', 'fit_stream',
]

_KERNEL = 'patch_embed.proj.weight'
_STEM_KERNEL = 'patch_embed.stem.0.conv.weight'
_PIXEL_NORM_KEY = 'patch_embed.norm_pre.weight'
_TABLE = 'pos_embed'
_REL_POS = 'rel_pos.tables'
_CLS = 'cls_token'
# Why a patch embedding cannot follow a patch-size change. FlexiViT's PI-resize is defined for a
# kernel that is one filter over exactly one patch ('conv', 'linear', the first conv of 'mlp').
_FIXED_PATCH = {
    'conv_stem': 'its stack of 3x3 stride-2 convs has one layer per factor 2 of the patch, so another patch size '
                 'is another network, and PI-resize is defined only for a single filter over one patch',
    'overlap': 'its kernel is wider than the stride and sees neighbouring patches, and PI-resize is defined only '
               'for a kernel that sees exactly one patch',
}
_PIXEL_NORM = ("the 'pre' LayerNorm (patch_norm 'pre' or 'dual') has one weight per pixel and channel of a patch, "
               'and no rule resizes it while keeping what it normalises')


def is_capturing() -> bool:
    """True while a graph is captured: jit.trace (legacy ONNX), torch.compile, torch.export (dynamo ONNX).

    A Python branch on an input size would be frozen into such a graph for the example input, so the
    runtime code takes its branch-free path then. Call it under ``if not torch.jit.is_scripting():``;
    TorchScript keeps Python branches and needs no special path.
    """
    return torch.jit.is_tracing() or torch.compiler.is_compiling()


def interpolate_grid(
        table: torch.Tensor,
        new_h: int,
        new_w: int,
        old_h: int,
        old_w: int,
        num_prefix: int,
        mode: str,
        align_corners: Optional[bool],
        antialias: bool,
        offset: float = 0.,
        ar_preserving: bool = False,
) -> torch.Tensor:
    """Resize the grid part of a (1, prefix + old_h*old_w, D) table; prefix rows kept. TorchScript-friendly.

    Interpolation runs in float32 and the result takes the table's dtype. While a graph is captured
    the resize is always recorded (a same-size resize is an exact identity), so the graph follows the
    input size instead of the example's. A non-zero ``offset`` samples at the scale (new + offset) / old
    (``RESAMPLE_OFFSETS``); such a resize is no identity at the same size, so that case is skipped even then.
    ``ar_preserving`` (timm NaFlexVit's ``pos_embed_ar_preserving``) resizes to the square of the longer side and
    keeps its top-left new_h x new_w, so every grid reads the table at one scale.
    """
    capturing = False
    if not torch.jit.is_scripting():
        capturing = is_capturing()
    if (not capturing or offset != 0.) and new_h == old_h and new_w == old_w:
        return table
    prefix, grid = table[:, :num_prefix], table[:, num_prefix:]
    dim = grid.shape[-1]
    grid = grid.float().reshape(1, old_h, old_w, dim).permute(0, 3, 1, 2)
    size_h, size_w = new_h, new_w
    if ar_preserving:
        size_h = size_w = max(new_h, new_w)
    if offset != 0.:
        scale = [float(size_h + offset) / old_h, float(size_w + offset) / old_w]
        grid = F.interpolate(grid, scale_factor=scale, mode=mode, align_corners=align_corners, antialias=antialias)
    else:
        grid = F.interpolate(grid, size=[size_h, size_w], mode=mode, align_corners=align_corners, antialias=antialias)
    grid = grid[:, :, :new_h, :new_w].permute(0, 2, 3, 1).reshape(1, new_h * new_w, dim).to(table.dtype)
    if num_prefix > 0:
        return torch.cat([prefix, grid], dim=1)
    return grid


def resample_table(
        table: torch.Tensor,
        new_grid: Tuple[int, int],
        old_grid: Tuple[int, int],
        num_prefix: int = 0,
        rule: str = 'bigvision',
        ar_preserving: bool = False,
) -> torch.Tensor:
    """Resize a learned (1, prefix + H*W, D) table to a new grid with an ecosystem's rule (``ar_preserving``: from
    the square of the longer side, ``interpolate_grid``)."""
    mode, align_corners, antialias = RESAMPLE_RULES[resample_rule(rule)]
    return interpolate_grid(table, new_grid[0], new_grid[1], old_grid[0], old_grid[1], num_prefix,
                            mode, align_corners, antialias, RESAMPLE_OFFSETS.get(rule, 0.), ar_preserving)


def pi_resize(kernel: torch.Tensor, patch_size: Tuple[int, int]) -> torch.Tensor:
    """FlexiViT pseudo-inverse resize of an (O, I, P, P) kernel, as big_vision does it (bilinear, no antialias)."""
    if tuple(kernel.shape[-2:]) == tuple(patch_size):
        return kernel
    return resample_patch_embed(kernel, list(patch_size), interpolation='bilinear', antialias=False)


def adapt_in_chans(kernel: torch.Tensor, in_chans: int) -> torch.Tensor:
    """timm's ``adapt_input_conv``: 1 channel sums the RGB filters, others repeat them and rescale."""
    if kernel.shape[1] == in_chans:
        return kernel
    try:
        return adapt_input_conv(in_chans, kernel)
    except (NotImplementedError, AssertionError) as e:
        raise ViTVariantsError(f'cannot adapt a {kernel.shape[1]}-channel patch kernel to {in_chans} channels '
                               f'({e or "timm supports 3-channel sources"})', key=_KERNEL) from None


def infer_grid(
        tokens: int,
        patch: Tuple[int, int],
        *,
        img_size=None,
        class_token: bool = False,
        slot: Optional[bool] = None,
        path: Optional[str] = None,
        key: str = _TABLE,
        dist_token: bool = False,
        registers: int = 0,
        reg_slots: Optional[bool] = None,
) -> Tuple[Tuple[int, int], int]:
    """(grid, prefix slots) of a learned table of ``tokens`` rows.

    With an image size the grid follows from it; otherwise the patch part must be square. A
    class token makes a one-row slot possible (two rows with DeiT's distillation token, which has its own);
    ``slot`` pins the answer when a config says it. ``registers`` may have rows too (then so has a class token:
    timm's ``no_embed_class=False``), which ``reg_slots`` pins.
    """
    slots = 1 + int(dist_token)
    cls_rows = [s for s in ((0, slots) if class_token else (0,)) if slot is None or bool(s) == slot]
    reg_rows = [r for r in ((0, registers) if registers else (0,)) if reg_slots is None or bool(r) == reg_slots]
    choices = [c + r for c in cls_rows for r in reg_rows if not (r and class_token and not c)]
    if img_size:
        img = pair(img_size, 'img_size')
        grid = (img[0] // patch[0], img[1] // patch[1])
        for extra in choices:
            if tokens - extra == grid[0] * grid[1]:
                return grid, extra
        raise ViTVariantsError(f'image size {img} gives a {grid[0]}x{grid[1]} grid, which does not fit a table of '
                               f'{tokens} positions', path=path, key=key)
    for extra in choices:
        side = math.isqrt(max(tokens - extra, 0))
        if side > 0 and side * side == tokens - extra:
            return (side, side), extra
    raise ViTVariantsError(f'{tokens} positions do not form a square grid; the source image size is needed to '
                           'split them into rows and columns', path=path, key=key, needs='source_img_size')


@dataclass(frozen=True)
class Geometry:
    """The input-side layout of a set of weights.

    Attributes:
        grid: Token grid of the learned table (or the nominal grid when there is none).
        patch: Patch size (H, W) of the kernel.
        prefix: Prefix-token slots in the learned table (0, 1 for [CLS], or 2 with DeiT's distillation token).
        rule: The resample rule for the learned table (a key of ``RESAMPLE_RULES``).
        in_chans: Input channels of the kernel.
        patch_embed: The patch embedding (``SimpleViTConfig.patch.kind``): which kernel meets the pixels,
            and whether it can be PI-resized.
        patch_norm: The patch norm; a 'pre' norm has per-pixel weights that fix patch size and channels.
        rel_pos_rule: The resize rule of relative-position tables (``RelPos.resample``).
        ar_preserving: The learned table is resized from the square of the longer side (``Learned.ar_preserving``).
    """
    grid: Tuple[int, int]
    patch: Tuple[int, int]
    prefix: int = 0
    rule: str = 'bigvision'
    in_chans: int = 3
    patch_embed: str = 'conv'
    patch_norm: Optional[str] = None
    rel_pos_rule: str = DEFAULT_REL_POS_RULE
    ar_preserving: bool = False

    @classmethod
    def of(cls, config: SimpleViTConfig, grid: Optional[Tuple[int, int]] = None) -> 'Geometry':
        """The geometry of a model built from ``config`` (``grid`` overrides the nominal one)."""
        return cls(tuple(grid or config.grid_size), tuple(config.patch_size), config.num_prefix_slots,
                   getattr(config.position(Learned), 'resample', cls.rule), config.in_chans, config.patch.kind,
                   config.patch.norm, getattr(config.position(RelPos), 'resample', cls.rel_pos_rule),
                   getattr(config.position(Learned), 'ar_preserving', False))

    @property
    def kernel_key(self) -> str:
        """State-dict key of the kernel that meets the pixels (timm's ``first_conv`` plus '.weight')."""
        return _STEM_KERNEL if self.patch_embed == 'conv_stem' else _KERNEL

    @property
    def kernel_is_patch(self) -> bool:
        """The pixel-facing kernel is one (D, C, P, P) filter per patch, so its shape tells the patch size."""
        return self.patch_embed not in _FIXED_PATCH

    @property
    def fitted_keys(self) -> Tuple[str, ...]:
        """The tensors a geometry change touches: the pixel-facing kernel, the learned table, the class token, the
        relative-position tables."""
        return self.kernel_key, _TABLE, _CLS, _REL_POS

    def changes(self, other: 'Geometry') -> bool:
        return (self.grid, self.patch, self.prefix, self.in_chans) != (other.grid, other.patch, other.prefix,
                                                                       other.in_chans)


def fixed_patch_reason(patch_embed: str, patch_norm: Optional[str] = None) -> str:
    """Why weights of this patch embedding cannot follow a patch-size change ('' when PI-resize applies)."""
    return _FIXED_PATCH.get(patch_embed) or (_PIXEL_NORM if patch_norm in ('pre', 'dual') else '')


def pi_resize_bytes(old: Tuple[int, int], new: Tuple[int, int]) -> int:
    """Memory a PI-resize from patch ``old`` to ``new`` needs: its (new_h*new_w, old_h*old_w) float32 resize
    matrix about four times over (the basis, the matrix, its pseudo-inverse, the SVD's work)."""
    return 16 * old[0] * old[1] * new[0] * new[1]


def check_fit(src: Geometry, dst: Geometry, limits: Limits = DEFAULT_LIMITS) -> None:
    """Raise ``ViTVariantsError``, saying why, if no rule here takes weights laid out as ``src`` to ``dst``
    (or the rule would cost more than ``limits.tensor_bytes``)."""
    if src.patch != dst.patch and src.kernel_is_patch:
        limits.check('tensor_bytes', pi_resize_bytes(src.patch, dst.patch), key=src.kernel_key)
    for geo in (src, dst):
        layout = f'patch_embed={geo.patch_embed!r}' + (f', patch_norm={geo.patch_norm!r}' if geo.patch_norm else '')
        why = fixed_patch_reason(geo.patch_embed, geo.patch_norm)
        key = geo.kernel_key if geo.patch_embed in _FIXED_PATCH else _PIXEL_NORM_KEY
        if src.patch != dst.patch and why:
            raise ViTVariantsError(f'cannot change the patch size from {src.patch} to {dst.patch} with {layout}: '
                                   f'{why}', key=key)
        if src.in_chans != dst.in_chans and geo.patch_norm in ('pre', 'dual'):
            raise ViTVariantsError(f'cannot change the input channels from {src.in_chans} to {dst.in_chans} with '
                                   f'{layout}: {_PIXEL_NORM}', key=_PIXEL_NORM_KEY)


def _fit_rel_pos(tables: torch.Tensor, src: Geometry, dst: Geometry) -> torch.Tensor:
    """(depth, entries, heads) relative-position tables moved from ``src.grid`` to ``dst.grid`` by ``dst``'s rule."""
    entries = table_rows(src.grid)
    if tables.ndim != 3 or tables.shape[1] != entries:
        raise ViTVariantsError(f'relative-position tables do not match the source grid {src.grid}', key=_REL_POS,
                               shapes=(tables.shape, (tables.shape[0] if tables.ndim else 0, entries, -1)))
    if src.grid == dst.grid:
        return tables
    resize = REL_POS_RESIZERS[dst.rel_pos_rule]
    try:
        return torch.stack([resize(t, src.grid, dst.grid) for t in tables])
    except ViTVariantsError as e:  # named by our key
        raise ViTVariantsError(e.reason, key=_REL_POS, shapes=e.shapes) from None


def fit_tensor(key: str, tensor: torch.Tensor, src: Geometry, dst: Geometry) -> torch.Tensor:
    """One tensor moved from ``src`` to ``dst``: kernel channels and PI-resize, table grid and cls slot, the
    relative-position tables' grid.

    Tensors other than the pixel-facing kernel and the table pass unchanged. Dropping a cls slot
    needs the class token too; use ``fit_stream`` for that.
    """
    if key == src.kernel_key:
        if tensor.ndim != 4:
            raise ViTVariantsError('patch embedding must be an (O, I, P, P) kernel', key=key, shapes=(tensor.shape,))
        check_fit(src, dst)
        tensor = adapt_in_chans(tensor, dst.in_chans)
        return pi_resize(tensor, dst.patch) if src.patch != dst.patch else tensor
    if key == _TABLE:
        expected = src.prefix + src.grid[0] * src.grid[1]
        if tensor.ndim != 3 or tensor.shape[0] != 1 or tensor.shape[1] != expected:
            raise ViTVariantsError(f'position table does not match the source grid {src.grid} '
                                   f'(+{src.prefix} class slot)', key=key,
                                   shapes=(tensor.shape, (1, expected, tensor.shape[-1])))
        if src.prefix != dst.prefix and max(src.prefix, dst.prefix) > 1:
            raise ViTVariantsError(f'a table with {src.prefix} prefix slots cannot become one with {dst.prefix}: only '
                                   'a single [CLS] slot is added or folded into the class token', key=key)
        table = resample_table(tensor, dst.grid, src.grid, src.prefix, dst.rule, dst.ar_preserving)
        if dst.prefix > src.prefix:  # an empty slot: adding zero after the cls token changes nothing
            table = torch.cat([table.new_zeros(1, 1, table.shape[-1]), table], dim=1)
        elif dst.prefix < src.prefix:
            table = table[:, src.prefix:]
        return table
    if key == _REL_POS:
        return _fit_rel_pos(tensor, src, dst)
    return tensor


def fit_stream(
        stream: Iterable[Tuple[str, torch.Tensor]],
        src: Geometry,
        dst: Geometry,
) -> Iterator[Tuple[str, torch.Tensor]]:
    """``fit_tensor`` over (key, tensor) pairs, folding a dropped cls slot into the class token.

    A vit_jax table adds its slot to the class token after it is prepended; a big_vision-style
    table has no slot, so the exact equivalent is ``cls_token + slot``. The class token is held
    back (it is tiny) until the table has passed.
    """
    fold = src.prefix > dst.prefix
    held: Optional[torch.Tensor] = None
    slot: Optional[torch.Tensor] = None
    for key, tensor in stream:
        if fold and key == _CLS:
            if slot is None:
                held = tensor
                continue
            tensor = tensor + slot
        if fold and key == _TABLE:
            slot = tensor[:, :src.prefix]
            yield key, fit_tensor(key, tensor, src, dst)
            if held is not None:
                yield _CLS, held + slot
                held = None
            continue
        yield key, fit_tensor(key, tensor, src, dst) if key in (src.kernel_key, _TABLE, _REL_POS) and src.changes(dst) \
            else tensor
    if held is not None:
        raise ViTVariantsError('a class-token slot can only be dropped when the position table is present',
                               key=_TABLE)
