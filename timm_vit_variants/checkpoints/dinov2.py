"""DINOv2 hub checkpoints: ``dinov2_vit{s,b,l,g}14[_reg4]_pretrain.pth``, bare backbone state dicts.

They are what ``dinov2/hub/backbones.py`` loads with ``strict=True``: ``cls_token``, a ``pos_embed``
with a [CLS] slot, ``register_tokens`` in the register models, ``mask_token`` (used only by the
training's masked inputs), flat ``blocks.N`` with LayerScale (``ls1.gamma``/``ls2.gamma``) and an MLP
that is either ``fc1``/``fc2`` or ViT-g's packed SwiGLU (``w12`` then ``w3``), and ``norm``; no head.
The hub builds the models without registers with ``interpolate_offset=0.1`` and no antialias (our
'dinov2' rule), and the register models with offset 0 and antialias (exactly the 'timm' rule).
"""
from typing import Any, Dict, Optional, Set, Tuple

from ..config import SimpleViTConfig
from ..dino_models import DINOV2, DINOV2_HEADS
from .preprocessing import imagenet_preprocessing
from .source import Rule, SourceCheckpoint, renamed

__all__ = ['DINOV2_HEADS', 'Dinov2Checkpoint', 'is_dinov2']

_MASK = 'mask_token'
_REGISTERS = 'register_tokens'
# Our MLP keys -> DINOv2's SwiGLUFFNFused names (timm's SwiGLUPacked: fc1 is w12, fc2 is w3).
_SWIGLU = {'mlp.fc1.': 'mlp.w12.', 'mlp.fc2.': 'mlp.w3.'}


def is_dinov2(names: Set[str]) -> bool:
    """Whether a bare state dict has DINOv2's layout (its unused ``mask_token``, no RoPE periods, LayerScale)."""
    return _MASK in names and 'patch_embed.proj.weight' in names and 'blocks.0.ls1.gamma' in names and \
        'rope_embed.periods' not in names and 'storage_tokens' not in names


class Dinov2Checkpoint(SourceCheckpoint):
    format = 'dinov2'
    SKIPPED = (_MASK,)
    PREPROCESSING_DEFAULTS = imagenet_preprocessing(
        0.875, "not recorded by the checkpoint; DINOv2's ImageNet preprocessing")

    def _rule(self, pattern: str, block: Optional[int]) -> Tuple[Rule, Optional[int]]:
        key = pattern.replace('{i}', str(block))
        if key == 'reg_token':
            return Rule((_REGISTERS,)), None
        if self.config.block.mlp == 'swiglu_packed':
            key = renamed(key, _SWIGLU)
        return Rule((key,)), None

    def _infer(self, hints: Dict[str, Any]) -> SimpleViTConfig:
        names = set(self._store.names())
        dim, in_chans, patch_h, patch_w = self._conv_patch_kernel()
        self._check_token_table('pos_embed', dim, (patch_h, patch_w), class_token=True, slot=True,
                         img_size=hints.get('img_size'))
        depth = self._depth(names)
        swiglu = 'blocks.0.mlp.w12.weight' in names
        mlp_key = 'blocks.0.mlp.w3.weight' if swiglu else 'blocks.0.mlp.fc1.weight'
        mlp_shape = self._shape(mlp_key)
        mlp_dim = mlp_shape[1] if swiglu else mlp_shape[0]
        self._check_dims(mlp_key, mlp=mlp_dim)
        reg_tokens = self._token_count(_REGISTERS, dim)
        heads = self._heads(dim, hints)
        rule = 'timm' if reg_tokens else 'dinov2'
        self.notes.append(
            f'detected a DINOv2 backbone ({"SwiGLU, " if swiglu else ""}{reg_tokens} registers): table resize rule '
            f"{rule!r} ({'bicubic with antialias, no offset' if reg_tokens else 'bicubic at scale (n + 0.1) / N, no antialias'}"
            f", as the hub builds it); {_MASK} is stored for masked training and skipped")
        return SimpleViTConfig.of(**dict(
            DINOV2, img_size=(self.grid[0] * patch_h, self.grid[1] * patch_w), patch_size=(patch_h, patch_w),
            in_chans=in_chans, embed_dim=dim, depth=depth, num_heads=heads, mlp_dim=mlp_dim,
            mlp_layer='swiglu_packed' if swiglu else 'mlp', qkv_bias='blocks.0.attn.qkv.bias' in names,
            reg_tokens=reg_tokens, pos_embed_resample=rule,
            act_layer=hints.get('act_layer') or ('silu' if swiglu else DINOV2['act_layer']),
            norm_eps=hints.get('norm_eps') or DINOV2['norm_eps']))

    def _heads(self, dim: int, hints: Dict[str, Any]) -> int:
        """The caller's head count, else the DINOv2 hub model's of this width, else 64-wide heads when asked for."""
        return self._head_count(
            dim, hints, [(DINOV2_HEADS.get(dim), f'the DINOv2 hub model of width {dim}')],
            f'a DINOv2 checkpoint does not record the number of attention heads, and width {dim} '
            f'is none of the hub models\' ({sorted(DINOV2_HEADS)}); give the head count')
