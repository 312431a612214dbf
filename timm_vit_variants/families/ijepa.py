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
from typing import Any, Dict, Optional

from ..checkpoints.hf import HFCheckpoint
from ..checkpoints.preprocessing import imagenet_preprocessing
from ..checkpoints.timm_format import TimmCheckpoint
from ..config import SimpleViTConfig

__all__ = ['IJEPA_ENTRIES', 'IJEPA_HEADS', 'IJEPA_CLASSES', 'IJepaCheckpoint', 'IJepaFolderCheckpoint',
           'is_ijepa_checkpoint']

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
    KIND = 'I-JEPA VisionTransformer'
    # I-JEPA normalises with ImageNet's mean and std (src/transforms.py); timm's *_ijepa cfgs: bicubic, crop 0.9
    PREPROCESSING_DEFAULTS = imagenet_preprocessing(
        0.9, "not recorded by the checkpoint; I-JEPA's ImageNet normalisation, timm's vit_*_gap_*_ijepa eval crop")

    def _infer(self, hints: Dict[str, Any]) -> SimpleViTConfig:
        config = super()._infer(hints)
        entry = self._store.wrapped_in()
        other = next(e for e in IJEPA_ENTRIES if e != entry)
        self.notes.append(f'read the I-JEPA checkpoint\'s {entry!r} entry ('
                          f'{"the EMA target encoder" if entry == "target_encoder" else "the context encoder"}); '
                          f'its {other!r}, predictor and optimiser state are not read')
        return config

    def _heads(self, dim: int, facts: Dict[str, Any], hints: Dict[str, Any]) -> int:
        """A released width's head count (``IJEPA_HEADS``) when the caller gives none; else timm's policy."""
        if not hints.get('num_heads') and dim in IJEPA_HEADS:
            return self._unrecorded('num_heads', {}, IJEPA_HEADS[dim], f'the I-JEPA release of width {dim}')
        return super()._heads(dim, facts, hints)


class IJepaFolderCheckpoint(HFCheckpoint):
    """A transformers I-JEPA folder (``IJepaModel``, ``IJepaForImageClassification``; model_type ``ijepa``)."""
    @property
    def CLASSES(self) -> Dict[str, Optional[str]]:  # type: ignore[override]
        return IJEPA_CLASSES
