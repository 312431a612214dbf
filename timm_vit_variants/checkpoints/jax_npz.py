"""Shared reader for the two JAX/Flax ``.npz`` layouts (big_vision and vit_jax/AugReg).

Both store flax parameters flattened with ``/``; they differ only in block module names
and in where the learned position table lives. Subclasses supply those names.
"""
import math
import re
from typing import Any, Dict, Optional, Set, Tuple

import torch
from timm.layers import to_2tuple

from ..limits import DEFAULT_LIMITS
from .npz_archive import NpzArchive
from .source import PlanItem, SourceCheckpoint, as_is

__all__ = ['JaxNpzCheckpoint']

_BLOCK_RE = re.compile(r'^Transformer/encoderblock_(\d+)/')
_SCAN_PREFIX = 'Transformer/encoderblock/'


def _patch_kernel(kernel: torch.Tensor) -> torch.Tensor:
    return kernel.permute(3, 2, 0, 1)  # HWIO -> OIHW


def _transpose(kernel: torch.Tensor) -> torch.Tensor:
    return kernel.T  # flax Dense (in, out) -> torch Linear (out, in)


def _fuse_qkv_weight(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    # (D, heads, head_dim) each -> (3 * heads * head_dim, D), q|k|v stacked like timm's fused qkv.
    return torch.cat([t.reshape(t.shape[0], -1).T for t in (q, k, v)], dim=0)


def _fuse_qkv_bias(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.cat([t.reshape(-1) for t in (q, k, v)], dim=0)


def _out_weight(kernel: torch.Tensor) -> torch.Tensor:
    # (heads, head_dim, D) -> (D, heads * head_dim)
    return kernel.reshape(-1, kernel.shape[-1]).T


class JaxNpzCheckpoint(SourceCheckpoint):
    """A flax ViT parameter archive; subclasses name the block modules and the position table."""

    PREFIXES = ('', 'params/', 'opt/target/')
    # Set by each subclass: the flax module names of one block, and the learned table's key.
    NORM1: str
    ATTN: str
    NORM2: str
    MLP: str
    POS_KEY: str
    # Whether the learned table includes a slot for the class token.
    POS_CLS_SLOT: bool
    # Names that mean a head this package cannot express.
    UNSUPPORTED = {
        'MAPHead_0': "big_vision 'map' pooling (MAPHead) is not supported by SimpleVisionTransformer",
        'conv_root': 'hybrid ResNet-ViT checkpoints (ResNet stem) are not supported',
    }

    def __init__(self, path: str, **hints: Any) -> None:
        super().__init__(path, hints.get('limits', DEFAULT_LIMITS))
        self._open(NpzArchive(self.path, self.limits), hints)

    # -- planning ------------------------------------------------------------------------------------
    def _find_prefix(self, hint: Optional[str]) -> str:
        candidates = (hint,) if hint else self.PREFIXES
        for prefix in candidates:
            if f'{prefix}embedding/kernel' in self._store:
                return prefix
        raise self._error(
            'not a ViT parameter archive: no patch embedding found (if the ViT sits deeper, e.g. in a two-tower '
            "model, pass its key prefix such as --prefix 'params/img/')", key=f'{candidates[0]}embedding/kernel')

    def _plan_conversion(self, hints: Dict[str, Any]) -> None:
        prefix = self._find_prefix(hints.get('prefix'))
        local = {key[len(prefix):]: key for key in self._store.keys() if key.startswith(prefix)}
        used: Set[str] = set()
        for name in local:
            for marker, reason in self.UNSUPPORTED.items():
                if name.startswith(marker):
                    raise self._error(reason, key=local[name])

        def take(name: str, shape: Tuple[int, ...], layers: Optional[int] = None) -> str:
            """Raw key for a local name after checking its shape (leading depth axis when scanned)."""
            if name not in local:
                raise self._error('missing key', key=prefix + name)
            key = local[name]
            expected = ((layers,) if layers is not None else ()) + tuple(shape)
            self._expect_shape(key, self._store.shape(key), expected)
            used.add(name)
            return key

        def plan(key: str, shape: Tuple[int, ...], sources: Tuple[str, ...], build=as_is, index=None) -> None:
            self._plan.append(PlanItem(key, tuple(shape), sources, build, index))

        # Patch embedding fixes width, channels and patch size.
        kernel_shape = self._store.shape(local['embedding/kernel'])
        if len(kernel_shape) != 4:
            raise self._error('patch embedding kernel must be (P, P, C, D)', key=local['embedding/kernel'],
                              shapes=(kernel_shape,))
        patch_h, patch_w, in_chans, dim = kernel_shape
        self._check_dims(local['embedding/kernel'], width=dim, img_size=max(patch_h, patch_w))
        plan('patch_embed.proj.weight', (dim, in_chans, patch_h, patch_w),
             (take('embedding/kernel', kernel_shape),), _patch_kernel)
        plan('patch_embed.proj.bias', (dim,), (take('embedding/bias', (dim,)),))

        class_token = 'cls' in local
        if class_token:
            plan('cls_token', (1, 1, dim), (take('cls', (1, 1, dim)),))

        # Position table: learned (with or without a cls slot) or absent (big_vision sin-cos).
        pos_embed = hints.get('pos_embed')
        slot = self.POS_CLS_SLOT and class_token
        if self.POS_KEY in local:
            if pos_embed not in (None, 'learn'):
                raise self._error(f'the checkpoint has a learned position table, not pos_embed={pos_embed!r}',
                                  key=local[self.POS_KEY])
            pos_embed = 'learn'
            pos_shape = self._store.shape(local[self.POS_KEY])
            if len(pos_shape) != 3 or pos_shape[0] != 1 or pos_shape[2] != dim:
                raise self._error('position table must be (1, tokens, width)', key=local[self.POS_KEY],
                                  shapes=(pos_shape, (1, -1, dim)))
            self.grid = self._infer_grid(pos_shape[1] - int(slot), (patch_h, patch_w), hints.get('img_size'),
                                         local[self.POS_KEY], pos_shape)
            plan('pos_embed', pos_shape, (take(self.POS_KEY, pos_shape),))
        else:
            pos_embed = pos_embed or self._default_pos_embed(prefix)

        # Encoder blocks: one module per block, or a single scanned module with a leading depth axis.
        scanned = f'{_SCAN_PREFIX}{self.NORM1}/scale' in local
        if scanned:
            scale_key = local[f'{_SCAN_PREFIX}{self.NORM1}/scale']
            if len(self._store.shape(scale_key)) != 2:
                raise self._error('scanned parameters need a leading depth axis', key=scale_key,
                                  shapes=(self._store.shape(scale_key), ('depth', 'width')))
            depth = self._store.shape(scale_key)[0]
            self._check_dims(scale_key, depth=depth)
            block_prefixes = [_SCAN_PREFIX] * depth
            layers: Optional[int] = depth
        else:
            indices = sorted({int(m.group(1)) for m in map(_BLOCK_RE.match, local) if m})
            depth = len(indices)
            if indices:
                self._check_dims(f'{prefix}Transformer/encoderblock_{indices[-1]}', depth=indices[-1] + 1)
            if indices != list(range(depth)):
                missing = sorted(set(range(max(indices) + 1)) - set(indices))
                raise self._error(f'inconsistent depth: blocks {indices} present, {missing} missing',
                                  key=f'{prefix}Transformer/encoderblock_{missing[0]}')
            block_prefixes = [f'Transformer/encoderblock_{i}/' for i in range(depth)]
            layers = None
        if depth == 0:
            raise self._error('no encoder blocks found', key=f'{prefix}Transformer/encoderblock_0')

        attn0 = f'{block_prefixes[0]}{self.ATTN}/query/kernel'
        if attn0 not in local:
            raise self._error('missing key', key=prefix + attn0)
        q_shape = self._store.shape(local[attn0])[1 if scanned else 0:]
        if len(q_shape) != 3 or q_shape[0] != dim or q_shape[1] * q_shape[2] != dim:
            raise self._error('attention kernel must be (width, heads, head_dim) with heads * head_dim = width',
                              key=local[attn0], shapes=(q_shape, (dim, 'H', 'hd')))
        num_heads, head_dim = q_shape[1], q_shape[2]
        if hints.get('num_heads') not in (None, num_heads):
            raise self._error(f'--num-heads {hints["num_heads"]} contradicts the attention kernel ({num_heads} heads)',
                              key=local[attn0])
        fc1 = f'{block_prefixes[0]}{self.MLP}/Dense_0/kernel'
        if fc1 not in local:
            raise self._error('missing key', key=prefix + fc1)
        mlp_dim = self._store.shape(local[fc1])[-1]
        self._check_dims(local[fc1], mlp=mlp_dim, heads=num_heads)
        qkv_bias = f'{block_prefixes[0]}{self.ATTN}/query/bias' in local

        for i, bp in enumerate(block_prefixes):
            index = i if scanned else None
            ours = f'blocks.{i}.'
            attn = f'{bp}{self.ATTN}/'
            mlp = f'{bp}{self.MLP}/'
            for norm, theirs in (('norm1', self.NORM1), ('norm2', self.NORM2)):
                plan(f'{ours}{norm}.weight', (dim,), (take(f'{bp}{theirs}/scale', (dim,), layers),), index=index)
                plan(f'{ours}{norm}.bias', (dim,), (take(f'{bp}{theirs}/bias', (dim,), layers),), index=index)
            plan(f'{ours}attn.qkv.weight', (3 * dim, dim), tuple(
                take(f'{attn}{n}/kernel', (dim, num_heads, head_dim), layers) for n in ('query', 'key', 'value')),
                _fuse_qkv_weight, index)
            if qkv_bias:
                plan(f'{ours}attn.qkv.bias', (3 * dim,), tuple(
                    take(f'{attn}{n}/bias', (num_heads, head_dim), layers) for n in ('query', 'key', 'value')),
                    _fuse_qkv_bias, index)
            plan(f'{ours}attn.proj.weight', (dim, dim),
                 (take(f'{attn}out/kernel', (num_heads, head_dim, dim), layers),), _out_weight, index)
            plan(f'{ours}attn.proj.bias', (dim,), (take(f'{attn}out/bias', (dim,), layers),), index=index)
            plan(f'{ours}mlp.fc1.weight', (mlp_dim, dim),
                 (take(f'{mlp}Dense_0/kernel', (dim, mlp_dim), layers),), _transpose, index)
            plan(f'{ours}mlp.fc1.bias', (mlp_dim,), (take(f'{mlp}Dense_0/bias', (mlp_dim,), layers),), index=index)
            plan(f'{ours}mlp.fc2.weight', (dim, mlp_dim),
                 (take(f'{mlp}Dense_1/kernel', (mlp_dim, dim), layers),), _transpose, index)
            plan(f'{ours}mlp.fc2.bias', (dim,), (take(f'{mlp}Dense_1/bias', (dim,), layers),), index=index)
        if scanned:
            # Param-major order: each stacked array is read once and sliced per block.
            self._plan.sort(key=lambda item: (item.sources, item.index or 0) if item.index is not None else ((), 0))

        plan('norm.weight', (dim,), (take('Transformer/encoder_norm/scale', (dim,)),))
        plan('norm.bias', (dim,), (take('Transformer/encoder_norm/bias', (dim,)),))

        rep_size = None
        head_in = dim
        if 'pre_logits/kernel' in local:
            rep_size = self._store.shape(local['pre_logits/kernel'])[-1]
            self._check_dims(local['pre_logits/kernel'], width=rep_size)
            plan('pre_logits.fc.weight', (rep_size, dim), (take('pre_logits/kernel', (dim, rep_size)),), _transpose)
            plan('pre_logits.fc.bias', (rep_size,), (take('pre_logits/bias', (rep_size,)),))
            head_in = rep_size
        num_classes = 0
        if 'head/kernel' in local:
            num_classes = self._store.shape(local['head/kernel'])[-1]
            self._check_dims(local['head/kernel'], classes=num_classes)
            plan('head.weight', (num_classes, head_in), (take('head/kernel', (head_in, num_classes)),), _transpose)
            plan('head.bias', (num_classes,), (take('head/bias', (num_classes,)),))

        unknown = sorted(set(local) - used)
        if unknown:
            raise self._error(f'unknown key for a {self.format} ViT ({len(unknown)} unexpected)', key=local[unknown[0]])

        patch_size = patch_h if patch_h == patch_w else (patch_h, patch_w)
        if self.grid is not None:
            img_size = (self.grid[0] * patch_h, self.grid[1] * patch_w)
        else:
            img_size = to_2tuple(hints.get('img_size') or 224)
        self.model_args = dict(
            img_size=img_size[0] if img_size[0] == img_size[1] else tuple(img_size),
            patch_size=patch_size,
            in_chans=in_chans,
            num_classes=num_classes,
            global_pool='token' if class_token else 'avg',
            embed_dim=dim,
            depth=depth,
            num_heads=num_heads,
            mlp_dim=mlp_dim,
            qkv_bias=qkv_bias,
            class_token=class_token,
            pos_embed=pos_embed,
            pos_embed_cls_slot=slot and pos_embed == 'learn',
            pos_embed_resample='bigvision',
            rep_size=rep_size,
            # flax nn.gelu defaults to the tanh approximation in both big_vision and vit_jax.
            act_layer=hints.get('act_layer') or 'gelu_tanh',
            norm_eps=hints.get('norm_eps') or 1e-6,
        )

    def _default_pos_embed(self, prefix: str) -> str:
        """Position embedding when the archive holds no table."""
        raise self._error('missing key', key=prefix + self.POS_KEY)

    def _infer_grid(
            self,
            tokens: int,
            patch: Tuple[int, int],
            img_size: Any,
            key: str,
            shape: Tuple[int, ...],
    ) -> Tuple[int, int]:
        """Grid of a learned table: from an image-size hint, else the table must be square."""
        self._check_dims(key, tokens=tokens)
        if img_size:
            img = to_2tuple(img_size)
            grid = (img[0] // patch[0], img[1] // patch[1])
            if grid[0] * grid[1] != tokens:
                raise self._error(f'img_size {img} gives a {grid[0]}x{grid[1]} grid, but the table has {tokens} '
                                  'patch positions', key=key, shapes=(shape,))
            return grid
        side = math.isqrt(tokens)
        if side * side != tokens or side == 0:
            raise self._error(f'{tokens} patch positions do not form a square grid; pass the source image size '
                              '(--img-size)', key=key, shapes=(shape,))
        return side, side
