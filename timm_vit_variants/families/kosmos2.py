"""Kosmos-2's image tower (Peng et al. 2023, *Kosmos-2: Grounding Multimodal Large Language Models to the World*):
transformers' ``Kosmos2Model`` and ``Kosmos2ForConditionalGeneration`` folders (model_type ``kosmos-2``), whose
``vision_model`` (a ``Kosmos2VisionModel``, which transformers does not export alone) holds the tower under
``vision_model.model.``.

The tower is CLIP's vision layout unchanged (transformers copies CLIP's embeddings, encoder and table resize):
``last_hidden_state`` is not normalised, ``pooler_output`` is the [CLS] through ``post_layernorm`` (our ``fc_norm``).
That is what the folder converts to: the vision model's output. The ``image_to_text_projection`` (learned latent
queries cross-attending to the tokens, into the text model's width) and the text model feed the language model, not
the image features, and are left out with one note.
"""
from typing import Any, Dict, Optional

from ..checkpoints.hf_clip import HFClipCheckpoint
from ..checkpoints.routes import Route
from ..clip_models import CLIP_TOWER
from ..config import SimpleViTConfig
from ..errors import ViTVariantsError
from .registry import Family

__all__ = ['KOSMOS2_MODEL_TYPE', 'Kosmos2VisionCheckpoint', 'FAMILY']

KOSMOS2_MODEL_TYPE = 'kosmos-2'
_PREFIX = 'vision_model.model.'  # the Kosmos2VisionModel's transformer, in both classes


class Kosmos2VisionCheckpoint(HFClipCheckpoint):
    """A transformers Kosmos-2 folder, read as its image tower: CLIP's layout, the pooled [CLS] normed, no head."""
    format = 'kosmos2'
    RULES = {k: rule for k, rule in HFClipCheckpoint.RULES.items() if k != 'head.weight'}
    TENSOR_RULES = ()

    @property
    def _two_tower(self) -> bool:
        return True

    @property
    def CLASSES(self) -> Dict[str, Optional[str]]:  # type: ignore[override]
        return {'Kosmos2Model': None, 'Kosmos2ForConditionalGeneration': None}

    def _infer(self) -> SimpleViTConfig:
        if self._config_path is None:
            raise ViTVariantsError('a transformers Kosmos-2 folder needs its config.json next to the weights',
                                   path=self.path, key='config.json')
        if not isinstance(self.source_config.get('vision_config'), dict):
            raise ViTVariantsError('a Kosmos-2 config.json needs a vision_config', path=self._config_path,
                                   key='vision_config')
        self._source_class()
        self._vision_tower('the image-to-text projection and the text model', locate=lambda: _PREFIX)
        network = self._tower_network()
        self.notes.append("detected: a transformers Kosmos-2 image tower (model_type 'kosmos-2'): CLIP's layout, "
                          "the output is its vision model's (tokens not normed, pooled: the [CLS] through "
                          f"post_layernorm); hidden_act {self._settings.get('hidden_act', 'quick_gelu')!r}; the "
                          "table is resized as transformers' interpolate_pos_encoding does (bicubic, no antialias)")
        args: Dict[str, Any] = dict(CLIP_TOWER, **network, num_classes=0, global_pool='token',
                                    pos_embed_resample='hf', pre_norm=True, fc_norm=True)
        return SimpleViTConfig.of(**args)


FAMILY = Family(
    name='kosmos2',
    # before the refusal of other transformers model types (2000)
    routes=(Route(1961., lambda p: p.model_type == KOSMOS2_MODEL_TYPE, Kosmos2VisionCheckpoint),),
)
