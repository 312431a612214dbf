"""Pixio (transformers' ``PixioModel``, model_type ``pixio``): a plain pre-norm ViT with several class tokens.

``n_cls_tokens`` class tokens (8 in the published towers) come before the patches, each with its own row in the
learned table; the blocks are ViT's (saved under ViT's names, ``norm1``/``norm2`` for the block norms), then a final LayerNorm on
every token. The pooled output is the mean of the normed class tokens. Here the first class token is our [CLS] and the
others are registers, all with table rows (``reg_slots``), and the pool is the family's 'prefix_mean' (the mean of
every prefix token). The table is resized as the class's ``interpolate_pos_encoding`` does (bicubic, no
antialias: rule ``'hf'``), which it applies by itself at any other grid.
"""
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, Optional

import torch

from ..checkpoints.fills import token_rows
from ..checkpoints.preprocessing import assumed_preprocessing
from ..checkpoints.routes import Route
from ..checkpoints.source import Rule
from ..checkpoints.transformers_folder import VIT_LAYER_NAMES, TransformersCheckpoint
from ..config import SimpleViTConfig
from ..errors import ViTVariantsError
from ..heads import PoolModule
from ..choices import _is_int
from ..parts import PoolPart
from .registry import Family

__all__ = ['PIXIO_MODEL_TYPES', 'PrefixMeanPool', 'PrefixMeanPoolModule', 'PixioCheckpoint', 'FAMILY']

PIXIO_MODEL_TYPES = ('pixio',)


@dataclass(frozen=True)
class PrefixMeanPool(PoolPart, kind='prefix_mean'):
    """The mean of every prefix token ([CLS] and the registers: Pixio's class tokens) as they leave the final
    norm."""
    needs_class_token: ClassVar[bool] = True


class PrefixMeanPoolModule(PoolModule, kind='prefix_mean'):
    """The model's 'prefix_mean' pool: ``x[:, :num_prefix_tokens].mean(1)``."""

    def pool_tokens(self, x: torch.Tensor, patch_valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        return x[:, :self.num_prefix_tokens].mean(dim=1)


# As saved (transformers' on-disk names for Pixio, ViT's but norm1/norm2), with the class tokens split.
_RULES: Dict[str, Rule] = {
    **{k: Rule(tuple(n.format(p='', i='{i}') for n in rule.sources), rule.fill)
       for k, rule in VIT_LAYER_NAMES.items() if not k.startswith(('head.', 'pre_logits.', 'cls_token'))},
    'cls_token': Rule(('embeddings.cls_token',), token_rows(0, 1)),
    'reg_token': Rule(('embeddings.cls_token',), token_rows(1)),
    'blocks.{i}.norm1.weight': Rule(('encoder.layer.{i}.norm1.weight',)),
    'blocks.{i}.norm1.bias': Rule(('encoder.layer.{i}.norm1.bias',)),
    'blocks.{i}.norm2.weight': Rule(('encoder.layer.{i}.norm2.weight',)),
    'blocks.{i}.norm2.bias': Rule(('encoder.layer.{i}.norm2.bias',)),
}


class PixioCheckpoint(TransformersCheckpoint):
    """A transformers ``PixioModel`` folder (module docstring)."""
    format = 'pixio'
    RULES = _RULES
    CLASSES = {'PixioModel': None, 'PixioBackbone': 'its feature maps of chosen stages are not this model\'s output'}
    PREPROCESSING_DEFAULTS = assumed_preprocessing(
        'bicubic', 1.0, 'squash', "not recorded by the folder; ImageNet's mean and std, as Pixio's processor",
        mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))

    @property
    def _settings(self) -> Dict[str, Any]:
        """config.json, with the MLP width its ``mlp_ratio`` gives (Pixio's MLP is ``int(hidden * mlp_ratio)``)."""
        cfg = dict(self.source_config)
        ratio, dim = cfg.get('mlp_ratio', 4), cfg.get('hidden_size')
        if isinstance(ratio, (int, float)) and not isinstance(ratio, bool) and _is_int(dim):
            cfg['intermediate_size'] = int(dim * ratio)
        return cfg

    def _infer(self) -> SimpleViTConfig:
        if self._config_path is None:
            raise ViTVariantsError('a transformers Pixio folder needs its config.json next to the weights',
                                   path=self.path, key='config.json')
        self._source_class()
        self._prefix = ''
        network = self._network(eps_default=1e-6)
        tokens = self._settings.get('n_cls_tokens', 1)
        if not _is_int(tokens) or tokens < 1:
            raise ViTVariantsError(f'expected a positive integer, got {tokens!r}', path=self._config_path,
                                   key='n_cls_tokens')
        shape = self._shape('embeddings.cls_token')
        if shape != (1, tokens, network['embed_dim']):
            raise self._error(f"config.json says n_cls_tokens={tokens}", key='embeddings.cls_token',
                              shapes=(shape, (1, tokens, network['embed_dim'])))
        self._check_no_extra_layer(network['depth'], 'encoder.layer.{i}.norm1.weight')
        qkv_bias = self._settings.get('qkv_bias', True)
        if not isinstance(qkv_bias, bool):
            raise ViTVariantsError(f'expected true or false, got {qkv_bias!r}', path=self._config_path, key='qkv_bias')
        self.notes.append(f'detected: a transformers Pixio tower ({tokens} class tokens with table rows: the first as '
                          '[CLS], the rest as registers; pooled output: the mean of the normed class tokens)')
        return SimpleViTConfig.of(**network, num_classes=0, global_pool=PrefixMeanPool(), class_token=True,
                                  reg_tokens=tokens - 1, pos_embed='learn', pos_embed_cls_slot=True,
                                  pos_embed_reg_slots=tokens > 1, pos_embed_resample='hf', final_norm=True,
                                  fc_norm=False, patch_bias=True, qkv_bias=qkv_bias, grid_mode='crop')


FAMILY = Family(
    'pixio',
    # before the refusal of other transformers model types (2000)
    routes=(Route(1975., lambda p: p.model_type in PIXIO_MODEL_TYPES, PixioCheckpoint),),
)
