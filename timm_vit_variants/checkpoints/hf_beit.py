"""transformers BEiT and data2vec-vision folders: ``BeitModel`` / ``BeitForImageClassification`` (``model_type``
'beit', prefix ``beit.``) and ``Data2VecVisionModel`` / ``Data2VecVisionForImageClassification`` ('data2vec-vision',
prefix ``data2vec_vision.``), as ``save_pretrained`` writes them and the Hub holds them.

The layer names are transformers' classic ones: separate ``attention.attention.{query,key,value}`` (the key has no
bias: ours is a fused qkv with a zero k bias), ``lambda_1``/``lambda_2`` (LayerScale), ``intermediate.dense`` /
``output.dense`` (the MLP), each layer's ``attention.attention.relative_position_bias.relative_position_bias_table``
or one shared ``encoder.relative_position_bias.relative_position_bias_table`` (copied into every block, as BEiT's
fine-tuning does), and either mean pooling (``pooler.layernorm``, our ``fc_norm``) or [CLS] pooling after
``layernorm``. ``config.json`` says which (``use_relative_position_bias``, ``use_shared_relative_position_bias``,
``use_absolute_position_embeddings``, ``use_mean_pooling``, ``layer_scale_init_value``, ``layer_norm_eps``, whose
default there is 1e-12, not BEiT's 1e-6). A mean-pooled model saved without its pooling layer
(``Data2VecVisionModel``'s default) has no final norm at all: its output is the last block's tokens, read with
``final_norm=False`` and no pooling.

transformers resizes the tables bilinearly at run time (``interpolate_pos_encoding``); a conversion to another grid
uses BEiT's own rule instead (``rel_pos_resample='beit'``). The absolute table resizes as transformers does (bicubic,
no antialias: our 'hf' rule).
"""
from typing import Any, Dict, Optional, Set, Tuple

from ..beit_models import BEIT
from ..config import SimpleViTConfig
from ..errors import ViTVariantsError
from .beit import expand_table, stack_tables
from .hf import HFCheckpoint
from .hf_dinov3 import q_none_v_bias
from .preprocessing import assumed_preprocessing
from .source import Rule

__all__ = ['BEIT_MODEL_TYPES', 'HFBeitCheckpoint']

BEIT_MODEL_TYPES = {'beit': 'beit.', 'data2vec-vision': 'data2vec_vision.'}
_LAYER = '{p}encoder.layer.{i}.'
_ATTN = _LAYER + 'attention.attention.'
_LAYER_TABLE = _ATTN + 'relative_position_bias.relative_position_bias_table'
_SHARED_TABLE = '{p}encoder.relative_position_bias.relative_position_bias_table'
_MASK = '{p}embeddings.mask_token'
# transformers ViT's layer names (``hf._TABLE``) without its pooler's dense layer, with BEiT's q/v-only bias,
# LayerScale and mean-pooling norm
_RULES: Dict[str, Rule] = {
    **{key: rule for key, rule in HFCheckpoint.RULES.items() if not key.startswith('pre_logits.')},
    'blocks.{i}.attn.qkv.bias': Rule((_ATTN + 'query.bias', _ATTN + 'value.bias'), q_none_v_bias),
    'blocks.{i}.ls1.gamma': Rule((_LAYER + 'lambda_1',)),
    'blocks.{i}.ls2.gamma': Rule((_LAYER + 'lambda_2',)),
    'fc_norm.weight': Rule(('{p}pooler.layernorm.weight',)),
    'fc_norm.bias': Rule(('{p}pooler.layernorm.bias',)),
}


