"""transformers CLIP image towers: ``CLIPVisionModel``, ``CLIPVisionModelWithProjection`` and ``CLIPModel`` folders,
and ``CLIPForImageClassification``; and the models that carry CLIP's image tower unchanged under their own model_type
(``CLIP_LAYOUTS``: MetaCLIP 2, Chinese-CLIP, AltCLIP, CLIPSeg, OWL-ViT, OWLv2), read by the same rules; the names of the
pre-norm (``pre_layrnorm`` / ``pre_layernorm``) and of the block list (``layers`` / ``layer``: transformers saves
AltCLIP's two-tower model with the latter) are read off the tensors. Their detection or segmentation classes are
refused by name.

The tower sits under ``vision_model.``: a bias-free patch conv, a (width,) ``class_embedding``, an ``nn.Embedding``
position table, ``pre_layrnorm`` (our ``norm_pre``), separate q/k/v projections, and ``post_layernorm`` on the
pooled [CLS] token only (our ``fc_norm``: ``last_hidden_state`` is not normalised). ``visual_projection`` (no bias)
is the head. The activation is ``hidden_act`` (``quick_gelu`` for OpenAI's towers). A table is resized as
transformers' ``interpolate_pos_encoding`` does (rule 'hf': bicubic without antialias). ``CLIPForImageClassification``'s
``classifier`` reads the mean of the patch tokens as the last block leaves them: 'avg' pooling with no final norm
(``post_layernorm``, which its logits never use, is skipped).
"""
from typing import Any, Dict, Optional, Tuple

from ..clip_models import CLIP_TOWER, OPENAI_MEAN, OPENAI_STD
from ..config import SimpleViTConfig
from ..errors import ViTVariantsError
from .fills import add_leading_axis, stack_rows
from .preprocessing import assumed_preprocessing
from .source import Rule, SourceCheckpoint
from .tensor_rules import as_token, named
from .transformers_folder import TransformersCheckpoint

__all__ = ['HFClipCheckpoint', 'CLIP_MODEL_TYPES', 'CLIP_LAYOUTS', 'clip_layout']

_WITH_HEADS = ('VisionModelWithProjection', 'ForImageClassification')
# A two-tower model_type (its tower alone: '<type>_vision_model') -> (the class stem, the classes beyond '<stem>Model'
# and '<stem>VisionModel', {refused class suffix: the part not expressed}).
CLIP_LAYOUTS: Dict[str, Tuple[str, Tuple[str, ...], Dict[str, str]]] = {
    'clip': ('CLIP', _WITH_HEADS, {}),
    'metaclip_2': ('MetaClip2', _WITH_HEADS, {}),
    'chinese_clip': ('ChineseCLIP', (), {}),
    'altclip': ('AltCLIP', (), {}),
    'clipseg': ('CLIPSeg', (), {
        'ForImageSegmentation': 'the segmentation decoder (FiLM-conditioned transformer on chosen layers) is not '
                                'expressed'}),
    'owlvit': ('OwlViT', (), {
        'ForObjectDetection': 'the detection heads (boxes and class embeddings of every patch token) are not '
                              'expressed'}),
    'owlv2': ('Owlv2', (), {
        'ForObjectDetection': 'the detection heads (boxes, objectness and class embeddings of every patch token) are '
                              'not expressed'}),
}
CLIP_MODEL_TYPES = tuple(t for base in CLIP_LAYOUTS for t in (base, base + '_vision_model'))


def clip_layout(model_type: Any) -> Tuple[str, Tuple[str, Tuple[str, ...], Dict[str, str]]]:
    """(the two-tower model_type, its ``CLIP_LAYOUTS`` row) of a CLIP-layout ``model_type``."""
    base = str(model_type)[:-len('_vision_model')] if str(model_type).endswith('_vision_model') else str(model_type)
    return base, CLIP_LAYOUTS[base]


_L = '{p}encoder.{layers}.{i}.'
_QKV = tuple(_L + f'self_attn.{n}_proj' for n in 'qkv')
_TABLE: Dict[str, Rule] = {
    'patch_embed.proj.weight': Rule(('{p}embeddings.patch_embedding.weight',)),
    'cls_token': Rule(('{p}embeddings.class_embedding',), as_token),
    'pos_embed': Rule(('{p}embeddings.position_embedding.weight',), add_leading_axis),
    'norm_pre.weight': Rule(('{p}{pre}.weight',)),
    'norm_pre.bias': Rule(('{p}{pre}.bias',)),
    'blocks.{i}.norm1.weight': Rule((_L + 'layer_norm1.weight',)),
    'blocks.{i}.norm1.bias': Rule((_L + 'layer_norm1.bias',)),
    'blocks.{i}.attn.qkv.weight': Rule(tuple(n + '.weight' for n in _QKV), stack_rows),
    'blocks.{i}.attn.qkv.bias': Rule(tuple(n + '.bias' for n in _QKV), stack_rows),
    'blocks.{i}.attn.proj.weight': Rule((_L + 'self_attn.out_proj.weight',)),
    'blocks.{i}.attn.proj.bias': Rule((_L + 'self_attn.out_proj.bias',)),
    'blocks.{i}.norm2.weight': Rule((_L + 'layer_norm2.weight',)),
    'blocks.{i}.norm2.bias': Rule((_L + 'layer_norm2.bias',)),
    'blocks.{i}.mlp.fc1.weight': Rule((_L + 'mlp.fc1.weight',)),
    'blocks.{i}.mlp.fc1.bias': Rule((_L + 'mlp.fc1.bias',)),
    'blocks.{i}.mlp.fc2.weight': Rule((_L + 'mlp.fc2.weight',)),
    'blocks.{i}.mlp.fc2.bias': Rule((_L + 'mlp.fc2.bias',)),
    'fc_norm.weight': Rule(('{p}post_layernorm.weight',)),
    'fc_norm.bias': Rule(('{p}post_layernorm.bias',)),
    'head.weight': Rule(('visual_projection.weight',)),
}
_PROJECTION = 'visual_projection.weight'
_CLASSIFIER = ('classifier.weight', 'classifier.bias')
_POST_NORM = ('{p}post_layernorm.weight', '{p}post_layernorm.bias')


