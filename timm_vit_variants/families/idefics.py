"""The SigLIP image towers inside Idefics2, Idefics3 and SmolVLM (HuggingFaceM4, HuggingFaceTB) as transformers
saves them: ``Idefics3VisionTransformer`` and ``SmolVLMVisionTransformer`` folders (model_type ``idefics3_vision``,
``smolvlm_vision``), and the tower of the full models (``Idefics2Model``, ``Idefics3Model``, ``SmolVLMModel`` under
``vision_model.``; their ``*ForConditionalGeneration``, the published repos, under ``model.vision_model.``; model_type
``idefics2``, ``idefics3``, ``smolvlm``). The connector, perceiver and language model are left out, with one note.
``Idefics2VisionTransformer`` is not a class transformers exports, so its own folders (``idefics2_vision``) have no
reference and stay refused by model_type.

The tower is SigLIP's layout (``hf_siglip.py``'s rules: split q/k/v, ``post_layernorm`` as the final norm on every
token, no head, so no pooled output) with one difference: its learned table is read by bucketing each patch's
fractional coordinates into the table's grid (NaViT's packing, ``idefics_positions.py``'s 'bucketed' scheme), so the
converted model at any grid gives what the tower gives a whole image of that size with an all-true patch mask.
"""
from typing import Any, Dict, Optional, Tuple

from ..checkpoints.hf_siglip import HFSiglipCheckpoint
from ..checkpoints.preprocessing import assumed_preprocessing
from ..checkpoints.routes import Route
from ..checkpoints.source import Rule
from ..config import SimpleViTConfig
from ..errors import ViTVariantsError
from .idefics_positions import Bucketed
from .registry import Family

__all__ = ['IDEFICS_MODEL_TYPES', 'IdeficsVisionCheckpoint', 'FAMILY']

# model_type -> the transformers classes holding that tower (the first: the default when config.json names none)
IDEFICS_MODEL_TYPES: Dict[str, Tuple[str, ...]] = {
    'idefics3_vision': ('Idefics3VisionTransformer',),
    'smolvlm_vision': ('SmolVLMVisionTransformer',),
    'idefics2': ('Idefics2Model', 'Idefics2ForConditionalGeneration'),
    'idefics3': ('Idefics3Model', 'Idefics3ForConditionalGeneration'),
    'smolvlm': ('SmolVLMModel', 'SmolVLMForConditionalGeneration'),
}
_KERNEL = 'embeddings.patch_embedding.weight'
# SigLIP's rules, the table read as stored into the 'bucketed' scheme's own tensor.
_RULES: Dict[str, Rule] = {**{k: r for k, r in HFSiglipCheckpoint.RULES.items() if k != 'pos_embed'},
                           'abs_pos.table': Rule(('{p}embeddings.position_embedding.weight',))}


class IdeficsVisionCheckpoint(HFSiglipCheckpoint):
    """A transformers Idefics2 / Idefics3 / SmolVLM folder, read as its image tower (module docstring)."""
    RULES = _RULES

    @property
    def _nested(self) -> bool:
        """Whether the tower sits in a full model, its settings under ``vision_config``."""
        return not str(self.source_config.get('model_type')).endswith('_vision')

    @property
    def CLASSES(self) -> Dict[str, Optional[str]]:  # type: ignore[override]  # the folder's model_type decides
        return dict.fromkeys(IDEFICS_MODEL_TYPES.get(self.source_config.get('model_type'), ()))

    @property
    def _settings(self) -> Dict[str, Any]:
        nested = self.source_config.get('vision_config')
        return nested if self._nested and isinstance(nested, dict) else self.source_config

    def _preprocessing_defaults(self) -> Dict[str, Tuple[Any, str]]:
        # Idefics2ImageProcessor resizes bilinearly, Idefics3's and SmolVLM's with Lanczos; all to [-1, 1]
        family = {'idefics2': 'Idefics2', 'smolvlm': 'SmolVLM', 'smolvlm_vision': 'SmolVLM'}.get(
            self.source_config.get('model_type'), 'Idefics3')
        return assumed_preprocessing(
            'bilinear' if family == 'Idefics2' else 'lanczos', 1.0, 'squash',
            f"not recorded by the folder; transformers' {family}ImageProcessor defaults, one tile")

    def _infer(self) -> SimpleViTConfig:
        if self._config_path is None:
            raise ViTVariantsError('a transformers Idefics / SmolVLM folder needs its config.json next to the weights',
                                   path=self.path, key='config.json')
        if self._nested and not isinstance(self.source_config.get('vision_config'), dict):
            raise ViTVariantsError('an Idefics / SmolVLM config.json needs a vision_config', path=self._config_path,
                                   key='vision_config')
        self._source_class()
        # '' in a tower folder, vision_model. (model.vision_model.) in a full model's
        self._vision_tower('the connector, perceiver and language model', locate=lambda: self._tower_prefix(_KERNEL))
        network = self._network(eps_default=1e-6)
        self._check_no_extra_layer(network['depth'], 'encoder.layers.{i}.layer_norm1.weight')
        if self.grid[0] != self.grid[1]:
            raise ViTVariantsError(f'image_size {network["img_size"]} gives a {self.grid[0]}x{self.grid[1]} grid; the '
                                   "tower's table is square", path=self._config_path, key='image_size')
        self.notes.append(f"detected: an Idefics / SmolVLM image tower (model_type "
                          f"{self.source_config.get('model_type')!r}): SigLIP's layout without a head; its "
                          f'{self.grid[0]}x{self.grid[1]} table read by bucketing each patch into it (the '
                          "'bucketed' scheme), so every input grid reads it as the tower does")
        return SimpleViTConfig.of(**network, num_classes=0, global_pool='', qkv_bias=True, class_token=False,
                                  positions=(Bucketed(),), grid_mode='crop', patch_embed='conv')


FAMILY = Family(
    'idefics',
    # before the refusal of other transformers model types (2000)
    routes=(Route(1690., lambda p: p.model_type in IDEFICS_MODEL_TYPES, IdeficsVisionCheckpoint),),
)
