"""I-JEPA (Assran et al. 2023, facebookresearch/ijepa): a plain pre-norm ViT with no [CLS], a fixed 2-D sin-cos table
stored as a parameter (no cls slot), exact GELU, LayerNorm (eps 1e-6) on every token after the last block, and the
mean of those tokens as the image's embedding.

Two sources:
- facebookresearch/ijepa's training checkpoints (``IN1K-vit.h.14-300e.pth.tar``, ...): the dict ``src/train.py``
  saves, ``encoder`` (the context encoder), ``target_encoder`` (its EMA), ``predictor``, ``opt``, ``epoch``, ...,
  each network's keys under ``module.`` (DistributedDataParallel). The encoders' keys are timm's
  ``VisionTransformer`` ones, so ``IJepaCheckpoint`` reads them with the timm rules; it only needs the store to
  unwrap the entry (EMA-or-not: ``target_encoder``, else ``encoder``) and knows the release's facts (heads of its
  widths, ImageNet preprocessing). The table is resized as timm resizes it when it loads these files
  (``vit_*_gap_*.in*_ijepa``: ``checkpoint_filter_fn``, ``resample_abs_pos_embed``, bicubic with antialias): the
  source's own ``interpolate_pos_encoding`` assumes a [CLS] row and cannot run at another grid.
- transformers' ``IJepaModel`` / ``IJepaForImageClassification`` folders (model_type ``ijepa``): ViT's layout under
  ``ijepa.``; ``IJepaFolderCheckpoint`` reads them, the table resized as transformers' ``interpolate_pos_encoding``
  does (``'hf'``: bicubic, no antialias).
"""
from typing import Any, Dict, Optional, Sequence, Tuple

from ..checkpoints.hf import HFCheckpoint
from ..checkpoints.preprocessing import imagenet_preprocessing
from ..checkpoints.routes import Route
from ..checkpoints.timm_format import TimmCheckpoint
from ..config import SimpleViTConfig
from ..model_table import ModelEntry
from .registry import Family

__all__ = ['IJEPA', 'IJEPA_ROWS', 'IJEPA_CFGS', 'IJEPA_ENTRIES', 'IJEPA_HEADS', 'IJEPA_CLASSES', 'IJepaCheckpoint',
           'IJepaFolderCheckpoint', 'is_ijepa_checkpoint', 'FAMILY']

# -- rows and tags ----------------------------------------------------------------------------------------------------
# What every I-JEPA row shares (src/models/vision_transformer.py): no [CLS], a table without a cls slot, exact GELU,
# LayerNorm eps 1e-6, the final norm on every token and their mean (no fc_norm), a stride-p patch conv (it drops the
# pixels the patch does not divide); the table resized as timm resizes these files (the source cannot resize it).
IJEPA = dict(num_classes=0, global_pool='avg', class_token=False, pos_embed='learn', pos_embed_cls_slot=False,
             pos_embed_resample='timm', fc_norm=False, final_norm=True, act_layer='gelu', norm_eps=1e-6,
             grid_mode='crop')
_GIANT = dict(embed_dim=1408, depth=40, num_heads=16, mlp_dim=6144)  # vit_giant: mlp_ratio 48/11
# row name -> (VARIANTS row, patch, image size, dims beyond the variant's, {tag: release file}); README.md's table
_RELEASES = {
    'simple_vit_huge_patch14_ijepa_224': ('huge', 14, 224, {}, {'fb_in1k': 'IN1K-vit.h.14-300e',
                                                                'fb_in22k': 'IN22K-vit.h.14-900e'}),
    'simple_vit_huge_patch16_ijepa_448': ('huge', 16, 448, {}, {'fb_in1k': 'IN1K-vit.h.16-448px-300e'}),
    'simple_vit_giant_patch16_ijepa_224': ('huge', 16, 224, _GIANT, {'fb_in22k': 'IN22K-vit.g.16-600e'}),
}
_URL = 'https://dl.fbaipublicfiles.com/ijepa/{}.pth.tar'
_PAPER = ('arXiv:2301.08243', 'Self-Supervised Learning from Images with a Joint-Embedding Predictive Architecture')
_IMAGENET = dict(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))

# name -> (variant, arguments, description)
IJEPA_ROWS: Dict[str, Tuple[str, Dict[str, Any], str]] = {
    name: (variant, dict(IJEPA, patch_size=patch, img_size=img, **dims),
           f'I-JEPA ViT-{"g" if dims else "H"}/{patch} at {img}px (facebookresearch/ijepa): no [CLS], its fixed sin-cos '
           'table stored without a cls slot, the mean of the normed tokens; no classifier.')
    for name, (variant, patch, img, dims, _) in _RELEASES.items()}

