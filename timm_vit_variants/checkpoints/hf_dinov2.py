"""transformers DINOv2 folders: ``Dinov2Model`` (``model_type`` 'dinov2') and ``Dinov2WithRegistersModel``
('dinov2_with_registers').

Their files (as ``save_pretrained`` writes them and the Hub holds them) name DINOv2's layers their own way: separate
``attention.attention.{query,key,value}`` (fused into our qkv), ``layer_scale{1,2}.lambda1`` (LayerScale), an MLP of
``fc1``/``fc2`` or, with ``use_swiglu_ffn``, ``weights_in`` (gate then value, timm's SwiGLUPacked fc1)/``weights_out``. ``Dinov2Model`` resizes the table bicubic without antialias (our 'hf'
rule), ``Dinov2WithRegistersModel`` with antialias (our 'timm' rule).
The config's sizes (``mlp_ratio``, ``num_register_tokens``) are checked against the tensors by the plan.
``HFDinoReader`` is what this reader and ``hf_dinov3.py``'s share (the skipped mask token, the table's names, the
register count).
"""
from typing import Any, Callable, Dict, Optional, Set, Tuple

from ..config import SimpleViTConfig
from ..dino_models import DINOV2
from ..errors import ViTVariantsError
from .hf import HFCheckpoint, TransformersCheckpoint
from .fills import stack_rows
from .source import Rule

__all__ = ['DINOV2_MODEL_TYPES', 'HFDinov2Checkpoint', 'HFDinoReader', 'dino_table']

DINOV2_MODEL_TYPES = ('dinov2', 'dinov2_with_registers')
_MASK = 'embeddings.mask_token'
_LAYER = 'encoder.layer.{i}.'
_QKV = tuple(f'{_LAYER}attention.attention.{n}' for n in ('query', 'key', 'value'))


def dino_table(layer: str, patch: str, attn_out: str, norm: str) -> Dict[str, Tuple[str, ...]]:
    """Our key -> transformers names of what both DINO generations name alike: [CLS], registers, the attention
    output ``{layer}attention.{attn_out}``, LayerScale; ``patch`` and ``norm`` are the patch conv's and final
    norm's names."""
    return {
        'patch_embed.proj.weight': (f'{patch}.weight',),
        'patch_embed.proj.bias': (f'{patch}.bias',),
        'cls_token': ('embeddings.cls_token',),
        'reg_token': ('embeddings.register_tokens',),
        'blocks.{i}.attn.proj.weight': (f'{layer}attention.{attn_out}.weight',),
        'blocks.{i}.attn.proj.bias': (f'{layer}attention.{attn_out}.bias',),
        'blocks.{i}.ls1.gamma': (f'{layer}layer_scale1.lambda1',),
        'blocks.{i}.ls2.gamma': (f'{layer}layer_scale2.lambda1',),
        'norm.weight': (f'{norm}.weight',),
        'norm.bias': (f'{norm}.bias',),
    }


_TABLE = {**dino_table(_LAYER, 'embeddings.patch_embeddings.projection', 'output.dense', 'layernorm'),
          'pos_embed': ('embeddings.position_embeddings',)}
_SWIGLU = {'fc1': 'weights_in', 'fc2': 'weights_out'}


class HFDinoReader(TransformersCheckpoint):
    """What the transformers DINOv2 and DINOv3 readers share: the mask token skipped (masked training only), the
    names of their ``_TABLE``, and ``num_register_tokens`` read and checked."""

    _TABLE: Dict[str, Tuple[str, ...]] = {}

    def _candidates(self) -> Set[str]:
        return {n for n in self._store.names() if n != _MASK}

    def _rule(self, pattern: str, block: Optional[int]) -> Tuple[Rule, Optional[int]]:
        """``_TABLE``'s names for ``pattern`` at ``block``, else ``_layer_rule``'s."""
        name = lambda t: t.format(i=block)  # noqa: E731
        if pattern in self._TABLE:
            return Rule(tuple(map(name, self._TABLE[pattern]))), None
        return self._layer_rule(pattern, name), None

    def _layer_rule(self, pattern: str, name: Callable[[str], str]) -> Rule:
        """The rule for a ``pattern`` that ``_TABLE`` does not name; ``name`` fills a template's block in."""
        raise NotImplementedError

    def _config_registers(self, registers: Any) -> int:
        """config.json's ``num_register_tokens`` (``registers``), an integer >= 0 within the limits."""
        if isinstance(registers, bool) or not isinstance(registers, int) or registers < 0:
            raise ViTVariantsError(f'expected an integer >= 0, got {registers!r}', path=self._config_path,
                                   key='num_register_tokens')
        self.limits.check('tokens', registers, path=self._config_path, key='num_register_tokens')
        return registers


class HFDinov2Checkpoint(HFDinoReader, HFCheckpoint):
    format = 'hf'
    _TABLE = _TABLE
    CLASSES = {'Dinov2Model': None, 'Dinov2WithRegistersModel': None,
               **dict.fromkeys(('Dinov2ForImageClassification', 'Dinov2WithRegistersForImageClassification'),
                               'its classifier reads [CLS] concatenated with the mean of the patch tokens, and that '
                               '[CLS]+mean concat head is not expressed (this model pools one token-wide vector)')}

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

    def _layer_rule(self, pattern: str, name: Callable[[str], str]) -> Rule:
        part, kind = pattern.split('.')[-2:]
        if pattern.startswith('blocks.{i}.attn.qkv.'):
            return Rule(tuple(name(q) + f'.{kind}' for q in _QKV), stack_rows)
        if pattern.startswith('blocks.{i}.norm'):
            return Rule((name(_LAYER) + f'{part}.{kind}',))
        if self.config.block.mlp == 'swiglu_packed':
            return Rule((name(_LAYER) + f'mlp.{_SWIGLU[part]}.{kind}',))
        return Rule((name(_LAYER) + f'mlp.{part}.{kind}',))

    def _infer(self, hints: Dict[str, Any]) -> SimpleViTConfig:
        model_type = self.source_config.get('model_type')  # one of DINOV2_MODEL_TYPES: detect.DISPATCH's row
        self._source_class()
        network = self._network(hints, eps_default=DINOV2['norm_eps'])
        registers = self._config_registers(
            self.source_config.get('num_register_tokens', 0) if model_type == 'dinov2_with_registers' else 0)
        swiglu = bool(self.source_config.get('use_swiglu_ffn', False))
        if swiglu:  # transformers' SwiGLU gates with silu whatever hidden_act says
            network['act_layer'] = 'silu'
        self._check_no_extra_layer(network['depth'], 'encoder.layer.{i}.norm1.weight')
        rule = 'timm' if model_type == 'dinov2_with_registers' else 'hf'
        self.notes.append(f'detected a transformers {model_type} model ({"SwiGLU, " if swiglu else ""}{registers} '
                          f"registers): table resize rule {rule!r} (transformers' own: bicubic "
                          f"{'with' if rule == 'timm' else 'without'} antialias); {_MASK} is stored for masked "
                          'training and skipped')
        return SimpleViTConfig.of(**dict(
            DINOV2, **network, qkv_bias=bool(self.source_config.get('qkv_bias', True)), reg_tokens=registers,
            init_values=float(self.source_config.get('layerscale_value', 1.0)),
            mlp_layer='swiglu_packed' if swiglu else 'mlp', pos_embed_resample=rule))
