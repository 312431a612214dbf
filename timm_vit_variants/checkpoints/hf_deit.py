"""transformers DeiT folders: ``DeiTForImageClassificationWithTeacher`` (``deit.`` prefix) and bare ``DeiTModel``.

DeiT is a ViT with a distillation token right after [CLS] and a table with a slot for each (our ``dist_token``,
``pos_embed_cls_slot``). ``DeiTForImageClassificationWithTeacher``'s logits are the mean of ``cls_classifier`` on
[CLS] and ``distillation_classifier`` on the distillation token: our ``head`` and ``head_dist``. transformers resizes
the table bicubic without antialias (rule 'hf'). Refused by name: ``DeiTForImageClassification`` (a classifier on
[CLS] alone beside the distillation token, where our distilled head averages two heads), a ``DeiTModel`` pooler
(Linear + act on [CLS] alone, likewise) and ``DeiTForMaskedImageModeling``.
"""
from typing import Any, Dict

from ..config import SimpleViTConfig
from ..errors import ViTVariantsError
from .hf import _TABLE as VIT_RULES, TransformersCheckpoint
from .preprocessing import imagenet_preprocessing
from .source import Rule

__all__ = ['HFDeitCheckpoint', 'DEIT_MODEL_TYPES']

DEIT_MODEL_TYPES = ('deit',)
# transformers saves DeiT's tensors under ViT's names: ViT's rules, with the distillation token and the two classifiers.
_TABLE: Dict[str, Rule] = {
    **{ours: rule for ours, rule in VIT_RULES.items() if not ours.startswith(('head.', 'pre_logits.'))},
    'dist_token': Rule(('{p}embeddings.distillation_token',)),
    'head.weight': Rule(('cls_classifier.weight',)),
    'head.bias': Rule(('cls_classifier.bias',)),
    'head_dist.weight': Rule(('distillation_classifier.weight',)),
    'head_dist.bias': Rule(('distillation_classifier.bias',)),
}
_ONE_TOKEN = 'reads [CLS] alone beside the distillation token; this model reads both tokens (the mean of two heads)'


class HFDeitCheckpoint(TransformersCheckpoint):
    """A transformers DeiT folder (``DeiTForImageClassificationWithTeacher``, ``DeiTModel`` without a pooler)."""
    RULES = _TABLE
    CLASSES = {'DeiTModel': None, 'DeiTForImageClassificationWithTeacher': None,
               'DeiTForImageClassification': f'its classifier {_ONE_TOKEN}',
               'DeiTForMaskedImageModeling': 'the masked-image-modelling decoder and mask token are not expressed'}
    PREPROCESSING_DEFAULTS = imagenet_preprocessing(
        0.875, "not recorded by the folder; DeiT's eval preprocessing (bicubic, crop 0.875)")

    def _candidates(self) -> set:
        # every name: the classifiers sit outside the 'deit.' prefix
        return set(self._store.names())

    def _infer(self, hints: Dict[str, Any]) -> SimpleViTConfig:
        cfg_path = self._config_path
        if cfg_path is None:
            raise ViTVariantsError('a transformers DeiT needs its config.json next to the weights', path=self.path,
                                   key='config.json')
        self._source_class()
        names = self._store.names()
        prefix = hints.get('prefix')
        self._prefix = ('deit.' if any(n.startswith('deit.') for n in names) else '') if prefix is None else prefix
        pooler = self._prefix + 'pooler.dense.weight'
        if pooler in self._store:
            raise self._error(f'the DeiTModel pooler {_ONE_TOKEN}; save it with add_pooling_layer=False', key=pooler)
        network = self._network(hints, eps_default=1e-12)
        self._check_no_extra_layer(network['depth'], 'encoder.layer.{i}.layernorm_before.weight')
        num_classes = self._shape('cls_classifier.weight')[0] if 'cls_classifier.weight' in self._store else 0
        self._check_dims('cls_classifier.weight', classes=num_classes)
        self.label_names = self._labels(num_classes)
        self.notes.append('detected: a transformers DeiT (a distillation token with its own table slot' +
                          (', the logits the mean of cls_classifier and distillation_classifier)' if num_classes
                           else ', no head)'))
        return SimpleViTConfig.of(
            num_classes=num_classes, global_pool='token', qkv_bias=bool(self.source_config.get('qkv_bias', True)),
            class_token=True, dist_token=True, pos_embed='learn', pos_embed_cls_slot=True, pos_embed_resample='hf',
            **network)
