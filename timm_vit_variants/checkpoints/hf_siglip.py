"""transformers SigLIP image towers: ``SiglipVisionModel`` and ``SiglipModel`` folders (the vision part), and
SigLIP 2 NaFlex's ``Siglip2VisionModel`` and ``Siglip2Model``; the image classifiers of both.

``SiglipVisionModel`` saves its tensors without a prefix, ``SiglipModel`` under ``vision_model.``
beside a text tower and the logit scale and bias, which are skipped. The encoder is a plain ViT with
a learned (N, D) position embedding and no [CLS] token; its MAP head (``head``: a probe, an
``nn.MultiheadAttention`` with one packed ``in_proj``, a LayerNorm and an MLP) is this family's
``attn_pool``. ``SiglipForImageClassification`` (and SigLIP 2's) is the tower under ``vision_model.`` with a
``classifier`` on the mean of the final-norm tokens (masked to the valid patches in SigLIP 2): read as 'avg' pooling
and that head; its tower's MAP head, which its logits never use, is skipped. The patch conv is
``padding="valid"``, so the grid crops, as big_vision's does.
SigLIP 2's NaFlex tower embeds P-P-C flattened patches with a Linear and resizes its square (G*G, D)
table to each image's grid (bilinear, antialiased: FlexiViT's rule); its config records ``num_patches``
instead of an image size.
"""
import math
from typing import Any, Dict, Set, Tuple

from ..config import SimpleViTConfig
from ..errors import ViTVariantsError
from .fills import add_leading_axis, linear_patch_kernel, split_rows, stack_rows
from .hf import TransformersCheckpoint
from .naflex_reader import NaFlexReader
from .preprocessing import assumed_preprocessing
from .source import Rule

__all__ = ['HFSiglipCheckpoint', 'HFSiglip2Checkpoint', 'SIGLIP_MODEL_TYPES']

SIGLIP_MODEL_TYPES = ('siglip', 'siglip_vision_model', 'siglip2', 'siglip2_vision_model')
_TWO_TOWER = ('siglip', 'siglip2')
_QKV = tuple(f'{{p}}encoder.layers.{{i}}.self_attn.{n}_proj' for n in ('q', 'k', 'v'))
_IN_PROJ = '{p}head.attention.in_proj_'
_CLASSIFIER = ('classifier.weight', 'classifier.bias')  # *ForImageClassification's head, outside the tower

# Our key -> transformers names; {p} is '' or 'vision_model.', {i} the layer.
_TABLE: Dict[str, Rule] = {
    'patch_embed.proj.weight': Rule(('{p}embeddings.patch_embedding.weight',)),
    'patch_embed.proj.bias': Rule(('{p}embeddings.patch_embedding.bias',)),
    'pos_embed': Rule(('{p}embeddings.position_embedding.weight',), add_leading_axis),
    'blocks.{i}.norm1.weight': Rule(('{p}encoder.layers.{i}.layer_norm1.weight',)),
    'blocks.{i}.norm1.bias': Rule(('{p}encoder.layers.{i}.layer_norm1.bias',)),
    'blocks.{i}.attn.qkv.weight': Rule(tuple(n + '.weight' for n in _QKV), stack_rows),
    'blocks.{i}.attn.qkv.bias': Rule(tuple(n + '.bias' for n in _QKV), stack_rows),
    'blocks.{i}.attn.proj.weight': Rule(('{p}encoder.layers.{i}.self_attn.out_proj.weight',)),
    'blocks.{i}.attn.proj.bias': Rule(('{p}encoder.layers.{i}.self_attn.out_proj.bias',)),
    'blocks.{i}.norm2.weight': Rule(('{p}encoder.layers.{i}.layer_norm2.weight',)),
    'blocks.{i}.norm2.bias': Rule(('{p}encoder.layers.{i}.layer_norm2.bias',)),
    'blocks.{i}.mlp.fc1.weight': Rule(('{p}encoder.layers.{i}.mlp.fc1.weight',)),
    'blocks.{i}.mlp.fc1.bias': Rule(('{p}encoder.layers.{i}.mlp.fc1.bias',)),
    'blocks.{i}.mlp.fc2.weight': Rule(('{p}encoder.layers.{i}.mlp.fc2.weight',)),
    'blocks.{i}.mlp.fc2.bias': Rule(('{p}encoder.layers.{i}.mlp.fc2.bias',)),
    'norm.weight': Rule(('{p}post_layernorm.weight',)),
    'norm.bias': Rule(('{p}post_layernorm.bias',)),
    'attn_pool.latent': Rule(('{p}head.probe',)),
    # nn.MultiheadAttention packs q, k and v as the rows of one in_proj; timm's pool has q and kv.
    'attn_pool.q.weight': Rule((_IN_PROJ + 'weight',), split_rows(0, 1, 3)),
    'attn_pool.q.bias': Rule((_IN_PROJ + 'bias',), split_rows(0, 1, 3)),
    'attn_pool.kv.weight': Rule((_IN_PROJ + 'weight',), split_rows(1, 3, 3)),
    'attn_pool.kv.bias': Rule((_IN_PROJ + 'bias',), split_rows(1, 3, 3)),
    'attn_pool.proj.weight': Rule(('{p}head.attention.out_proj.weight',)),
    'attn_pool.proj.bias': Rule(('{p}head.attention.out_proj.bias',)),
    'attn_pool.norm.weight': Rule(('{p}head.layernorm.weight',)),
    'attn_pool.norm.bias': Rule(('{p}head.layernorm.bias',)),
    'attn_pool.mlp.fc1.weight': Rule(('{p}head.mlp.fc1.weight',)),
    'attn_pool.mlp.fc1.bias': Rule(('{p}head.mlp.fc1.bias',)),
    'attn_pool.mlp.fc2.weight': Rule(('{p}head.mlp.fc2.weight',)),
    'attn_pool.mlp.fc2.bias': Rule(('{p}head.mlp.fc2.bias',)),
    'head.weight': Rule((_CLASSIFIER[0],)),
    'head.bias': Rule((_CLASSIFIER[1],)),
}

