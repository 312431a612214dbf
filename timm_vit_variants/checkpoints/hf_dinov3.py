"""transformers DINOv3 folders: ``DINOv3ViTModel`` (``model_type`` 'dinov3_vit').

Their files name DINOv3's layers their own way: ``embeddings.{cls_token, register_tokens, patch_embeddings}``,
``layer.N.attention.{q,k,v,o}_proj`` (q, k and v fused into our qkv; the k projection has no bias,
``key_bias=False``, which is DINOv3's masked k bias), ``layer_scale{1,2}.lambda1``, an MLP of ``up_proj``/``down_proj``
or, with ``use_gated_mlp``, ``gate_proj``/``up_proj``/``down_proj`` (timm's SwiGLU ``fc1_g``/``fc1_x``/``fc2``),
and ``norm``. transformers keeps no RoPE tensor: it computes the frequencies from ``rope_theta`` in fp32, so the
periods are computed here the same way (DINOv3's own formula, ``theta ** (4k / head_width)``).
"""
from typing import Any, Dict

from ..config import SimpleViTConfig
from ..dino_models import DINOV3
from ..errors import ViTVariantsError
from .fills import stack_rows
from .preprocessing import assumed_preprocessing
from .source import Rule
from .tensor_rules import dinov3_periods, for_key, qv_bias
from .transformers_dino import KINDS, HFDinoReader, dino_table

__all__ = ['DINOV3_MODEL_TYPES', 'HFDinov3Checkpoint']

DINOV3_MODEL_TYPES = ('dinov3_vit',)
_LAYER = 'layer.{i}.'  # as save_pretrained writes it (transformers v5 names it model.layer in memory)
_ATTN = _LAYER + 'attention.'
_MLP = {'fc1': 'up_proj', 'fc2': 'down_proj', 'fc1_g': 'gate_proj', 'fc1_x': 'up_proj'}
_TABLE = {**dino_table(_LAYER, 'embeddings.patch_embeddings', 'o_proj', 'norm'),
          **{f'blocks.{{i}}.attn.qkv.{k}': Rule(tuple(f'{_ATTN}{q}_proj.{k}' for q in 'qkv'), stack_rows)
             for k in KINDS},
          **{f'blocks.{{i}}.mlp.{ours}.{k}': Rule((f'{_LAYER}mlp.{theirs}.{k}',)) for ours, theirs in _MLP.items()
             for k in KINDS}}


class HFDinov3Checkpoint(HFDinoReader):
    format = 'hf'
    RULES = _TABLE
    TENSOR_RULES = (
        for_key('rope.periods', lambda r: Rule((), dinov3_periods(
            float(r.source_config.get('rope_theta', DINOV3['rope_theta']))))),
        qv_bias(_ATTN + 'q_proj.bias', _ATTN + 'v_proj.bias', unless=_ATTN + 'k_proj.bias'),  # key_bias=False
    )
    CLASSES = {'DINOv3ViTModel': None}
    PREPROCESSING_DEFAULTS = assumed_preprocessing(
        'bilinear', 1.0, 'squash', "not recorded by the folder; transformers' DINOv3 image processor defaults")

    @property
    def _settings(self) -> Dict[str, Any]:
        """config.json; a gated MLP's ``hidden_act`` (silu) is read as the gate's activation, not an MLP one."""
        cfg = dict(self.source_config)
        if cfg.get('use_gated_mlp'):
            cfg['hidden_act'] = 'gelu'
        return cfg

    def _infer(self) -> SimpleViTConfig:
        cfg_path, cfg = self._config_path, self.source_config
        self._source_class()
        network = self._network(eps_default=DINOV3['norm_eps'])
        registers = self._config_registers(cfg.get('num_register_tokens', 0))
        if registers and 'embeddings.register_tokens' in self._store and \
                self._shape('embeddings.register_tokens')[1] != registers:
            raise self._error(f'config.json says num_register_tokens={registers}, the weights hold '
                              f"{self._shape('embeddings.register_tokens')[1]}", key='embeddings.register_tokens')
        if bool(cfg.get('query_bias', True)) != bool(cfg.get('value_bias', True)):
            raise ViTVariantsError('a q bias without a v bias (or the reverse) is not supported', path=cfg_path,
                                   key='query_bias')
        theta = cfg.get('rope_theta', DINOV3['rope_theta'])
        if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta > 0:
            raise ViTVariantsError(f'expected a positive number, got {theta!r}', path=cfg_path, key='rope_theta')
        gated = bool(cfg.get('use_gated_mlp', False))
        if gated:
            network['act_layer'] = 'silu'
        self._check_no_extra_layer(network['depth'], _LAYER + 'norm1.weight')
        self.grid = None  # no table: RoPE is computed for each grid
        self.notes.append(f'detected a transformers dinov3_vit model ({"gated SwiGLU, " if gated else ""}{registers} '
                          f'registers): RoPE (base {theta:g}) with fp32 periods computed as transformers does; '
                          f'embeddings.mask_token is stored for masked training and skipped')
        return SimpleViTConfig(**dict(
            DINOV3, **network, qkv_bias=bool(cfg.get('query_bias', True)), reg_tokens=registers,
            init_values=float(cfg.get('layerscale_value', 1.0)), mlp_layer='swiglu' if gated else 'mlp',
            rope_theta=float(theta)))
