"""TIPSv2's image tower (transformers' ``Tipsv2VisionModel``, model_type ``tipsv2_vision_model``): DINOv2 with
registers, as its own checkpoints name it.

The folder holds the original names (``blocks.{i}.attn.qkv``, ``ls1.gamma``, ``mlp.c_fc`` / ``c_proj``,
``register_tokens``, a table with a [CLS] row; transformers maps them on load). A [CLS] token with its table row,
registers after it with none, LayerScale, exact GELU, the final LayerNorm on every token; the pooled output is the
normed [CLS]. At another grid the class resizes the table by itself, bilinearly with antialias (our rule
``'flexi'``). The SwiGLU variant (``use_swiglu_ffn``) is refused by name.
"""
from typing import Dict

from ..checkpoints.routes import Route
from ..checkpoints.source import Rule
from ..checkpoints.transformers_folder import VIT_PROCESSOR_DEFAULTS, TransformersCheckpoint
from ..config import SimpleViTConfig
from ..errors import ViTVariantsError
from .registry import Family

__all__ = ['TIPSV2_MODEL_TYPES', 'Tipsv2Checkpoint', 'FAMILY']

TIPSV2_MODEL_TYPES = ('tipsv2_vision_model',)
_MASK = 'mask_token'  # stored for masked training; not part of the image model
_RULES: Dict[str, Rule] = {
    'reg_token': Rule(('register_tokens',)),
    'blocks.{i}.mlp.fc1.weight': Rule(('blocks.{i}.mlp.c_fc.weight',)),
    'blocks.{i}.mlp.fc1.bias': Rule(('blocks.{i}.mlp.c_fc.bias',)),
    'blocks.{i}.mlp.fc2.weight': Rule(('blocks.{i}.mlp.c_proj.weight',)),
    'blocks.{i}.mlp.fc2.bias': Rule(('blocks.{i}.mlp.c_proj.bias',)),
}


class Tipsv2Checkpoint(TransformersCheckpoint):
    """A transformers ``Tipsv2VisionModel`` folder (module docstring); our names, but for the MLP's and registers'."""
    format = 'tipsv2'
    RULES = _RULES
    CLASSES = {'Tipsv2VisionModel': None,
               'Tipsv2VisionBackbone': "its feature maps of chosen stages are not this model's output"}
    PREPROCESSING_DEFAULTS = VIT_PROCESSOR_DEFAULTS

    def _candidates(self) -> set:
        return super()._candidates() - {_MASK}

    @property
    def _settings(self) -> Dict[str, object]:
        """config.json, with the MLP width its ``mlp_ratio`` gives (``int(hidden * mlp_ratio)``)."""
        cfg = dict(self.source_config)
        ratio, dim = cfg.get('mlp_ratio', 4), cfg.get('hidden_size')
        if isinstance(ratio, (int, float)) and not isinstance(ratio, bool) and isinstance(dim, int):
            cfg['intermediate_size'] = int(dim * ratio)
        return cfg

    def _infer(self) -> SimpleViTConfig:
        if self._config_path is None:
            raise ViTVariantsError('a transformers TIPSv2 folder needs its config.json next to the weights',
                                   path=self.path, key='config.json')
        self._source_class()
        if self.source_config.get('use_swiglu_ffn'):
            raise ViTVariantsError("TIPSv2's SwiGLU MLP (gate_proj, up_proj, down_proj) is not expressed",
                                   path=self._config_path, key='use_swiglu_ffn')
        network = self._network(eps_default=1e-6)
        self._check_no_extra_layer(network['depth'], 'blocks.{i}.norm1.weight')
        registers = self.source_config.get('num_register_tokens', 0)
        if isinstance(registers, bool) or not isinstance(registers, int) or registers < 0:
            raise ViTVariantsError(f'expected an integer >= 0, got {registers!r}', path=self._config_path,
                                   key='num_register_tokens')
        scale = self.source_config.get('layerscale_value', 1.0)
        self.notes.append(f'detected: a transformers TIPSv2 image tower ({registers} registers, LayerScale; pooled '
                          "output: the normed [CLS]); the table is resized as the class does (bilinear with "
                          "antialias, rule 'flexi'); mask_token is stored for masked training and skipped")
        return SimpleViTConfig.of(**network, num_classes=0, global_pool='token', class_token=True,
                                  reg_tokens=registers, pos_embed='learn', pos_embed_cls_slot=True,
                                  pos_embed_resample='flexi', init_values=float(scale), final_norm=True,
                                  fc_norm=False, patch_bias=True,
                                  qkv_bias=bool(self.source_config.get('qkv_bias', True)), grid_mode='crop')


FAMILY = Family(
    'tipsv2',
    # before the refusal of other transformers model types (2000)
    routes=(Route(1976., lambda p: p.model_type in TIPSV2_MODEL_TYPES, Tipsv2Checkpoint),),
)