# The published full training checkpoints, read by our reader (``custom_load``): the target encoder, unless EMA
# weights are declined. Preprocessing: I-JEPA's ImageNet normalisation; bicubic, crop as timm's *_ijepa tags.
IJEPA_CFGS: Dict[str, Dict[str, Any]] = {
    f'{name}.{tag}': dict(
        url=_URL.format(file), custom_load=True, num_classes=0, input_size=(3, img, img), pool_size=None,
        crop_pct=1.0 if img == 448 else 0.9, crop_mode='center', interpolation='bicubic', fixed_input_size=False,
        first_conv='patch_embed.proj', classifier='head', license='cc-by-nc-4.0',
        origin_url='https://github.com/facebookresearch/ijepa', paper_ids=_PAPER[0], paper_name=_PAPER[1], **_IMAGENET)
    for name, (_, _, img, _, files) in _RELEASES.items() for tag, file in files.items()}

# The entries of a facebookresearch/ijepa training checkpoint that hold an encoder, in the store's EMA-first order:
# the target encoder (the EMA of the context encoder), then the context encoder (timm's and transformers' converters
# read this one).
IJEPA_ENTRIES = ('target_encoder', 'encoder')
# Heads of the released widths (src/models/vision_transformer.py: vit_huge, vit_giant), which the file does not record.
IJEPA_HEADS = {1280: 16, 1408: 16}
# transformers' I-JEPA classes, each read as what it outputs (its optional pooler is refused by the ViT rules).
IJEPA_CLASSES: Dict[str, Optional[str]] = {'IJepaModel': None, 'IJepaForImageClassification': None}


def is_ijepa_checkpoint(store: Any) -> bool:
    """Whether a store holds one of an I-JEPA training checkpoint's encoders (the entry it was read from)."""
    return store.wrapped_in() in IJEPA_ENTRIES


class IJepaCheckpoint(TimmCheckpoint):
    """An encoder of a facebookresearch/ijepa ``.pth.tar`` (its keys are timm's, ``module.`` stripped by the store)."""
    format = 'ijepa'
    ALWAYS_CROPS = True  # a stride-p conv: the pixels the patch does not divide are dropped
    KIND = 'I-JEPA VisionTransformer'
    # I-JEPA normalises with ImageNet's mean and std (src/transforms.py); timm's *_ijepa cfgs: bicubic, crop 0.9
    PREPROCESSING_DEFAULTS = imagenet_preprocessing(
        0.9, "not recorded by the checkpoint; I-JEPA's ImageNet normalisation, timm's vit_*_gap_*_ijepa eval crop")

    def _infer(self) -> SimpleViTConfig:
        entry = self._store.wrapped_in()
        if entry not in IJEPA_ENTRIES:
            raise self._error('not a facebookresearch/ijepa training checkpoint: no encoder entry '
                              f'({" or ".join(IJEPA_ENTRIES)}) was read from it', key=IJEPA_ENTRIES[0])
        config = super()._infer()
        other = next(e for e in IJEPA_ENTRIES if e != entry)
        self.notes.append(f'read the I-JEPA checkpoint\'s {entry!r} entry ('
                          f'{"the EMA target encoder" if entry == "target_encoder" else "the context encoder"}); '
                          f'its {other!r}, predictor and optimiser state are not read')
        return config

    def _heads(self, dim: int, facts: Dict[str, Any], assumed: Sequence[Tuple[Optional[int], str]] = ()) -> int:
        """timm's one policy, a released width's count (``IJEPA_HEADS``) first among what it may assume."""
        return super()._heads(dim, facts, [(IJEPA_HEADS.get(dim), f'the I-JEPA release of width {dim}'), *assumed])


class IJepaFolderCheckpoint(HFCheckpoint):
    """A transformers I-JEPA folder (``IJepaModel``, ``IJepaForImageClassification``; model_type ``ijepa``)."""
    @property
    def CLASSES(self) -> Dict[str, Optional[str]]:  # type: ignore[override]
        return IJEPA_CLASSES


FAMILY = Family(
    'ijepa',
    rows={name: ModelEntry(variant, args, doc) for name, (variant, args, doc) in IJEPA_ROWS.items()},
    cfgs=IJEPA_CFGS,
    # transformers' ijepa folders before the generic transformers ViT row (1700); a .pth.tar's encoder entry before
    # the bare-state-dict rows (open_clip's timm trunk at 2100 onward)
    routes=(Route(1650., lambda p: p.model_type == 'ijepa', IJepaFolderCheckpoint),
            Route(2050., lambda p: is_ijepa_checkpoint(p.store), IJepaCheckpoint)),
    weight_entries=IJEPA_ENTRIES,
    ema_entries=IJEPA_ENTRIES[:1],
)
