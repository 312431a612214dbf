"""BLIP's image tower (Li et al. 2022, salesforce/BLIP) as transformers saves it: ``BlipVisionModel`` folders
(model_type ``blip_vision_model``), and BLIP-2's and InstructBLIP's, which share its layout (``Blip2VisionModel``,
``InstructBlipVisionModel``: ``BLIP_MODEL_TYPES``).

The tower: a patch conv with a bias, a ``class_embedding`` (1, 1, D), a learned table with a [CLS] slot stored as a
parameter (1, N + 1, D), no pre-norm, pre-norm blocks with a fused ``self_attn.qkv`` (its bias: BLIP's always; BLIP-2's
and InstructBLIP's by ``qkv_bias``, saved fused as ``cat(q_bias, zeros, v_bias)``, read as stored) and
``self_attn.projection``, exact GELU by ``hidden_act``, and ``post_layernorm``. The class outputs
``last_hidden_state`` = ``post_layernorm`` of every token (our final ``norm``) and ``pooler_output`` =
``post_layernorm`` applied once more to that [CLS] row: the 'blip' pool (``BlipPool``) takes the [CLS] token and
normalises it again with its own copy of ``post_layernorm`` (``attn_pool.norm``). The table is resized as the class's
``interpolate_pos_encoding`` resizes (rule ``'hf'``).

The full models' folders (model_type ``blip``, ``blip-2``, ``instructblip``: ``BLIP_FOLDERS``) are read as their
image tower under ``vision_model.``, giving what the class computes of the image: the tower's outputs for the
captioning, question-answering and BLIP-2 / InstructBLIP models (what their decoder or Q-Former reads), with
``BlipModel``'s ``visual_projection`` as the head on that pooled output (its ``get_image_features``), and
``BlipForImageTextRetrieval``'s ``vision_proj`` as the head on the [CLS] normed once (its image embedding before
the L2 normalisation). A class whose image output is the Q-Former's is refused by name.
"""
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Dict, Optional, Tuple

import torch
import torch.nn as nn

from ..checkpoints.preprocessing import assumed_preprocessing
from ..checkpoints.routes import Route
from ..checkpoints.source import Rule
from ..checkpoints.transformers_folder import TransformersCheckpoint
from ..clip_models import OPENAI_MEAN, OPENAI_STD
from ..config import SimpleViTConfig
from ..errors import ViTVariantsError
from ..heads import PoolModule
from ..parts import PoolPart
from .registry import Family

__all__ = ['BLIP_MODEL_TYPES', 'BLIP_FOLDERS', 'BLIP_HEADS', 'BlipPool', 'BlipPoolModule',
           'BlipVisionFolderCheckpoint', 'FAMILY']

# model_type -> the transformers class of that image tower
BLIP_MODEL_TYPES: Dict[str, str] = {'blip_vision_model': 'BlipVisionModel', 'blip_2_vision_model': 'Blip2VisionModel',
                                    'instructblip_vision_model': 'InstructBlipVisionModel'}
_QFORMER = "its image output is the Q-Former's query tokens, and the Q-Former is not expressed"
# full model_type -> {class: None when it is read as its image tower, else why it is refused}
BLIP_FOLDERS: Dict[str, Dict[str, Optional[str]]] = {
    'blip': {'BlipModel': None, 'BlipForConditionalGeneration': None, 'BlipForQuestionAnswering': None,
             'BlipForImageTextRetrieval': None},
    'blip-2': {'Blip2Model': None, 'Blip2ForConditionalGeneration': None, 'Blip2VisionModelWithProjection': _QFORMER,
               'Blip2ForImageTextRetrieval': _QFORMER},
    'instructblip': {'InstructBlipModel': None, 'InstructBlipForConditionalGeneration': None},
}
# class -> (its image head's weight, whether the head reads the twice-normed pooled [CLS] rather than the [CLS])
BLIP_HEADS: Dict[str, Tuple[str, bool]] = {'BlipModel': ('visual_projection', True),
                                           'BlipForImageTextRetrieval': ('vision_proj', False)}


