"""DINOv3 hub checkpoints: ``dinov3_vit{s16,s16plus,b16,l16,l16plus,h16plus}_pretrain_{lvd1689m,sat493m}-*.pth``.

They are bare backbone state dicts that ``dinov3/hub/backbones.py`` loads with ``strict=True`` into a
``DinoVisionTransformer`` with ``mask_k_bias=True``: ``cls_token``, ``storage_tokens`` (our registers, after
[CLS], with no position), ``mask_token`` (masked training only), ``patch_embed.proj``, ``rope_embed.periods``
(RoPE, no absolute table), flat ``blocks.N`` with LayerScale and a ``LinearKMaskedBias`` qkv (its stored
``bias_mask`` zeroes the k third of the bias; the mask is applied here, at load, which is the same product the
layer computes at run time), an MLP of ``fc1``/``fc2`` or a SwiGLU ``w1``/``w2``/``w3`` (S+, L+, H+), ``norm``,
and ``cls_norm`` where the norms are untied. The SAT-493M ViT-L also stores ``local_cls_norm``, used only in
training. The head count is not recorded; the published width's is assumed (H+ has 20 heads) and checked
against the length of ``periods`` (head width / 4).
"""
from typing import Any, Dict, Optional, Set, Tuple

import torch

from ..config import SimpleViTConfig
from ..dino_models import DINOV3, DINOV3_HEADS
from .fills import Misfit
from .preprocessing import imagenet_preprocessing
from .source import Rule, SourceCheckpoint, renamed

__all__ = ['DINOV3_HEADS', 'Dinov3Checkpoint', 'is_dinov3']

_PERIODS = 'rope_embed.periods'
_STORAGE = 'storage_tokens'
_SKIPPED = ('mask_token', 'local_cls_norm.weight', 'local_cls_norm.bias')
# Our SwiGLU (timm's SwiGLU) -> DINOv3's SwiGLUFFN: silu(w1 x) * w2 x, then w3.
_SWIGLU = {'mlp.fc1_g.': 'mlp.w1.', 'mlp.fc1_x.': 'mlp.w2.', 'mlp.fc2.': 'mlp.w3.'}


def is_dinov3(names: Set[str]) -> bool:
    """Whether a bare state dict has DINOv3's layout (RoPE periods, storage tokens or a masked k bias)."""
    return 'patch_embed.proj.weight' in names and _PERIODS in names and 'blocks.0.ls1.gamma' in names


def masked_bias(dst: torch.Tensor, bias: torch.Tensor, mask: torch.Tensor) -> None:
    """``LinearKMaskedBias``: the stored bias times its stored ``bias_mask`` (the k third zeroed)."""
    if tuple(bias.shape) != tuple(dst.shape) or tuple(mask.shape) != tuple(dst.shape):
        raise Misfit('shape does not fit', bias.shape if tuple(bias.shape) != tuple(dst.shape) else mask.shape,
                     dst.shape)
    dst.copy_(bias * mask.to(bias.dtype))


