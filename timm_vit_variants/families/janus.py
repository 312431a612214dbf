"""Janus's image tower (DeepSeek 2024, *Janus: Decoupling Visual Encoding for Unified Multimodal Understanding and
Generation*): transformers' ``JanusVisionModel`` folders (model_type ``janus_vision_model``).

The tower is SigLIP's layout under its own names: a patch conv with a bias, an ``nn.Embedding`` table without a [CLS]
slot, pre-norm blocks with separate q/k/v (their bias by ``attention_bias``) and ``self_attn.projection_layer``, an
MLP of ``hidden_size * mlp_ratio`` (the config records no ``intermediate_size``), and ``post_layernorm`` on every
token (our final norm); there is no MAP head. Its ``pooler_output`` is the first patch token of the normed tokens,
normed once more by ``post_layernorm``: the 'janus' pool (BLIP's, on the first token of a tower without [CLS]). The
table is resized as its ``interpolate_pos_encoding`` does (rule 'hf': bicubic, no antialias). Its optional q/k norm
(``use_qk_norm``) is refused by name.
"""
from dataclasses import dataclass
from typing import Any, Dict

from ..checkpoints.fills import add_leading_axis, stack_rows
from ..checkpoints.preprocessing import assumed_preprocessing
from ..checkpoints.routes import Route
from ..checkpoints.source import Rule
from ..checkpoints.transformers_folder import TransformersCheckpoint
from ..clip_models import OPENAI_MEAN, OPENAI_STD
from ..config import SimpleViTConfig
from ..errors import ViTVariantsError
from .blip import BlipPool, BlipPoolModule
from .registry import Family

__all__ = ['JANUS_MODEL_TYPE', 'JanusPool', 'JanusPoolModule', 'JanusVisionCheckpoint', 'FAMILY']

JANUS_MODEL_TYPE = 'janus_vision_model'


@dataclass(frozen=True)
class JanusPool(BlipPool, kind='janus'):
    """Janus's pooled output: the first token of the normed tokens (a patch: there is no [CLS]), normed once more."""
    needs_class_token = False


class JanusPoolModule(BlipPoolModule, kind='janus'):
    """The 'janus' pool: ``norm(x[:, 0])``, as BLIP's, on a tower without prefix tokens."""


_L = '{p}encoder.layers.{i}.'
_QKV = tuple(_L + f'self_attn.{n}_proj' for n in 'qkv')
_RULES: Dict[str, Rule] = {
    'patch_embed.proj.weight': Rule(('{p}embeddings.patch_embedding.weight',)),
    'patch_embed.proj.bias': Rule(('{p}embeddings.patch_embedding.bias',)),
    'pos_embed': Rule(('{p}embeddings.position_embedding.weight',), add_leading_axis),
    'blocks.{i}.norm1.weight': Rule((_L + 'layer_norm1.weight',)),
    'blocks.{i}.norm1.bias': Rule((_L + 'layer_norm1.bias',)),
    'blocks.{i}.attn.qkv.weight': Rule(tuple(n + '.weight' for n in _QKV), stack_rows),
    'blocks.{i}.attn.qkv.bias': Rule(tuple(n + '.bias' for n in _QKV), stack_rows),
    'blocks.{i}.attn.proj.weight': Rule((_L + 'self_attn.projection_layer.weight',)),
    'blocks.{i}.attn.proj.bias': Rule((_L + 'self_attn.projection_layer.bias',)),
    'blocks.{i}.norm2.weight': Rule((_L + 'layer_norm2.weight',)),
    'blocks.{i}.norm2.bias': Rule((_L + 'layer_norm2.bias',)),
    'blocks.{i}.mlp.fc1.weight': Rule((_L + 'mlp.fc1.weight',)),
    'blocks.{i}.mlp.fc1.bias': Rule((_L + 'mlp.fc1.bias',)),
    'blocks.{i}.mlp.fc2.weight': Rule((_L + 'mlp.fc2.weight',)),
    'blocks.{i}.mlp.fc2.bias': Rule((_L + 'mlp.fc2.bias',)),
    'norm.weight': Rule(('{p}post_layernorm.weight',)),
    'norm.bias': Rule(('{p}post_layernorm.bias',)),
    'attn_pool.norm.weight': Rule(('{p}post_layernorm.weight',)),
    'attn_pool.norm.bias': Rule(('{p}post_layernorm.bias',)),
}


class JanusVisionCheckpoint(TransformersCheckpoint):
    """A transformers ``JanusVisionModel`` folder, read as what its class outputs (module docstring)."""
    format = 'janus'
    RULES = _RULES
    CLASSES = {'JanusVisionModel': None}
    # JanusImageProcessor: bicubic, OpenAI CLIP's mean and std (it pads the resized image to a square)
    PREPROCESSING_DEFAULTS = assumed_preprocessing(
        'bicubic', 1.0, 'center', "not recorded by the folder; transformers' JanusImageProcessor defaults",
        mean=OPENAI_MEAN, std=OPENAI_STD)

    @property
    def _settings(self) -> Dict[str, Any]:
        """``config.json`` with the MLP width it implies (``hidden_size * mlp_ratio``, as the class builds it)."""
        cfg = self.source_config
        ratio, dim = cfg.get('mlp_ratio', 4.0), cfg.get('hidden_size')
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not ratio > 0:
            raise ViTVariantsError(f'expected a positive number, got {ratio!r}', path=self._config_path,
                                   key='mlp_ratio')
        if isinstance(dim, int) and not isinstance(dim, bool):
            return dict(cfg, intermediate_size=int(dim * ratio))
        return cfg

    def _infer(self) -> SimpleViTConfig:
        if self._config_path is None:
            raise ViTVariantsError('a transformers Janus image tower needs its config.json next to the weights',
                                   path=self.path, key='config.json')
        self._source_class()
        if self.source_config.get('use_qk_norm', False):
            raise ViTVariantsError('use_qk_norm: the q/k LayerNorm is not expressed', path=self._config_path,
                                   key='use_qk_norm')
        qkv_bias = self.source_config.get('attention_bias', True)
        if not isinstance(qkv_bias, bool):
            raise ViTVariantsError(f'expected true or false, got {qkv_bias!r}', path=self._config_path,
                                   key='attention_bias')
        self._prefix = self.options.prefix or ''
        network = self._network(eps_default=1e-6)
        self._check_no_extra_layer(network['depth'], 'encoder.layers.{i}.layer_norm1.weight')
        self.notes.append("detected: a transformers Janus image tower: SigLIP's layout, post_layernorm on every "
                          "token (the final norm); pooler_output is the first token normed once more (the 'janus' "
                          "pool); the table is resized as transformers' interpolate_pos_encoding does (bicubic, no "
                          "antialias)")
        return SimpleViTConfig.of(**network, num_classes=0, global_pool=JanusPool(), class_token=False,
                                  pos_embed='learn', pos_embed_cls_slot=False, pos_embed_resample='hf',
                                  final_norm=True, fc_norm=False, patch_bias=True, qkv_bias=qkv_bias,
                                  grid_mode='crop')


FAMILY = Family(
    name='janus',
    # before the refusal of other transformers model types (2000)
    routes=(Route(1962., lambda p: p.model_type == JANUS_MODEL_TYPE, JanusVisionCheckpoint),),
)