class HFBeitCheckpoint(HFCheckpoint):
    """A transformers BEiT or data2vec-vision folder (the ViT reader's class names, its own layer names)."""
    RULES = _RULES
    CLASSES = {**dict.fromkeys(('BeitModel', 'BeitForImageClassification', 'Data2VecVisionModel',
                                'Data2VecVisionForImageClassification')),
               'BeitForMaskedImageModeling': 'its output is the masked-image-modelling head (lm_head, logits over '
                                             'the visual-token vocabulary), which is not expressed'}
    PREPROCESSING_DEFAULTS = assumed_preprocessing(
        'bicubic', 1.0, 'squash', "not recorded by the folder; transformers' BeitImageProcessor defaults")
    _shared = False

    def _candidates(self) -> Set[str]:
        # the classifier sits outside the prefix; the mask token is for masked-image pretraining only
        return {n for n in self._store.names()
                if (n.startswith(self._prefix) or n.startswith('classifier.')) and n != _MASK.format(p=self._prefix)}

    def _rule(self, pattern: str, block: Optional[int]) -> Tuple[Rule, Optional[int]]:
        if pattern == 'rel_pos.tables':
            if self._shared:
                return Rule((_SHARED_TABLE.format(p=self._prefix),), expand_table), None
            return Rule(tuple(_LAYER_TABLE.format(p=self._prefix, i=i) for i in range(self.config.depth)),
                        stack_tables), None
        return super()._rule(pattern, block)

    def _infer(self, hints: Dict[str, Any]) -> SimpleViTConfig:
        cfg_path, cfg = self._config_path, self.source_config
        model_type = cfg.get('model_type')
        if model_type not in BEIT_MODEL_TYPES:
            raise ViTVariantsError(f'model_type {model_type!r} is not a transformers BEiT or data2vec-vision model',
                                   path=cfg_path, key='model_type')
        self._source_class()
        names = self._store.names()
        default = BEIT_MODEL_TYPES[model_type]
        prefix = hints.get('prefix')
        self._prefix = (default if any(n.startswith(default) for n in names) else '') if prefix is None else prefix
        network = self._network(hints, eps_default=1e-12)
        self._check_no_extra_layer(network['depth'], 'encoder.layer.{i}.layernorm_before.weight')
        flags = {k: cfg.get(k, False) for k in ('use_relative_position_bias', 'use_shared_relative_position_bias',
                                                'use_absolute_position_embeddings')}
        flags['use_mean_pooling'] = cfg.get('use_mean_pooling', True)
        for key, value in flags.items():
            if not isinstance(value, bool):
                raise ViTVariantsError(f'expected true or false, got {value!r}', path=cfg_path, key=key)
        self._shared = flags['use_shared_relative_position_bias'] and not flags['use_relative_position_bias']
        if not (flags['use_relative_position_bias'] or self._shared):
            raise ViTVariantsError('a BEiT without a relative position bias is not read as BEiT (neither '
                                   'use_relative_position_bias nor use_shared_relative_position_bias)',
                                   path=cfg_path, key='use_relative_position_bias')
        init = cfg.get('layer_scale_init_value', 0.1)
        if isinstance(init, bool) or not isinstance(init, (int, float)):
            raise ViTVariantsError(f'expected a number, got {init!r}', path=cfg_path, key='layer_scale_init_value')
        num_classes = self._shape('classifier.weight')[0] if 'classifier.weight' in self._store else 0
        self._check_dims('classifier.weight', classes=num_classes)
        self.label_names = self._labels(num_classes) if num_classes else None
        ape, mean_pool = flags['use_absolute_position_embeddings'], flags['use_mean_pooling']
        pooler = not mean_pool or f'{self._prefix}pooler.layernorm.weight' in self._store
        if not pooler and num_classes:
            raise self._error('a mean-pooled classifier needs its pooling layer (pooler.layernorm)',
                              key=f'{self._prefix}pooler.layernorm.weight')
        pooling = ('mean pooling with fc_norm' if pooler else "no pooling layer and no final norm: the last block's "
                   'tokens') if mean_pool else '[CLS] pooling'
        self.notes.append(
            f'detected a transformers {model_type} model ('
            f'{"one shared table, copied into every block" if self._shared else "a relative position table per block"}'
            f'{", an absolute table (resize rule " + repr("hf") + ")" if ape else ""}, '
            f'{pooling}); tables resized by BEiT\'s own rule, '
            'where transformers interpolates them bilinearly at run time'
            + (f'; {_MASK.format(p=self._prefix)} is for masked pretraining and skipped'
               if _MASK.format(p=self._prefix) in self._store else ''))
        # the folder's activation and eps (``network``) over the family's
        return SimpleViTConfig.of(**dict(
            BEIT, num_classes=num_classes, global_pool=('avg' if pooler else '') if mean_pool else 'token',
            fc_norm=mean_pool and pooler, final_norm=pooler,
            qkv_bias=True, init_values=float(init) if init > 0 else None,
            pos_embed='learn+relpos' if ape else 'relpos', pos_embed_cls_slot=True, pos_embed_resample='hf',
            **network))
