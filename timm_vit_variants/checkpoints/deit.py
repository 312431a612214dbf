"""DeiT-III checkpoints (facebookresearch/deit ``models_v2.py``, ``deit_3_{size}_{img}_{1k,21k}.pth``), saved as
``{'model': ...}``.

``vit_models`` with ``Layer_scale_init_Block``: LayerScale as ``gamma_1``/``gamma_2``, qkv bias, LayerNorm eps 1e-6,
exact GELU; a learned table (1, N, D) with no [CLS] slot, added before [CLS] is concatenated; [CLS] pooling after
the final norm, a classifier ``head``. DeiT's ``main.py`` resizes the table bicubic without antialias, square grids
only (our 'deit' rule). The files do not record the head count: DeiT-III's own of the width is assumed.

A DeiT-III file has exactly the keys of a RoPE-ViT ``rope_axial_ape`` one (RoPE-ViT is built on these blocks and
stores no tensor for axial RoPE), so the family is decided from the evidence there is: the file's name or its Hub
id, else ``--from`` (``layerscale_blocks.py``, which both readers sit on).
"""
from ..config import SimpleViTConfig
from ..deit_models import DEIT3
from .layerscale_blocks import LayerScaleBlocks, record_family
from .preprocessing import imagenet_preprocessing

__all__ = ['Deit3Checkpoint']

# DeiT-III's widths and head counts (models_v2.py: tiny ... Giant).
_HEADS = {192: 3, 384: 6, 512: 8, 768: 12, 1024: 16, 1280: 16, 1408: 16, 1664: 16}


class Deit3Checkpoint(LayerScaleBlocks):
    """A DeiT-III ``models_v2`` file."""
    format = 'deit3'
    PREPROCESSING_DEFAULTS = imagenet_preprocessing(
        1.0, "not recorded by the checkpoint; DeiT-III's eval preprocessing (--eval-crop-ratio 1.0, bicubic)")

    def _infer(self) -> SimpleViTConfig:
        names, (dim, in_chans, patch_h, patch_w, depth, mlp_dim, num_classes) = self._block_dims()
        heads = self._head_count(dim, [(_HEADS.get(dim), f"DeiT-III's own of width {dim}")],
                                 'a DeiT-III checkpoint does not record the number of attention heads, and width '
                                 f"{dim} is none of DeiT-III's; give the head count")
        self._check_token_table('pos_embed', dim, (patch_h, patch_w), class_token=True, slot=False,
                                img_size=self.options.img_size)
        record_family(self)
        self.notes.append('detected a DeiT-III model (models_v2 vit_models, LayerScale gamma_1/gamma_2, a table with '
                          "no [CLS] slot: resize rule 'deit', DeiT's main.py bicubic without antialias)")
        return SimpleViTConfig(**dict(
            DEIT3, img_size=(self.grid[0] * patch_h, self.grid[1] * patch_w), patch_size=(patch_h, patch_w),
            in_chans=in_chans, num_classes=num_classes, embed_dim=dim, depth=depth, num_heads=heads, mlp_dim=mlp_dim,
            qkv_bias='blocks.0.attn.qkv.bias' in names, act_layer=self.options.act_layer or DEIT3['act_layer'],
            norm_eps=self.options.norm_eps or DEIT3['norm_eps'],
            head_bias='head.bias' in names or 'head.weight' not in names))
