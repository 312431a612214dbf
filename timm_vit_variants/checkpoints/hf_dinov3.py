"""transformers DINOv3 folders: ``DINOv3ViTModel`` (``model_type`` 'dinov3_vit').

Their files name DINOv3's layers their own way: ``embeddings.{cls_token, register_tokens, patch_embeddings}``,
``layer.N.attention.{q,k,v,o}_proj`` (q, k and v fused into our qkv; the k projection has no bias,
``key_bias=False``, which is DINOv3's masked k bias), ``layer_scale{1,2}.lambda1``, an MLP of ``up_proj``/``down_proj``
or, with ``use_gated_mlp``, ``gate_proj``/``up_proj``/``down_proj`` (timm's SwiGLU ``fc1_g``/``fc1_x``/``fc2``),
and ``norm``. transformers keeps no RoPE tensor: it computes the frequencies from ``rope_theta`` in fp32, so the
periods are computed here the same way (DINOv3's own formula, ``theta ** (4k / head_width)``).
"""
from typing import Any, Callable, Dict

import torch

from ..config import SimpleViTConfig
from ..dino_models import DINOV3
from ..errors import ViTVariantsError
from ..rope import dinov3_periods as rope_periods
from .fills import Fill, Misfit, stack_rows
from .hf_dinov2 import HFDinoReader, dino_table
from .preprocessing import assumed_preprocessing
from .source import Rule

__all__ = ['DINOV3_MODEL_TYPES', 'HFDinov3Checkpoint', 'dinov3_periods', 'q_none_v_bias']

DINOV3_MODEL_TYPES = ('dinov3_vit',)
_LAYER = 'layer.{i}.'  # as save_pretrained writes it (transformers v5 names it model.layer in memory)
_TABLE = dino_table(_LAYER, 'embeddings.patch_embeddings', 'o_proj', 'norm')
_MLP = {'fc1': 'up_proj', 'fc2': 'down_proj', 'fc1_g': 'gate_proj', 'fc1_x': 'up_proj'}


def q_none_v_bias(dst: torch.Tensor, q: torch.Tensor, v: torch.Tensor) -> None:
    """A fused qkv bias from q and v biases, the k third zero (transformers' ``key_bias=False``)."""
    rows = dst.shape[0] // 3
    if tuple(q.shape) != (rows,) or tuple(v.shape) != (rows,):
        raise Misfit('shape does not fit', q.shape if tuple(q.shape) != (rows,) else v.shape, (rows,))
    dst[:rows].copy_(q)
    dst[rows:2 * rows].zero_()
    dst[2 * rows:].copy_(v)


def dinov3_periods(theta: float) -> Fill:
    """A fill computing DINOv3's periods ``theta ** (2k / (hd / 2))`` in fp32, as transformers and timm compute
    their frequencies (neither stores them)."""
    def fill(dst: torch.Tensor) -> None:
        dst.copy_(rope_periods(dst.shape[0], theta, torch.float32, dst.device))

    fill.__name__ = fill.__qualname__ = f'dinov3_periods_theta_{theta:g}'
    return fill


class HFDinov3Checkpoint(HFDinoReader):
    format = 'hf'
    _TABLE = _TABLE
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

    def _layer_rule(self, pattern: str, name: Callable[[str], str]) -> Rule:
        if pattern == 'rope.periods':
            return Rule((), dinov3_periods(float(self.source_config.get('rope_theta', DINOV3['rope_theta']))))
        part, kind = pattern.split('.')[-2:]
        attn = name(_LAYER) + 'attention.'
        if pattern == 'blocks.{i}.attn.qkv.weight':
            return Rule(tuple(f'{attn}{p}_proj.weight' for p in 'qkv'), stack_rows)
        if pattern == 'blocks.{i}.attn.qkv.bias':
            if f'{attn}k_proj.bias' in self._store:
                return Rule(tuple(f'{attn}{p}_proj.bias' for p in 'qkv'), stack_rows)
            return Rule((f'{attn}q_proj.bias', f'{attn}v_proj.bias'), q_none_v_bias)
        if pattern.startswith('blocks.{i}.norm'):
            return Rule((name(_LAYER) + f'{part}.{kind}',))
        return Rule((name(_LAYER) + f'mlp.{_MLP[part]}.{kind}',))

    def _infer(self, hints: Dict[str, Any]) -> SimpleViTConfig:
        cfg_path, cfg = self._config_path, self.source_config
        self._source_class()
        network = self._network(hints, eps_default=DINOV3['norm_eps'])
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
        return SimpleViTConfig.of(**dict(
            DINOV3, **network, qkv_bias=bool(cfg.get('query_bias', True)), reg_tokens=registers,
            init_values=float(cfg.get('layerscale_value', 1.0)), mlp_layer='swiglu' if gated else 'mlp',
            rope_theta=float(theta)))
