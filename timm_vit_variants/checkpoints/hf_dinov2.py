"""transformers DINOv2 folders: ``Dinov2Model`` (``model_type`` 'dinov2') and ``Dinov2WithRegistersModel``
('dinov2_with_registers').

Their files (as ``save_pretrained`` writes them and the Hub holds them) name DINOv2's layers their own way: separate
``attention.attention.{query,key,value}`` (fused into our qkv), ``layer_scale{1,2}.lambda1`` (LayerScale), an MLP of
``fc1``/``fc2`` or, with ``use_swiglu_ffn``, ``weights_in`` (gate then value, timm's SwiGLUPacked fc1)/``weights_out``. ``Dinov2Model`` resizes the table bicubic without antialias (our 'hf'
rule), ``Dinov2WithRegistersModel`` with antialias (our 'timm' rule).
The config's sizes (``mlp_ratio``, ``num_register_tokens``) are checked against the tensors by the plan.
What this reader and ``hf_dinov3.py``'s share is ``transformers_dino.py``'s.
"""
from typing import Any, Dict, Optional, Tuple

from ..config import SimpleViTConfig
from ..dino_models import DINOV2
from ..errors import ViTVariantsError
from ..families.dinov2 import ClsPatchMeanPool
from .fills import stack_rows
from .source import Rule
from .tensor_rules import named
from .transformers_dino import KINDS, MASK, HFDinoReader, dino_table
from .transformers_folder import VIT_PROCESSOR_DEFAULTS

__all__ = ['DINOV2_MODEL_TYPES', 'HFDinov2Checkpoint']

DINOV2_MODEL_TYPES = ('dinov2', 'dinov2_with_registers')
_LAYER = 'encoder.layer.{i}.'
_QKV = tuple(f'{_LAYER}attention.attention.{n}' for n in ('query', 'key', 'value'))
_TABLE = {**dino_table(_LAYER, 'embeddings.patch_embeddings.projection', 'output.dense', 'layernorm'),
          'pos_embed': Rule(('embeddings.position_embeddings',)),
          **{f'blocks.{{i}}.attn.qkv.{k}': Rule(tuple(f'{q}.{k}' for q in _QKV), stack_rows) for k in KINDS},
          **{f'blocks.{{i}}.mlp.{n}.{k}': Rule((f'{_LAYER}mlp.{n}.{k}',)) for n in ('fc1', 'fc2') for k in KINDS},
          # a classifier class's linear probe, outside the model's prefix
          'head.weight': Rule(('classifier.weight',)), 'head.bias': Rule(('classifier.bias',))}
_CLASSIFIERS = ('Dinov2ForImageClassification', 'Dinov2WithRegistersForImageClassification')
# transformers' SwiGLU: ``weights_in`` (gate then value, timm's SwiGLUPacked fc1) and ``weights_out``
_SWIGLU = {f'blocks.{{i}}.mlp.{n}.{k}': f'{_LAYER}mlp.{theirs}.{k}'
           for n, theirs in (('fc1', 'weights_in'), ('fc2', 'weights_out')) for k in KINDS}


class HFDinov2Checkpoint(HFDinoReader):
    format = 'hf'
    PREPROCESSING_DEFAULTS = VIT_PROCESSOR_DEFAULTS
    RULES = _TABLE
    TENSOR_RULES = (named(_SWIGLU, when=lambda r: r.config.block.mlp == 'swiglu_packed'),)
    CLASSES = {'Dinov2Model': None, 'Dinov2WithRegistersModel': None, **dict.fromkeys(_CLASSIFIERS)}

    def _rule(self, pattern: str, block: Optional[int]) -> Tuple[Rule, Optional[int]]:
        """The table's names under the model's prefix (a classifier class's ``dinov2.``), its probe's as they are."""
        rule, index = super()._rule(pattern, block)
        if pattern.startswith('head.'):
            return rule, index
        return Rule(tuple(self._prefix + n for n in rule.sources), rule.fill), index

    @property
    def _settings(self) -> Dict[str, Any]:
        """config.json, with the MLP width its ``mlp_ratio`` (and SwiGLU rounding) gives as ``intermediate_size``."""
        cfg = dict(self.source_config)
        ratio, dim = cfg.get('mlp_ratio', 4), cfg.get('hidden_size')
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not ratio > 0:
            raise ViTVariantsError(f'expected a positive number, got {ratio!r}', path=self._config_path, key='mlp_ratio')
        if isinstance(dim, int) and not isinstance(dim, bool):
            hidden = int(dim * ratio)
            cfg['intermediate_size'] = (int(hidden * 2 / 3) + 7) // 8 * 8 if cfg.get('use_swiglu_ffn') else hidden
        return cfg

    def _infer(self) -> SimpleViTConfig:
        model_type = self.source_config.get('model_type')  # one of DINOV2_MODEL_TYPES: detect.DISPATCH's row
        classifier = self._source_class() in _CLASSIFIERS
        self._prefix = f'{model_type}.' if classifier else ''
        network = self._network(eps_default=DINOV2['norm_eps'])
        registers = self._config_registers(
            self.source_config.get('num_register_tokens', 0) if model_type == 'dinov2_with_registers' else 0)
        swiglu = bool(self.source_config.get('use_swiglu_ffn', False))
        if swiglu:  # transformers' SwiGLU gates with silu whatever hidden_act says
            network['act_layer'] = 'silu'
        self._check_no_extra_layer(network['depth'], 'encoder.layer.{i}.norm1.weight')
        rule = 'timm' if model_type == 'dinov2_with_registers' else 'hf'
        self.notes.append(f'detected a transformers {model_type} model ({"SwiGLU, " if swiglu else ""}{registers} '
                          f"registers): table resize rule {rule!r} (transformers' own: bicubic "
                          f"{'with' if rule == 'timm' else 'without'} antialias); {MASK} is stored for masked "
                          'training and skipped')
        head = self._probe(network['embed_dim']) if classifier else {}
        return SimpleViTConfig.of(**dict(
            DINOV2, **network, qkv_bias=bool(self.source_config.get('qkv_bias', True)), reg_tokens=registers,
            init_values=float(self.source_config.get('layerscale_value', 1.0)),
            mlp_layer='swiglu_packed' if swiglu else 'mlp', pos_embed_resample=rule, **head))

    def _probe(self, dim: int) -> Dict[str, Any]:
        """The linear probe of a classifier class: its classes, on [CLS] concatenated with the mean of the patch
        tokens (the 'cls_patch_mean' pool)."""
        shape = self._shape('classifier.weight')
        if len(shape) != 2 or shape[1] != 2 * dim:
            raise self._error(f'the classifier must read [CLS] and the patch mean, (classes, {2 * dim})',
                              key='classifier.weight', shapes=(shape, ('classes', 2 * dim)))
        self._check_dims('classifier.weight', classes=shape[0])
        self.label_names = self._labels(shape[0])
        self.notes.append(f'{self._source_class()}: its classifier on [CLS] concatenated with the mean of the patch '
                          "tokens, the 'cls_patch_mean' pool")
        return dict(num_classes=shape[0], global_pool=ClsPatchMeanPool())
