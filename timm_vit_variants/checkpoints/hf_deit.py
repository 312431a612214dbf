"""transformers DeiT folders: ``DeiTForImageClassificationWithTeacher`` (``deit.`` prefix) and bare ``DeiTModel``.

DeiT is a ViT with a distillation token right after [CLS] and a table with a slot for each (our ``dist_token``,
``pos_embed_cls_slot``). ``DeiTForImageClassificationWithTeacher``'s logits are the mean of ``cls_classifier`` on
[CLS] and ``distillation_classifier`` on the distillation token: our ``head`` and ``head_dist``. transformers resizes
the table bicubic without antialias (rule 'hf'). ``DeiTForImageClassification``'s ``classifier`` reads [CLS] alone
beside the distillation token, and so does a ``DeiTModel``'s pooler (Linear + tanh, our pre-logits layer): the DeiT
family's 'cls_alone' pool, with no ``head_dist``. Refused by name: ``DeiTForMaskedImageModeling``.
"""
from typing import Dict, Optional, Tuple

from ..config import SimpleViTConfig
from ..errors import ViTVariantsError
from ..families.deit_heads import ClsAlonePool
from .transformers_folder import VIT_LAYER_NAMES, TransformersCheckpoint
from .preprocessing import imagenet_preprocessing
from .source import Rule

__all__ = ['HFDeitCheckpoint', 'DEIT_MODEL_TYPES']

DEIT_MODEL_TYPES = ('deit',)
# transformers saves DeiT's tensors under ViT's names: ViT's rules, with the distillation token and the two classifiers.
_TABLE: Dict[str, Rule] = {
    **{ours: rule for ours, rule in VIT_LAYER_NAMES.items() if not ours.startswith('head.')},
    'dist_token': Rule(('{p}embeddings.distillation_token',)),
    'head.weight': Rule(('cls_classifier.weight',)),
    'head.bias': Rule(('cls_classifier.bias',)),
    'head_dist.weight': Rule(('distillation_classifier.weight',)),
    'head_dist.bias': Rule(('distillation_classifier.bias',)),
}
# DeiTForImageClassification's one classifier, on [CLS] alone
_ONE_HEAD = {'head.weight': Rule(('classifier.weight',)), 'head.bias': Rule(('classifier.bias',))}


class HFDeitCheckpoint(TransformersCheckpoint):
    """A transformers DeiT folder (``DeiTForImageClassificationWithTeacher``, ``DeiTModel`` without a pooler)."""
    RULES = _TABLE
    CLASSES = {'DeiTModel': None, 'DeiTForImageClassificationWithTeacher': None,
               'DeiTForImageClassification': None,
               'DeiTForMaskedImageModeling': 'the masked-image-modelling decoder and mask token are not expressed'}
    PREPROCESSING_DEFAULTS = imagenet_preprocessing(
        0.875, "not recorded by the folder; DeiT's eval preprocessing (bicubic, crop 0.875)")

    def _candidates(self) -> set:
        # every name: the classifiers sit outside the 'deit.' prefix
        return set(self._store.names())

    def _infer(self) -> SimpleViTConfig:
        cfg_path = self._config_path
        if cfg_path is None:
            raise ViTVariantsError('a transformers DeiT needs its config.json next to the weights', path=self.path,
                                   key='config.json')
        self._one_head = self._source_class() == 'DeiTForImageClassification'
        names = self._store.names()
        prefix = self.options.prefix
        self._prefix = ('deit.' if any(n.startswith('deit.') for n in names) else '') if prefix is None else prefix
        pooler = self._prefix + 'pooler.dense.weight'
        rep_size = self._pooler(pooler) if pooler in self._store else None
        network = self._network(eps_default=1e-12)
        self._check_no_extra_layer(network['depth'], 'encoder.layer.{i}.layernorm_before.weight')
        classifier = 'classifier.weight' if self._one_head else 'cls_classifier.weight'
        num_classes = self._shape(classifier)[0] if classifier in self._store else 0
        self._check_dims(classifier, classes=num_classes)
        self.label_names = self._labels(num_classes)
        alone = self._one_head or rep_size is not None
        self.notes.append('detected: a transformers DeiT (a distillation token with its own table slot' + (
            ", the classifier on [CLS] alone: the 'cls_alone' pool)" if self._one_head and num_classes else
            ", its pooler on [CLS] alone as the pre-logits layer: the 'cls_alone' pool)" if rep_size else
            ', the logits the mean of cls_classifier and distillation_classifier)' if num_classes else ', no head)'))
        return SimpleViTConfig.of(
            num_classes=num_classes, global_pool=ClsAlonePool() if alone else 'token', rep_size=rep_size,
            qkv_bias=bool(self.source_config.get('qkv_bias', True)), class_token=True, dist_token=True,
            pos_embed='learn', pos_embed_cls_slot=True, pos_embed_resample='hf', **network)

    def _pooler(self, key: str) -> int:
        """A DeiTModel's pooler (Linear + tanh on [CLS]) as the pre-logits layer: its width."""
        if self._settings.get('pooler_act', 'tanh') != 'tanh':
            raise ViTVariantsError(f"pooler_act {self._settings['pooler_act']!r} is not supported (only tanh)",
                                   path=self._config_path, key='pooler_act')
        return self._shape(key)[0]

    def _rule(self, pattern: str, block: Optional[int]) -> Tuple[Rule, Optional[int]]:
        if self._one_head and pattern in _ONE_HEAD:
            return _ONE_HEAD[pattern], None
        return super()._rule(pattern, block)
