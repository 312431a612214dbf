"""GIT's image tower (Wang et al. 2022, *GIT: A Generative Image-to-text Transformer*, microsoft/GenerativeImage2Text):
transformers' ``GitVisionModel`` folders (model_type ``git_vision_model``) and the image encoder of its captioning
folders (``GitModel``, ``GitForCausalLM``; model_type ``git``: the published ``microsoft/git-*`` repos), under
``image_encoder.`` (``git.image_encoder.`` in the latter).

The tower is CLIP's vision layout (transformers copies CLIP's embeddings, encoder and table resize), with one
difference: ``post_layernorm`` normalises every token (our final norm; CLIP's normalises the pooled [CLS] only), and
there is no pooler: the tower's output is the normed tokens. The pooled output here is the first of them, the
[CLS] (token pooling). The captioning model's ``visual_projection`` (into the text decoder's width), text embeddings
and decoder are not part of the image tower and are left out, with one note.
"""
from typing import Any, Dict, Optional

from ..checkpoints.hf_clip import HFClipCheckpoint
from ..checkpoints.routes import Route
from ..clip_models import CLIP_TOWER
from ..config import SimpleViTConfig
from ..errors import ViTVariantsError
from .registry import Family

__all__ = ['GIT_MODEL_TYPES', 'GitVisionCheckpoint', 'FAMILY']

# The vision model alone, and the captioning model holding it (its vision_config).
GIT_MODEL_TYPES = ('git_vision_model', 'git')
_TOWER = 'vision_model.'  # the tower's own prefix (under 'image_encoder.' in GitModel, 'git.image_encoder.' above it)
_KERNEL = 'embeddings.patch_embedding.weight'
# CLIP's rules, the post-norm read as the final norm on every token instead of the pooled [CLS]'s fc_norm.
_RULES = {('norm.' + k.split('.', 1)[1] if k.startswith('fc_norm.') else k): rule
          for k, rule in HFClipCheckpoint.RULES.items() if k != 'head.weight'}


class GitVisionCheckpoint(HFClipCheckpoint):
    """A transformers GIT folder, read as its image tower: CLIP's layout, every token normed, no head."""
    format = 'git'
    RULES = _RULES
    TENSOR_RULES = ()

    @property
    def _two_tower(self) -> bool:
        return self.source_config.get('model_type') == 'git'

    @property
    def CLASSES(self) -> Dict[str, Optional[str]]:  # type: ignore[override]
        if self._two_tower:
            return {'GitModel': None, 'GitForCausalLM': None}
        return {'GitVisionModel': None}

    def _infer(self) -> SimpleViTConfig:
        if self._config_path is None:
            raise ViTVariantsError('a transformers GIT folder needs its config.json next to the weights',
                                   path=self.path, key='config.json')
        if self._two_tower and not isinstance(self.source_config.get('vision_config'), dict):
            raise ViTVariantsError("a GIT config.json needs a vision_config", path=self._config_path,
                                   key='vision_config')
        self._source_class()
        # vision_model., under image_encoder. in a GitModel and under git.image_encoder. in a GitForCausalLM
        self._vision_tower('the text decoder, its embeddings and the visual projection into it',
                           locate=lambda: self._tower_prefix(_KERNEL, _TOWER))
        network = self._tower_network()
        self.notes.append(f"detected: a transformers GIT image tower (model_type {self.source_config['model_type']!r}): "
                          "every token normed, no pooler (pooled output: the normed [CLS]); hidden_act "
                          f"{self._settings.get('hidden_act', 'gelu')!r}; the table is resized as transformers' "
                          'interpolate_pos_encoding does (bicubic, no antialias)')
        args: Dict[str, Any] = dict(CLIP_TOWER, **network, num_classes=0, global_pool='token',
                                    pos_embed_resample='hf', pre_norm=True, final_norm=True, fc_norm=False)
        return SimpleViTConfig.of(**args)


FAMILY = Family(
    name='git',
    # before the refusal of other transformers model types (2000)
    routes=(Route(1960., lambda p: p.model_type in GIT_MODEL_TYPES, GitVisionCheckpoint),),
)