class HFClipCheckpoint(TransformersCheckpoint):
    """A transformers CLIP-layout folder, read as its image tower (with ``visual_projection`` as the head when
    present)."""
    _pre, _layers = 'pre_layrnorm', 'layers'  # the names of the pre-norm and the block list, read off the tensors
    _classifier = False  # CLIPForImageClassification: 'avg' pooling without a final norm, its classifier the head

    PREPROCESSING_DEFAULTS = assumed_preprocessing(
        'bicubic', 1.0, 'center', "not recorded by the folder; transformers' CLIPImageProcessor defaults",
        mean=OPENAI_MEAN, std=OPENAI_STD)

    @property
    def _two_tower(self) -> bool:
        return self.source_config.get('model_type') in CLIP_LAYOUTS

    @property
    def CLASSES(self) -> Dict[str, Optional[str]]:  # type: ignore[override]  # the folder's model_type decides
        _, (stem, extra, refused) = clip_layout(self.source_config.get('model_type'))
        return {**{stem + c: None for c in ('Model', 'VisionModel', *extra)},
                **{stem + c: why for c, why in refused.items()}}

    @property
    def _settings(self) -> Dict[str, Any]:
        nested = self.source_config.get('vision_config')
        return nested if self._two_tower and isinstance(nested, dict) else self.source_config

    RULES = _TABLE
    TENSOR_RULES = (named(dict(zip(('head.weight', 'head.bias'), _CLASSIFIER)), when=lambda r: r._classifier),)

    def _fields(self, block: Optional[int]) -> Dict[str, Any]:
        """``RULES``' fields, with the names of the pre-norm and the block list this folder uses."""
        return dict(super()._fields(block), pre=self._pre, layers=self._layers)

    def _candidates(self) -> set:
        names = SourceCheckpoint._candidates(self)
        if self._classifier:
            names -= {n.format(p=self._prefix) for n in _POST_NORM}
        return names | {n for n in (_CLASSIFIER if self._classifier else (_PROJECTION,)) if n in self._store}

    def _tower_network(self) -> Dict[str, Any]:
        """The tower under ``_prefix``: the names of its pre-norm and block list read off the tensors, and its
        ``config.json`` settings, checked (no layer past ``num_hidden_layers``)."""
        self._pre = 'pre_layernorm' if self._prefix + 'pre_layernorm.weight' in self._store else 'pre_layrnorm'
        self._layers = 'layer' if self._prefix + 'encoder.layer.0.layer_norm1.weight' in self._store else 'layers'
        network = self._network(eps_default=CLIP_TOWER['norm_eps'])
        self._check_no_extra_layer(network['depth'], f'encoder.{self._layers}.{{i}}.layer_norm1.weight')
        return network

    def _infer(self) -> SimpleViTConfig:
        cfg_path = self._config_path
        if cfg_path is None:
            raise ViTVariantsError('a transformers CLIP model needs its config.json next to the weights',
                                   path=self.path, key='config.json')
        if self._two_tower and not isinstance(self.source_config.get('vision_config'), dict):
            raise ViTVariantsError('a CLIP config.json needs a vision_config', path=cfg_path, key='vision_config')
        self._classifier = str(self._source_class()).endswith('ForImageClassification')
        self._vision_tower('the text tower, its projection and logit_scale', keep=(_PROJECTION, *_CLASSIFIER))
        network = self._tower_network()
        if self._classifier:
            num_classes = self._shape(_CLASSIFIER[0])[0] if _CLASSIFIER[0] in self._store else 0
            self._check_dims(_CLASSIFIER[0], classes=num_classes)
            self.label_names = self._labels(num_classes)
            self.notes.append(f'detected: {self._source_class()}, its classifier on the mean of the patch tokens '
                              f'as the last block leaves them (avg pooling, no final norm); skipped '
                              f'{self._prefix}post_layernorm, which its logits do not use')
            return SimpleViTConfig.of(**dict(CLIP_TOWER, **network, num_classes=num_classes, global_pool='avg',
                                          pos_embed_resample='hf', pre_norm=True, final_norm=False, head_bias=True))
        num_classes = 0
        if _PROJECTION in self._store:
            shape = self._shape(_PROJECTION)
            if len(shape) != 2 or shape[1] != network['embed_dim']:
                raise self._error(f"visual_projection must be (projection_dim, hidden_size {network['embed_dim']})",
                                  key=_PROJECTION, shapes=(shape, ('projection_dim', network['embed_dim'])))
            num_classes = shape[0]
            self._check_dims(_PROJECTION, classes=num_classes)
        self.notes.append(f"detected: a transformers CLIP image tower (model_type {self.source_config['model_type']!r}"
                          f"{', visual_projection as the head' if num_classes else ', no projection'}); QuickGELU: "
                          f"hidden_act is {self._settings.get('hidden_act', 'gelu')!r} in config.json; the table is "
                          "resized as transformers' interpolate_pos_encoding does (bicubic, no antialias)")
        return SimpleViTConfig.of(**dict(CLIP_TOWER, **network, num_classes=num_classes, global_pool='token',
                                      pos_embed_resample='hf', pre_norm=True, fc_norm=True))
