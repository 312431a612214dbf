"""naver RoPE-ViT checkpoints (``rope_{axial,mixed}[_ape]_deit_{small,base,large}_patch16_LS``): ``{'model': ...}``.

DeiT-III blocks (``models_v2.Layer_scale_init_Block``: LayerScale as ``gamma_1``/``gamma_2``, qkv bias, LayerNorm eps
1e-6, exact GELU), a [CLS] token, a classifier ``head``, and 2D RoPE in every attention on tokens ``1:``:
axial (theta 100, no tensor stored) or mixed (theta 10, learned ``freqs`` (2, depth, heads * hd / 2), which become
timm's ``rope.freqs`` (2, depth, heads, hd / 2); the stored ``freqs_t_x``/``freqs_t_y`` are the training grid's
coordinates, recomputed here for each image's own grid). The ``_ape`` models add a learned table with no [CLS]
slot, resized bicubic without antialias (our 'ropevit' rule).

An axial ``_ape`` file has the keys of a plain DeiT-III one; ``layerscale_blocks.family_evidence`` tells them apart
by name, and the choice is named among the facts not read from the file.

The original recomputes its grid only when the token count changes, so an input with the stored count and
another shape (4x9 for a 6x6 model) reuses the stored grid there; this reader's model always uses each image's
own grid. The files do not record the head count: the standard ViT width's is assumed (384: 6, 768: 12,
1024: 16), ``num_heads`` gives any other.
"""
from typing import Any, Set

import torch

from ..config import SimpleViTConfig
from ..model_table import heads_for_width
from ..dino_models import ROPEVIT, ROPEVIT_KINDS
from .fills import Misfit
from .layerscale_blocks import LayerScaleBlocks, is_layerscale_ape, record_family
from .preprocessing import imagenet_preprocessing
from .tensor_rules import named

__all__ = ['RopeVitCheckpoint', 'is_rope_vit']

_FREQS = 'freqs'
_TIMM_FREQS = 'rope.freqs'  # timm's Eva port of the mixed models: (2, depth, heads, hd / 2)
_GRID = ('freqs_t_x', 'freqs_t_y')
_APE_NOTE = ", a table with no [CLS] slot: resize rule 'ropevit' (bicubic, no antialias)"


def is_rope_vit(names: Set[str]) -> bool:
    """Whether a state dict has RoPE-ViT's layout: DeiT-III blocks (LayerScale as ``gamma_1``) and a patch conv.

    A plain DeiT-III file (no RoPE) has the keys of an axial ``_ape`` one (``layerscale_blocks.is_layerscale_ape``): which of the
    two it is, the detection decides from its name.
    """
    return 'blocks.0.gamma_1' in names and 'patch_embed.proj.weight' in names


def mixed_freqs(dst: torch.Tensor, freqs: torch.Tensor) -> None:
    """RoPE-ViT's (2, depth, heads * hd / 2) learned frequencies as timm's (2, depth, heads, hd / 2)."""
    want = (dst.shape[0], dst.shape[1], dst.shape[2] * dst.shape[3])
    if tuple(freqs.shape) != want:
        raise Misfit('RoPE-ViT mixed freqs must be (2, depth, heads * head_width / 2)', freqs.shape, want)
    dst.copy_(freqs.reshape(dst.shape))


class RopeVitCheckpoint(LayerScaleBlocks):
    format = 'ropevit'
    SKIPPED = _GRID
    PREPROCESSING_DEFAULTS = imagenet_preprocessing(
        1.0, "not recorded by the checkpoint; RoPE-ViT's DeiT-III ImageNet preprocessing")

    # naver's freqs, else a timm state dict's rope.freqs (already timm's layout: the default rule)
    TENSOR_RULES = (named({'rope.freqs': _FREQS}, mixed_freqs, when=lambda r: _FREQS in r._store),
                    *LayerScaleBlocks.TENSOR_RULES)

    def _infer(self) -> SimpleViTConfig:
        names, (dim, in_chans, patch_h, patch_w, depth, mlp_dim, num_classes) = self._block_dims()
        heads = self._heads(dim)
        mixed = _FREQS in names or _TIMM_FREQS in names
        if _FREQS in names:
            shape, want = self._shape(_FREQS), (2, depth, dim // 2)
            if shape != want:
                raise self._error('RoPE-ViT mixed freqs must be (2, depth, width / 2)', key=_FREQS,
                                  shapes=(shape, want))
        ape = 'pos_embed' in names
        if ape:
            self._check_token_table('pos_embed', dim, (patch_h, patch_w), class_token=True, slot=False,
                                    img_size=self.options.img_size)
            img_size: Any = (self.grid[0] * patch_h, self.grid[1] * patch_w)
        else:
            img_size = self._unrecorded('img_size', self.options.img_size, ROPEVIT['img_size'], 'a RoPE model without '
                                        'a table '
                                        "records no grid; RoPE-ViT's training size")
        kind = 'mixed' if mixed else 'axial'
        if is_layerscale_ape(names):
            record_family(self)
        self.notes.append(
            f'detected a RoPE-ViT {kind}{" + APE" if ape else ""} model (DeiT-III LayerScale gamma_1/gamma_2'
            f'{_APE_NOTE if ape else ""}'
            f'); RoPE from each image\'s own grid, where the original reuses its cached grid for an input with the '
            f'stored token count and another shape' + (f'; {"/".join(_GRID)} skipped' if mixed else ''))
        return SimpleViTConfig.of(**dict(
            ROPEVIT, **ROPEVIT_KINDS[kind + ('_ape' if ape else '')], img_size=img_size, patch_size=(patch_h, patch_w),
            in_chans=in_chans, num_classes=num_classes, embed_dim=dim, depth=depth, num_heads=heads, mlp_dim=mlp_dim,
            qkv_bias='blocks.0.attn.qkv.bias' in names, act_layer=self.options.act_layer or ROPEVIT['act_layer'],
            norm_eps=self.options.norm_eps or ROPEVIT['norm_eps'],
            head_bias='head.bias' in names or 'head.weight' not in names))

    def _heads(self, dim: int) -> int:
        """The caller's head count, else the standard ViT's of this width (RoPE-ViT's are DeiT S/B/L)."""
        return self._head_count(dim, [(heads_for_width(dim), f'the standard ViT of width {dim}')],
                                f'a RoPE-ViT checkpoint does not record the number of attention heads, and width {dim} '
                                'is not a standard ViT width; give the head count')
