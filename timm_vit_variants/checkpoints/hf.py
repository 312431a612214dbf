"""transformers ViT folders: ``config.json`` plus ``model.safetensors`` / ``pytorch_model.bin`` (or shards).

Covers ``ViTForImageClassification`` (``vit.`` prefix, ``classifier``) and bare ``ViTModel``
(no prefix, optional ``pooler``). The pooler is Linear + tanh on the [CLS] token, which is
exactly SimpleVisionTransformer's ``pre_logits`` under token pooling, so it maps there
(``rep_size``) instead of being dropped. ``ViTMSNForImageClassification`` folders hold the encoder's layers outside
the ``vit.`` prefix (``encoder.layer.*``, as the Hub's ViT-MSN files do: transformers maps ``^encoder.`` to
``vit.encoder.`` on loading and back on saving), read there. What every transformers reader shares is
``transformers_folder.py``'s.
"""
from typing import Any, Dict, Optional, Set, Tuple

from ..config import SimpleViTConfig
from ..errors import ViTVariantsError
from .tensor_rules import Reader, Rule
from .transformers_folder import VIT_LAYER_NAMES, VIT_PROCESSOR_DEFAULTS, TransformersCheckpoint

__all__ = ['HFCheckpoint', 'VIT_MODEL_TYPES']

_UNSUPPORTED = {'embeddings.mask_token': 'the mask token of ViTForMaskedImageModeling is not supported'}
# The models transformers saves under ViT's names: model_type -> (its classifier class's prefix, whether it has a [CLS]
# token, {class: None, or what part of it is not expressed}). ViT-MSN is ViT (its classifier, like ViT's, reads the normed
# [CLS]); I-JEPA has no [CLS] (a table without its slot) and its classifier reads the mean of the normed tokens.
VIT_MODEL_TYPES: Dict[str, Tuple[str, bool, Dict[str, Optional[str]]]] = {
    'vit': ('vit.', True, {'ViTModel': None, 'ViTForImageClassification': None,
                           'ViTForMaskedImageModeling': _UNSUPPORTED['embeddings.mask_token']}),
    'vit_msn': ('vit.', True, {'ViTMSNModel': None, 'ViTMSNForImageClassification': None}),
    'ijepa': ('ijepa.', False, {'IJepaModel': None, 'IJepaForImageClassification': None}),
}
_ENCODER = '{p}encoder.'


def _bare_encoder(reader: Reader, pattern: str, fields: Dict[str, Any]) -> Optional[Rule]:
    """A block's tensors outside the prefix (``encoder.layer.*``) where the folder holds its encoder there."""
    if not reader._encoder_outside or not pattern.startswith('blocks.'):
        return None
    rule = VIT_LAYER_NAMES[pattern]
    return Rule(tuple(s.replace(_ENCODER, 'encoder.') for s in rule.sources), rule.fill)


class HFCheckpoint(TransformersCheckpoint):
    """A transformers ViT folder (``ViTForImageClassification``, ``ViTModel``), or one of a model saved under ViT's
    names (``VIT_MODEL_TYPES``)."""
    RULES = VIT_LAYER_NAMES
    PREPROCESSING_DEFAULTS = VIT_PROCESSOR_DEFAULTS
    MODEL_TYPES = VIT_MODEL_TYPES  # the model types this reader reads (a family's subclass reads its own)
    UNSUPPORTED = _UNSUPPORTED  # tensors (under the prefix) refused with the reason (a family's model may not use one)
    TENSOR_RULES = (_bare_encoder,)
    _encoder_outside = False  # the encoder's layers sit outside the prefix (ViTMSNForImageClassification's files)

    @property
    def CLASSES(self) -> Dict[str, Optional[str]]:  # type: ignore[override]  # the folder's model_type decides
        return self.MODEL_TYPES.get(self.source_config.get('model_type'), ('', True, {}))[2]

    def _candidates(self) -> Set[str]:
        # every name: a ViTForImageClassification's classifier sits outside its 'vit.' prefix
        return set(self._store.names())

    def _infer(self) -> SimpleViTConfig:
        cfg_path = self._config_path
        if cfg_path is None:
            raise ViTVariantsError('a transformers ViT needs its config.json next to the weights', path=self.path,
                                   key='config.json')
        model_type = self.source_config.get('model_type')
        if model_type not in self.MODEL_TYPES:
            raise ViTVariantsError(f"model_type {model_type!r} is not a transformers ViT "
                                   f"({', '.join(self.MODEL_TYPES)})", path=cfg_path, key='model_type')
        stem, class_token, _ = self.MODEL_TYPES[model_type]
        self._source_class()
        names = self._store.names()
        prefix = self.options.prefix
        self._prefix = (stem if any(n.startswith(stem) for n in names) else '') if prefix is None else prefix
        for short, reason in self.UNSUPPORTED.items():
            if self._prefix + short in self._store:
                raise self._error(reason, key=self._prefix + short)
        layer_norm = 'encoder.layer.{i}.layernorm_before.weight'
        first = layer_norm.format(i=0)
        self._encoder_outside = bool(self._prefix) and self._prefix + first not in self._store and first in self._store
        network = self._network(eps_default=1e-12)
        depth = network['depth']
        self._check_no_extra_layer(depth, layer_norm)
        if self._encoder_outside:
            self.notes.append(f"the encoder's layers are stored outside the {self._prefix!r} prefix (encoder.layer.*, "
                              "as transformers saves ViTMSNForImageClassification): read there")
            if layer_norm.format(i=depth) in self._store:
                raise self._error(f'inconsistent depth: config says num_hidden_layers={depth}',
                                  key=layer_norm.format(i=depth))

        pooler = self._prefix + 'pooler.dense.weight'
        rep_size = None
        if pooler in self._store and not class_token:
            raise self._error('the pooler reads the first patch token (there is no [CLS]), which this model does not '
                              'express', key=pooler)
        if pooler in self._store:
            if self._settings.get('pooler_act', 'tanh') != 'tanh':
                raise ViTVariantsError(f"pooler_act {self._settings['pooler_act']!r} is not supported (only tanh)",
                                       path=cfg_path, key='pooler_act')
            if 'classifier.weight' in self._store:
                raise self._error('a pooler together with a classifier is not a transformers ViT layout', key=pooler)
            rep_size = self._shape(pooler)[0]
        num_classes = self._shape('classifier.weight')[0] if 'classifier.weight' in self._store else 0
        self._check_dims('classifier.weight', classes=num_classes, width=rep_size)
        self.label_names = self._labels(num_classes)
        return SimpleViTConfig.of(
            num_classes=num_classes, global_pool='token' if class_token else 'avg', fc_norm=False,
            qkv_bias=bool(self._settings.get('qkv_bias', True)), class_token=class_token, pos_embed='learn',
            pos_embed_cls_slot=class_token, pos_embed_resample='hf', rep_size=rep_size, **network)