@dataclass(frozen=True)
class BlipPool(PoolPart, kind='blip'):
    """BLIP's pooled output: the [CLS] token of the normed tokens, normed once more by a copy of the final norm."""
    needs_class_token: ClassVar[bool] = True


class BlipPoolModule(PoolModule, kind='blip'):
    """The model's 'blip' pool (in timm's slot ``attn_pool``): ``norm(x[:, 0])``, ``norm`` a LayerNorm of its own
    (a converted folder holds BLIP's ``post_layernorm`` there and in the final norm)."""
    weighted = True

    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        self.norm = norm

    @classmethod
    def create(cls, cfg: SimpleViTConfig, norm_layer: Callable[..., nn.Module], act_layer: Any,
               dd: Dict[str, Any]) -> PoolModule:
        return cls(norm_layer(cfg.embed_dim, **dd)).with_prefix(cfg.num_prefix_tokens)

    def pool_tokens(self, x: torch.Tensor, patch_valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        return self.norm(x[:, 0])


_L = '{p}encoder.layers.{i}.'
_RULES: Dict[str, Rule] = {
    'patch_embed.proj.weight': Rule(('{p}embeddings.patch_embedding.weight',)),
    'patch_embed.proj.bias': Rule(('{p}embeddings.patch_embedding.bias',)),
    'cls_token': Rule(('{p}embeddings.class_embedding',)),
    'pos_embed': Rule(('{p}embeddings.position_embedding',)),
    'blocks.{i}.norm1.weight': Rule((_L + 'layer_norm1.weight',)),
    'blocks.{i}.norm1.bias': Rule((_L + 'layer_norm1.bias',)),
    'blocks.{i}.attn.qkv.weight': Rule((_L + 'self_attn.qkv.weight',)),
    'blocks.{i}.attn.qkv.bias': Rule((_L + 'self_attn.qkv.bias',)),
    'blocks.{i}.attn.proj.weight': Rule((_L + 'self_attn.projection.weight',)),
    'blocks.{i}.attn.proj.bias': Rule((_L + 'self_attn.projection.bias',)),
    'blocks.{i}.norm2.weight': Rule((_L + 'layer_norm2.weight',)),
    'blocks.{i}.norm2.bias': Rule((_L + 'layer_norm2.bias',)),
    'blocks.{i}.mlp.fc1.weight': Rule((_L + 'mlp.fc1.weight',)),
    'blocks.{i}.mlp.fc1.bias': Rule((_L + 'mlp.fc1.bias',)),
    'blocks.{i}.mlp.fc2.weight': Rule((_L + 'mlp.fc2.weight',)),
    'blocks.{i}.mlp.fc2.bias': Rule((_L + 'mlp.fc2.bias',)),
    'norm.weight': Rule(('{p}post_layernorm.weight',)),
    'norm.bias': Rule(('{p}post_layernorm.bias',)),
    'attn_pool.norm.weight': Rule(('{p}post_layernorm.weight',)),
    'attn_pool.norm.bias': Rule(('{p}post_layernorm.bias',)),
    'head.weight': Rule(('{head}.weight',)),  # a full model's image head, outside the tower (BLIP_HEADS)
    'head.bias': Rule(('{head}.bias',)),
}


class BlipVisionFolderCheckpoint(TransformersCheckpoint):
    """A transformers BLIP, BLIP-2 or InstructBLIP image-tower folder, read as what its class outputs (module
    docstring)."""
    RULES = _RULES
    # BlipImageProcessor: bicubic, resized straight to its size, OpenAI CLIP's mean and std
    PREPROCESSING_DEFAULTS = assumed_preprocessing(
        'bicubic', 1.0, 'squash', "not recorded by the folder; transformers' BlipImageProcessor defaults",
        mean=OPENAI_MEAN, std=OPENAI_STD)

    @property
    def _full_model(self) -> bool:
        return self.source_config.get('model_type') in BLIP_FOLDERS

    @property
    def CLASSES(self) -> Dict[str, Optional[str]]:  # type: ignore[override]  # the folder's model_type decides
        model_type = self.source_config.get('model_type')
        cls = BLIP_MODEL_TYPES.get(model_type)
        return {cls: None} if cls else dict(BLIP_FOLDERS.get(model_type, {}))

    @property
    def _settings(self) -> Dict[str, Any]:
        nested = self.source_config.get('vision_config')
        return nested if self._full_model and isinstance(nested, dict) else self.source_config

    def _head(self) -> Optional[Tuple[str, bool]]:
        """The image head of the folder's class (``BLIP_HEADS``), or None."""
        return BLIP_HEADS.get(str(self._source_class()))

    def _fields(self, block: Optional[int]) -> Dict[str, Any]:
        head = self._head()
        return dict(super()._fields(block), head=head[0] if head else None)

    def _candidates(self) -> set:
        head = self._head()
        return super()._candidates() | ({f'{head[0]}.weight', f'{head[0]}.bias'} & set(self._store.names())
                                        if head else set())

    def _infer(self) -> SimpleViTConfig:
        if self._config_path is None:
            raise ViTVariantsError('a transformers BLIP image tower needs its config.json next to the weights',
                                   path=self.path, key='config.json')
        if self._full_model and not isinstance(self.source_config.get('vision_config'), dict):
            raise ViTVariantsError('a BLIP config.json needs a vision_config', path=self._config_path,
                                   key='vision_config')
        cls = self._source_class()
        if self._full_model and cls is None:
            raise ViTVariantsError('a BLIP model folder must name its class (architectures): its image output '
                                   'depends on it', path=self._config_path, key='architectures')
        self._vision_tower('the text model', ())
        if self._full_model and self._prefix == '':
            raise self._error('expected the image tower under vision_model.', key='vision_model.')
        network = self._network(eps_default=1e-5)
        self._check_no_extra_layer(network['depth'], 'encoder.layers.{i}.layer_norm1.weight')
        self.notes.append("BLIP: post_layernorm normalises every token (last_hidden_state), read as the final norm; "
                          "pooler_output normalises that [CLS] once more (the 'blip' pool, its own copy of "
                          "post_layernorm)")
        qkv_bias = self.source_config.get('qkv_bias', True)
        if not isinstance(qkv_bias, bool):
            raise ViTVariantsError(f'expected true or false, got {qkv_bias!r}', path=self._config_path, key='qkv_bias')
        head = self._head()
        num_classes, bias = (self._projection(*head), f'{head[0]}.bias' in self._store) if head else (0, True)
        if head:
            self.notes.append(f'{cls}: its image output is {head[0]} on the '
                              + ('pooled [CLS] (the head)' if head[1] else '[CLS] normed once (the head, on a '
                                 "'token' pool)"))
        pool = BlipPool() if head is None or head[1] else 'token'
        return SimpleViTConfig.of(**network, num_classes=num_classes, global_pool=pool, class_token=True,
                                  pos_embed='learn', pos_embed_cls_slot=True, pos_embed_resample='hf',
                                  final_norm=True, fc_norm=False, patch_bias=True, qkv_bias=qkv_bias,
                                  grid_mode='crop', head_bias=bias)

    def _projection(self, name: str, pooled: bool) -> int:
        """The output width of the head ``name``, checked against the tower's width."""
        key = f'{name}.weight'
        if key not in self._store:
            raise self._error(f'{self._source_class()} needs its {name}', key=key)
        shape = self._shape(key)
        width = self._settings.get('hidden_size')
        if len(shape) != 2 or shape[1] != width:
            raise self._error(f'{name} must be (projection_dim, hidden_size {width})', key=key,
                              shapes=(shape, ('projection_dim', width)))
        return shape[0]


FAMILY = Family(
    'blip',
    # beside the transformers CLIP-layout row (1600), before the generic transformers ViT row (1700)
    routes=(Route(1680., lambda p: p.model_type in BLIP_MODEL_TYPES or p.model_type in BLIP_FOLDERS,
                  BlipVisionFolderCheckpoint),),
)