# SigLIP 2: nn.Linear(C*P*P, D) over P-P-C flattened patches.
_SIGLIP2_TABLE = dict(_TABLE, **{'patch_embed.proj.weight': Rule(('{p}embeddings.patch_embedding.weight',),
                                                                 linear_patch_kernel)})


class HFSiglipCheckpoint(TransformersCheckpoint):
    """A transformers SigLIP folder, read as its image tower."""

    RULES = _TABLE
    PREPROCESSING_DEFAULTS = assumed_preprocessing(
        'bicubic', 1.0, 'squash', "not recorded by the folder; transformers' SiglipImageProcessor defaults")
    RESAMPLE = 'hf'  # how the tower resizes its table to another grid
    CLASSES = {'SiglipModel': None, 'SiglipVisionModel': None, 'SiglipForImageClassification': None}
    _classifier = False  # the source is a *ForImageClassification: 'avg' pooling and its classifier, no MAP head

    @property
    def _settings(self) -> Dict[str, Any]:
        nested = self.source_config.get('vision_config')
        return nested if self.source_config.get('model_type') in _TWO_TOWER and isinstance(nested, dict) else \
            self.source_config

    def _infer(self, hints: Dict[str, Any]) -> SimpleViTConfig:
        cfg_path = self._config_path
        if cfg_path is None:
            raise ViTVariantsError('a transformers SigLIP model needs its config.json next to the weights',
                                   path=self.path, key='config.json')
        model_type = self.source_config.get('model_type')
        if model_type in _TWO_TOWER and not isinstance(self.source_config.get('vision_config'), dict):
            raise ViTVariantsError('a SigLIP config.json needs a vision_config', path=cfg_path, key='vision_config')
        source_class = self._source_class()
        self._classifier = source_class.endswith('ForImageClassification') if source_class else \
            _CLASSIFIER[0] in self._store
        self._vision_tower(hints, 'the text tower, logit_scale and logit_bias', keep=_CLASSIFIER)
        network = self._network(hints, eps_default=1e-6)
        depth = network['depth']
        self._check_no_extra_layer(depth, 'encoder.layers.{i}.layer_norm1.weight')
        has_head = bool(self._settings.get('vision_use_head', True)) and f'{self._prefix}head.probe' in self._store
        if not self._classifier:
            return SimpleViTConfig.of(
                num_classes=0, global_pool='map' if has_head else '', qkv_bias=True, class_token=False,
                pos_embed='learn', pos_embed_resample=self.RESAMPLE, grid_mode='crop', patch_embed=self.PATCH_EMBED,
                **network)
        num_classes = self._shape(_CLASSIFIER[0])[0] if _CLASSIFIER[0] in self._store else 0
        self._check_dims(_CLASSIFIER[0], classes=num_classes)
        self.label_names = self._labels(num_classes)
        map_head = self._map_head()
        self.notes.append(f"detected: {source_class or 'an image classifier'}, its classifier on the mean of the "
                          'final-norm tokens (read as avg pooling)'
                          + (f'; skipped its MAP head ({self._prefix}head.*, {len(map_head)} tensors), which its '
                             'logits do not use' if map_head else ''))
        return SimpleViTConfig.of(
            num_classes=num_classes, global_pool='avg', qkv_bias=True, class_token=False, pos_embed='learn',
            pos_embed_resample=self.RESAMPLE, grid_mode='crop', patch_embed=self.PATCH_EMBED, **network)

    def _map_head(self) -> Set[str]:
        """The tower's MAP head tensors (``head.*`` under the prefix)."""
        return {n for n in self._store.names() if n.startswith(self._prefix + 'head.')}

    def _candidates(self) -> Set[str]:
        names = super()._candidates()
        if not self._classifier:
            return names
        return (names - self._map_head()) | {n for n in _CLASSIFIER if n in self._store}


class HFSiglip2Checkpoint(NaFlexReader, HFSiglipCheckpoint):
    """A transformers SigLIP 2 NaFlex folder: a Linear over P-P-C flattened patches and a square (G*G, D) table,
    resized to each image's grid with FlexiViT's rule."""

    RULES = _SIGLIP2_TABLE
    PREPROCESSING_DEFAULTS = assumed_preprocessing(
        'bilinear', 1.0, 'squash', "not recorded by the folder; transformers' Siglip2ImageProcessor defaults")
    RESAMPLE = 'flexi'
    CLASSES = {'Siglip2Model': None, 'Siglip2VisionModel': None, 'Siglip2ForImageClassification': None}

    def _image_size(self, patch: Tuple[int, int]) -> Tuple[int, int]:
        """SigLIP 2 records its square table's ``num_patches``: the nominal size is that grid of patches."""
        tokens = self._entry('num_patches', 256)
        self.limits.check('tokens', tokens, path=self._config_path, key='num_patches')
        side = math.isqrt(tokens)
        if side * side != tokens:
            raise ViTVariantsError(f'num_patches {tokens} is not a square grid', path=self._config_path,
                                   key='num_patches')
        return side * patch[0], side * patch[1]
