"""transformers ViT folders: ``config.json`` plus ``model.safetensors`` / ``pytorch_model.bin`` (or shards).

Covers ``ViTForImageClassification`` (``vit.`` prefix, ``classifier``) and bare ``ViTModel``
(no prefix, optional ``pooler``). The pooler is Linear + tanh on the [CLS] token, which is
exactly SimpleVisionTransformer's ``pre_logits`` under token pooling, so it maps there
(``rep_size``) instead of being dropped.
"""
import os
from typing import Any, Dict, List, Optional, Tuple

import torch
from timm.layers import to_2tuple

from ..errors import ViTVariantsError
from .source import PlanItem, SourceCheckpoint, as_is
from ..limits import DEFAULT_LIMITS, Limits
from .files import read_json
from .torch_files import open_store

__all__ = ['HFCheckpoint']

_SINGLE_FILES = ('model.safetensors', 'pytorch_model.bin')
_INDEX_FILES = ('model.safetensors.index.json', 'pytorch_model.bin.index.json')
# transformers activation names -> act_layer ('gelu_new' and 'gelu_pytorch_tanh' are both the tanh form).
_ACTS = {'gelu': 'gelu', 'gelu_new': 'gelu_tanh', 'gelu_pytorch_tanh': 'gelu_tanh', 'quick_gelu': 'quick_gelu'}
_UNSUPPORTED = {
    'embeddings.mask_token': 'the mask token of ViTForMaskedImageModeling is not supported',
}


def _cat(*parts: torch.Tensor) -> torch.Tensor:
    return torch.cat(parts, dim=0)


def _weight_files(folder: str, limits: Limits) -> List[str]:
    for name in _SINGLE_FILES:
        if os.path.isfile(os.path.join(folder, name)):
            return [os.path.join(folder, name)]
    for name in _INDEX_FILES:
        index_path = os.path.join(folder, name)
        if os.path.isfile(index_path):
            weight_map = read_json(index_path, limits).get('weight_map')
            if not isinstance(weight_map, dict) or not weight_map:
                raise ViTVariantsError('shard index has no weight_map', path=index_path, key='weight_map')
            shards = sorted(set(str(v) for v in weight_map.values()))
            for shard in shards:
                if os.path.basename(shard) != shard:
                    raise ViTVariantsError('shard names must be plain file names', path=index_path, key=shard)
            return [os.path.join(folder, shard) for shard in shards]
    raise ViTVariantsError(f'no weight file found (looked for {", ".join(_SINGLE_FILES + _INDEX_FILES)})',
                           path=folder)


