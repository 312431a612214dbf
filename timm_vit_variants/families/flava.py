"""FLAVA's image tower (Singh et al. 2022, *FLAVA: A Foundational Language And Vision Alignment Model*):
transformers' ``FlavaImageModel`` folders (model_type ``flava_image_model``) and the image model of ``FlavaModel``
folders (model_type ``flava``, under ``image_model.``, its settings in ``image_config``).

The tower is ViT's layout under ViT's names (transformers copies ViT's embeddings, layers and table resize), read by
the ViT rules: the final ``layernorm`` on every token, and the pooler (Linear + tanh on the normed [CLS]) as our
``pre_logits``. Two differences from a ViT folder: the embeddings hold a ``mask_token`` that only masked-image
pretraining uses (``bool_masked_pos``; the image features never do), skipped with a note; and ``FlavaModel``'s
``image_projection`` (applied to every token), text and multimodal models are not the image model's output and are
left out with one note.
"""
from typing import Any, Dict, Set

from ..checkpoints.hf import HFCheckpoint
from ..checkpoints.preprocessing import assumed_preprocessing
from ..checkpoints.routes import Route
from ..clip_models import OPENAI_MEAN, OPENAI_STD
from ..config import SimpleViTConfig
from .registry import Family

__all__ = ['FLAVA_MODEL_TYPES', 'FlavaImageCheckpoint', 'FAMILY']

# model_type -> (the image model's prefix, whether it has a [CLS], {class: None}), as ``hf.VIT_MODEL_TYPES``
FLAVA_MODEL_TYPES = {
    'flava_image_model': ('', True, {'FlavaImageModel': None}),
    'flava': ('image_model.', True, {'FlavaModel': None}),
}
_MASK_TOKEN = 'embeddings.mask_token'


class FlavaImageCheckpoint(HFCheckpoint):
    """A transformers FLAVA folder, read as its image model: ViT's layout, its unused mask token skipped."""
    MODEL_TYPES = FLAVA_MODEL_TYPES
    UNSUPPORTED: Dict[str, str] = {}
    PREPROCESSING_DEFAULTS = assumed_preprocessing(
        'bicubic', 1.0, 'center', "not recorded by the folder; transformers' FlavaImageProcessor defaults "
        '(a 224x224 resize, OpenAI CLIP mean and std)', mean=OPENAI_MEAN, std=OPENAI_STD)

    @property
    def _settings(self) -> Dict[str, Any]:
        """``FlavaModel``'s ``image_config`` (its top level holds the multimodal model's settings)."""
        if self.source_config.get('model_type') == 'flava':
            nested = self.source_config.get('image_config')
            return nested if isinstance(nested, dict) else {}
        return self.source_config

    def _candidates(self) -> Set[str]:
        return {n for n in self._store.names() if n.startswith(self._prefix)} - {self._prefix + _MASK_TOKEN}

    def _infer(self) -> SimpleViTConfig:
        config = super()._infer()
        others = [n for n in self._store.names() if not n.startswith(self._prefix)]
        if others:
            self.notes.append(f'read the image model under {self._prefix!r}; skipped {len(others)} other tensors (the '
                              'image and text projections, the text and multimodal models, logit_scale), which the '
                              'image model does not use')
        if self._prefix + _MASK_TOKEN in self._store:
            self.notes.append(f'skipped {self._prefix}{_MASK_TOKEN}: only masked-image pretraining (bool_masked_pos) '
                              'uses it')
        self.notes.append(f"detected: a transformers FLAVA image model (model_type "
                          f"{self.source_config['model_type']!r}): ViT's layout, its pooler (tanh) as pre_logits; the "
                          "table is resized as transformers' interpolate_pos_encoding does (bicubic, no antialias)")
        return config


FAMILY = Family(
    name='flava',
    # before the refusal of other transformers model types (2000)
    routes=(Route(1655., lambda p: p.model_type in FLAVA_MODEL_TYPES, FlavaImageCheckpoint),),
)
