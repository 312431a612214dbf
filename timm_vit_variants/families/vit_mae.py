"""MAE's encoder (He et al. 2021, *Masked Autoencoders Are Scalable Vision Learners*): transformers' ``ViTMAEModel``
folders and the encoder of ``ViTMAEForPreTraining`` folders (model_type ``vit_mae``: the published
``facebook/vit-mae-*`` repos, under ``vit.``; the decoder is left out with one note).

The encoder is saved under ViT's names and read with ViT's rules: a [CLS] token, MAE's fixed 2D sin-cos table with a
[CLS] row stored as a (frozen) parameter, read as the table it is, the final LayerNorm on every token and no pooler.
Its forward shuffles and masks the patch tokens by random noise; with nothing masked and the identity order (what
the reference runs, ``porting/families/_vit_mae_ref.py``) it is a plain ViT, which is what this model computes. The
pooled output is the normed [CLS]. The table is resized as transformers' ``interpolate_pos_encoding`` does (rule
``hf``).
"""
from typing import Set

from ..checkpoints.hf import HFCheckpoint
from ..checkpoints.routes import Route
from .registry import Family

__all__ = ['VIT_MAE_MODEL_TYPES', 'ViTMAECheckpoint', 'FAMILY']

# model_type -> (the encoder's prefix in the pre-training model, a [CLS] token, the classes read)
VIT_MAE_MODEL_TYPES = {'vit_mae': ('vit.', True, {'ViTMAEModel': None, 'ViTMAEForPreTraining': None})}
_DECODER = 'decoder.'


class ViTMAECheckpoint(HFCheckpoint):
    """A transformers ViTMAE folder, read as its encoder."""
    format = 'vit_mae'
    MODEL_TYPES = VIT_MAE_MODEL_TYPES

    def _candidates(self) -> Set[str]:
        names = super()._candidates()
        decoder = {n for n in names if n.startswith(_DECODER)}
        if decoder:
            self.notes.append(f'read the encoder under {self._prefix!r}; skipped the {len(decoder)} tensors of the '
                              'pre-training decoder, which the image model does not use')
        return names - decoder


FAMILY = Family(
    name='vit_mae',
    # before the refusal of other transformers model types (2000)
    routes=(Route(1970., lambda p: p.model_type in VIT_MAE_MODEL_TYPES, ViTMAECheckpoint),),
)