class Dinov3Checkpoint(SourceCheckpoint):
    format = 'dinov3'
    SKIPPED = _SKIPPED
    PREPROCESSING_DEFAULTS = imagenet_preprocessing(
        1.0, "not recorded by the checkpoint; DINOv3's ImageNet preprocessing")

    def _rule(self, pattern: str, block: Optional[int]) -> Tuple[Rule, Optional[int]]:
        key = pattern.replace('{i}', str(block))
        if key == 'reg_token':
            return Rule((_STORAGE,)), None
        if key == 'rope.periods':
            return Rule((_PERIODS,)), None
        if key.endswith('attn.qkv.bias'):
            return Rule((key, key + '_mask'), masked_bias), None
        if self.config.block.mlp == 'swiglu':
            key = renamed(key, _SWIGLU)
        return Rule((key,)), None

    def _infer(self, hints: Dict[str, Any]) -> SimpleViTConfig:
        names = set(self._store.names())
        dim, in_chans, patch_h, patch_w = self._conv_patch_kernel()
        if 'pos_embed' in names:
            raise self._error('a DINOv3 backbone has no absolute position table', key='pos_embed')
        depth = self._depth(names)
        swiglu = 'blocks.0.mlp.w1.weight' in names
        mlp_key = 'blocks.0.mlp.w1.weight' if swiglu else 'blocks.0.mlp.fc1.weight'
        mlp_dim = self._shape(mlp_key)[0]
        self._check_dims(mlp_key, mlp=mlp_dim)
        reg_tokens = self._token_count(_STORAGE, dim, 'storage tokens')
        heads = self._heads(dim, hints)
        self._check_periods(dim // heads)
        qkv_bias = 'blocks.0.attn.qkv.bias' in names
        if qkv_bias:
            self._check_bias_masks(depth)
        untied = 'cls_norm.weight' in names
        img_size = self._unrecorded('img_size', hints, DINOV3['img_size'],
                                    "a RoPE backbone records no grid; the hub's img_size")
        eps = self._unrecorded('norm_eps', hints, DINOV3['norm_eps'],
                               "DINOv3's hub models ('layernormbf16': LayerNorm eps 1e-5)")
        skipped = [n for n in _SKIPPED if n in names]
        self.notes.append(
            f'detected a DINOv3 backbone ({"SwiGLU, " if swiglu else ""}{reg_tokens} storage tokens as registers'
            f'{", untied CLS/patch norms" if untied else ""}): RoPE (base {DINOV3["rope_theta"]:g}, per-side '
            'coordinates, half-split) '
            f'from the stored {self._store.dtype(_PERIODS)} periods; the k third of the qkv bias zeroed by its '
            f'bias_mask at load; {", ".join(skipped) or "nothing"} stored for training and skipped')
        return SimpleViTConfig.of(**dict(
            DINOV3, img_size=img_size, patch_size=(patch_h, patch_w), in_chans=in_chans, embed_dim=dim, depth=depth,
            num_heads=heads, mlp_dim=mlp_dim, mlp_layer='swiglu' if swiglu else 'mlp', qkv_bias=qkv_bias,
            reg_tokens=reg_tokens, untie_cls_and_patch_norms=untied,
            act_layer=hints.get('act_layer') or ('silu' if swiglu else DINOV3['act_layer']), norm_eps=eps))

    def _check_periods(self, head_dim: int) -> None:
        shape = self._shape(_PERIODS)
        if shape != (head_dim // 4,):
            raise self._error(f'RoPE periods must be (head width / 4,) = ({head_dim // 4},) for {head_dim}-wide heads; '
                              f'got {shape} (a wrong head count, or not a DINOv3 RoPE)', key=_PERIODS,
                              shapes=(shape, (head_dim // 4,)))

    def _check_bias_masks(self, depth: int) -> None:
        """Every qkv bias has a finite ``bias_mask`` (DINOv3 fills it with NaN until ``init_weights``)."""
        for i in range(depth):
            key = f'blocks.{i}.attn.qkv.bias_mask'
            if key not in self._store:
                raise self._error("missing key: DINOv3's masked k bias (mask_k_bias) needs the stored bias_mask",
                                  key=key)
            if not self._store.is_float(key) or not bool(torch.isfinite(self._store.tensor(key)).all()):
                raise self._error('bias_mask is not finite (NaN: the mask was never initialised), so the k bias it '
                                  'masks is undefined', key=key)

    def _heads(self, dim: int, hints: Dict[str, Any]) -> int:
        """The caller's head count, else the DINOv3 hub model's of this width."""
        return self._head_count(dim, hints, [(DINOV3_HEADS.get(dim), f'the DINOv3 hub model of width {dim}')],
                                f'a DINOv3 checkpoint does not record the number of attention heads, and width {dim} '
                                f"is none of the hub models' ({sorted(DINOV3_HEADS)}); give the head count")