class HFCheckpoint(SourceCheckpoint):
    format = 'hf'

    def __init__(self, path: str, **hints: Any) -> None:
        super().__init__(path, hints.get('limits', DEFAULT_LIMITS))
        if os.path.isdir(self.path):
            folder, files = self.path, None
        else:
            folder, files = os.path.dirname(os.path.abspath(self.path)), [self.path]
        self._config_path = os.path.join(folder, 'config.json')
        if not os.path.isfile(self._config_path):
            raise ViTVariantsError('a transformers ViT needs its config.json next to the weights', path=self.path,
                                   key='config.json')
        self.source_config = read_json(self._config_path, self.limits)
        self._open(open_store(files or _weight_files(folder, self.limits)), hints)

    def _config(self, name: str, default: Any = None, kind: type = int) -> Any:
        value = self.source_config.get(name, default)
        if value is None:
            raise ViTVariantsError('missing config entry', path=self._config_path, key=name)
        if kind is int and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
            raise ViTVariantsError(f'expected a positive integer, got {value!r}', path=self._config_path, key=name)
        return value

    def _size_pair(self, name: str) -> Tuple[int, int]:
        value = self.source_config.get(name)
        if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, int) and v > 0 for v in value):
            return int(value[0]), int(value[1])
        return to_2tuple(self._config(name))

    def _plan_conversion(self, hints: Dict[str, Any]) -> None:
        cfg_path = self._config_path
        model_type = self.source_config.get('model_type')
        if model_type != 'vit':
            raise ViTVariantsError(f"model_type {model_type!r} is not a transformers ViT ('vit')", path=cfg_path,
                                   key='model_type')
        names = self._store.names()
        prefix = hints.get('prefix')
        if prefix is None:
            prefix = 'vit.' if any(n.startswith('vit.') for n in names) else ''
        base = {n[len(prefix):]: n for n in names if n.startswith(prefix)}
        heads = {n: n for n in names if not n.startswith(prefix)} if prefix else {}
        for short, reason in _UNSUPPORTED.items():
            if short in base:
                raise self._error(reason, key=base[short])
        used = set()

        def take(table: Dict[str, str], name: str, expected: Tuple[int, ...]) -> str:
            if name not in table:
                raise self._error('missing key', key=(prefix if table is base else '') + name)
            key = table[name]
            self._expect_shape(key, self._store.shape(key), expected)
            used.add(key)
            return key

        def plan(ours: str, shape: Tuple[int, ...], sources: Tuple[str, ...], build=as_is) -> None:
            self._plan.append(PlanItem(ours, tuple(shape), sources, build))

        dim = self._config('hidden_size')
        depth = self._config('num_hidden_layers')
        num_heads = self._config('num_attention_heads')
        mlp_dim = self._config('intermediate_size')
        in_chans = self._config('num_channels', 3)
        patch = self._size_pair('patch_size')
        img = self._size_pair('image_size')
        for name, limit, value in (('hidden_size', 'width', dim), ('num_hidden_layers', 'depth', depth),
                                   ('num_attention_heads', 'heads', num_heads), ('intermediate_size', 'mlp', mlp_dim),
                                   ('image_size', 'img_size', max(img)), ('patch_size', 'img_size', max(patch))):
            self.limits.check(limit, value, path=cfg_path, key=name)
        if dim % num_heads:
            raise ViTVariantsError(f'hidden_size {dim} is not divisible by {num_heads} heads', path=cfg_path,
                                   key='num_attention_heads')
        if hints.get('num_heads') not in (None, num_heads):
            raise ViTVariantsError(f'--num-heads {hints["num_heads"]} contradicts num_attention_heads={num_heads}',
                                   path=cfg_path, key='num_attention_heads')
        act = self.source_config.get('hidden_act', 'gelu')
        if not isinstance(act, str) or act not in _ACTS:
            raise ViTVariantsError(f'hidden_act {act!r} is not supported ({", ".join(_ACTS)})', path=cfg_path,
                                   key='hidden_act')
        eps = self.source_config.get('layer_norm_eps', 1e-12)
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
            raise ViTVariantsError(f'expected a positive number, got {eps!r}', path=cfg_path, key='layer_norm_eps')
        qkv_bias = bool(self.source_config.get('qkv_bias', True))
        self.grid = (img[0] // patch[0], img[1] // patch[1])
        if self.grid[0] == 0 or self.grid[1] == 0:
            raise ViTVariantsError(f'image_size {img} is smaller than patch_size {patch}', path=cfg_path,
                                   key='image_size')
        tokens = 1 + self.grid[0] * self.grid[1]
        self.limits.check('tokens', tokens - 1, path=cfg_path, key='image_size')

        emb = 'embeddings.'
        plan('patch_embed.proj.weight', (dim, in_chans) + patch,
             (take(base, f'{emb}patch_embeddings.projection.weight', (dim, in_chans) + patch),))
        plan('patch_embed.proj.bias', (dim,), (take(base, f'{emb}patch_embeddings.projection.bias', (dim,)),))
        plan('cls_token', (1, 1, dim), (take(base, f'{emb}cls_token', (1, 1, dim)),))
        plan('pos_embed', (1, tokens, dim), (take(base, f'{emb}position_embeddings', (1, tokens, dim)),))

        for i in range(depth):
            hf = f'encoder.layer.{i}.'
            b = f'blocks.{i}.'
            for ours, theirs in (('norm1', 'layernorm_before'), ('norm2', 'layernorm_after')):
                plan(f'{b}{ours}.weight', (dim,), (take(base, f'{hf}{theirs}.weight', (dim,)),))
                plan(f'{b}{ours}.bias', (dim,), (take(base, f'{hf}{theirs}.bias', (dim,)),))
            qkv = [f'{hf}attention.attention.{n}' for n in ('query', 'key', 'value')]
            plan(f'{b}attn.qkv.weight', (3 * dim, dim), tuple(take(base, f'{n}.weight', (dim, dim)) for n in qkv), _cat)
            if qkv_bias:
                plan(f'{b}attn.qkv.bias', (3 * dim,), tuple(take(base, f'{n}.bias', (dim,)) for n in qkv), _cat)
            for ours, theirs, shape in (
                    ('attn.proj', 'attention.output.dense', (dim, dim)),
                    ('mlp.fc1', 'intermediate.dense', (mlp_dim, dim)),
                    ('mlp.fc2', 'output.dense', (dim, mlp_dim))):
                plan(f'{b}{ours}.weight', shape, (take(base, f'{hf}{theirs}.weight', shape),))
                plan(f'{b}{ours}.bias', shape[:1], (take(base, f'{hf}{theirs}.bias', shape[:1]),))
        extra_layer = f'encoder.layer.{depth}.layernorm_before.weight'
        if extra_layer in base:
            raise self._error(f'inconsistent depth: config says num_hidden_layers={depth}', key=base[extra_layer])
        plan('norm.weight', (dim,), (take(base, 'layernorm.weight', (dim,)),))
        plan('norm.bias', (dim,), (take(base, 'layernorm.bias', (dim,)),))

        rep_size: Optional[int] = None
        if 'pooler.dense.weight' in base:
            pooler_act = self.source_config.get('pooler_act', 'tanh')
            if pooler_act != 'tanh':
                raise ViTVariantsError(f'pooler_act {pooler_act!r} is not supported (only tanh)', path=cfg_path,
                                       key='pooler_act')
            rep_size = self._store.shape(base['pooler.dense.weight'])[0]
            self._check_dims(base['pooler.dense.weight'], width=rep_size)
            plan('pre_logits.fc.weight', (rep_size, dim), (take(base, 'pooler.dense.weight', (rep_size, dim)),))
            plan('pre_logits.fc.bias', (rep_size,), (take(base, 'pooler.dense.bias', (rep_size,)),))
        num_classes = 0
        if 'classifier.weight' in heads:
            if rep_size is not None:
                raise self._error('a pooler together with a classifier is not a transformers ViT layout',
                                  key=base['pooler.dense.weight'])
            num_classes = self._store.shape(heads['classifier.weight'])[0]
            self._check_dims(heads['classifier.weight'], classes=num_classes)
            plan('head.weight', (num_classes, dim), (take(heads, 'classifier.weight', (num_classes, dim)),))
            plan('head.bias', (num_classes,), (take(heads, 'classifier.bias', (num_classes,)),))

        unknown = sorted(set(names) - used)
        if unknown:
            raise self._error(f'unknown key for a transformers ViT ({len(unknown)} unexpected)', key=unknown[0])

        id2label = self.source_config.get('id2label')
        if num_classes and isinstance(id2label, dict) and len(id2label) == num_classes:
            try:
                self.label_names = [str(id2label[k]) for k in sorted(id2label, key=int)]
            except (TypeError, ValueError):
                self.label_names = None
            if self.label_names is not None and sorted(int(k) for k in id2label) != list(range(num_classes)):
                self.label_names = None

        self.model_args = dict(
            img_size=img[0] if img[0] == img[1] else img,
            patch_size=patch[0] if patch[0] == patch[1] else patch,
            in_chans=in_chans,
            num_classes=num_classes,
            global_pool='token',
            embed_dim=dim,
            depth=depth,
            num_heads=num_heads,
            mlp_dim=mlp_dim,
            qkv_bias=qkv_bias,
            class_token=True,
            pos_embed='learn',
            pos_embed_cls_slot=True,
            pos_embed_resample='hf',
            rep_size=rep_size,
            act_layer=hints.get('act_layer') or _ACTS[act],
            norm_eps=hints.get('norm_eps') or float(eps),
        )
