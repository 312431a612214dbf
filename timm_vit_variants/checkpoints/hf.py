"""transformers ViT folders: ``config.json`` plus ``model.safetensors`` / ``pytorch_model.bin`` (or shards).

Covers ``ViTForImageClassification`` (``vit.`` prefix, ``classifier``) and bare ``ViTModel``
(no prefix, optional ``pooler``). The pooler is Linear + tanh on the [CLS] token, which is
exactly SimpleVisionTransformer's ``pre_logits`` under token pooling, so it maps there
(``rep_size``) instead of being dropped. ``TransformersCheckpoint`` is what every transformers
reader shares (the encoder settings of ``config.json``, ``preprocessor_config.json``, the label names of
``id2label``, and the class the folder declares, ``architectures[0]``, which must be one of the reader's ``CLASSES``:
a folder is read as what that class outputs, or refused naming the part of it the model does not express); the
SigLIP towers' readers (``hf_siglip.py``) sit on it beside ``HFCheckpoint``.
"""
import os
from typing import Any, Dict, Optional, Set, Tuple

from ..config import SimpleViTConfig, pair
from ..errors import ViTVariantsError
from .files import read_json
from .fills import stack_rows
from .preprocessing import assumed_preprocessing, channel_values
from .source import Rule, SourceCheckpoint

__all__ = ['TransformersCheckpoint', 'HFCheckpoint', 'VIT_MODEL_TYPES']

# transformers activation names -> act_layer ('gelu_new' and 'gelu_pytorch_tanh' are both the tanh form).
_ACTS = {'gelu': 'gelu', 'gelu_new': 'gelu_tanh', 'gelu_pytorch_tanh': 'gelu_tanh', 'quick_gelu': 'quick_gelu'}
_UNSUPPORTED = {'embeddings.mask_token': 'the mask token of ViTForMaskedImageModeling is not supported'}
# The models transformers saves under ViT's names: model_type -> (its classifier class's prefix, whether it has a [CLS]
# token, {class: None, or what part of it is not expressed}). ViT-MSN is ViT; I-JEPA has no [CLS] (a table without its
# slot) and its classifier reads the mean of the normed tokens.
VIT_MODEL_TYPES: Dict[str, Tuple[str, bool, Dict[str, Optional[str]]]] = {
    'vit': ('vit.', True, {'ViTModel': None, 'ViTForImageClassification': None,
                           'ViTForMaskedImageModeling': _UNSUPPORTED['embeddings.mask_token']}),
    'vit_msn': ('vit.', True, {'ViTMSNModel': None}),
    'ijepa': ('ijepa.', False, {'IJepaModel': None, 'IJepaForImageClassification': None}),
}
# PIL resample codes used in transformers' preprocessor_config.json.
_PIL_RESAMPLE = {0: 'nearest', 1: 'lanczos', 2: 'bilinear', 3: 'bicubic', 4: 'box', 5: 'hamming'}
_QKV = tuple(f'{{p}}encoder.layer.{{i}}.attention.attention.{n}' for n in ('query', 'key', 'value'))

# Our key -> transformers names; {p} is 'vit.' for ViTForImageClassification, {i} the layer.
_TABLE: Dict[str, Rule] = {
    'patch_embed.proj.weight': Rule(('{p}embeddings.patch_embeddings.projection.weight',)),
    'patch_embed.proj.bias': Rule(('{p}embeddings.patch_embeddings.projection.bias',)),
    'cls_token': Rule(('{p}embeddings.cls_token',)),
    'pos_embed': Rule(('{p}embeddings.position_embeddings',)),
    'blocks.{i}.norm1.weight': Rule(('{p}encoder.layer.{i}.layernorm_before.weight',)),
    'blocks.{i}.norm1.bias': Rule(('{p}encoder.layer.{i}.layernorm_before.bias',)),
    'blocks.{i}.attn.qkv.weight': Rule(tuple(n + '.weight' for n in _QKV), stack_rows),
    'blocks.{i}.attn.qkv.bias': Rule(tuple(n + '.bias' for n in _QKV), stack_rows),
    'blocks.{i}.attn.proj.weight': Rule(('{p}encoder.layer.{i}.attention.output.dense.weight',)),
    'blocks.{i}.attn.proj.bias': Rule(('{p}encoder.layer.{i}.attention.output.dense.bias',)),
    'blocks.{i}.norm2.weight': Rule(('{p}encoder.layer.{i}.layernorm_after.weight',)),
    'blocks.{i}.norm2.bias': Rule(('{p}encoder.layer.{i}.layernorm_after.bias',)),
    'blocks.{i}.mlp.fc1.weight': Rule(('{p}encoder.layer.{i}.intermediate.dense.weight',)),
    'blocks.{i}.mlp.fc1.bias': Rule(('{p}encoder.layer.{i}.intermediate.dense.bias',)),
    'blocks.{i}.mlp.fc2.weight': Rule(('{p}encoder.layer.{i}.output.dense.weight',)),
    'blocks.{i}.mlp.fc2.bias': Rule(('{p}encoder.layer.{i}.output.dense.bias',)),
    'norm.weight': Rule(('{p}layernorm.weight',)),
    'norm.bias': Rule(('{p}layernorm.bias',)),
    'pre_logits.fc.weight': Rule(('{p}pooler.dense.weight',)),
    'pre_logits.fc.bias': Rule(('{p}pooler.dense.bias',)),
    'head.weight': Rule(('classifier.weight',)),
    'head.bias': Rule(('classifier.bias',)),
}


class TransformersCheckpoint(SourceCheckpoint):
    """What every transformers reader shares: the encoder's ``config.json`` entries, each checked, and the image
    processor's ``preprocessor_config.json``."""
    format = 'hf'
    # The transformers classes (``architectures[0]``) the reader converts: None, or what part of the class this
    # model does not express (the refusal's reason).
    CLASSES: Dict[str, Optional[str]] = {}

    @property
    def _settings(self) -> Dict[str, Any]:
        """The part of ``config.json`` that describes the vision network (all of it for a ViT)."""
        return self.source_config

    def _source_class(self) -> Optional[str]:
        """The transformers class the folder declares (``config.json``'s ``architectures[0]``; None when it names
        none), refused unless it is one of ``CLASSES``: a class whose output this model does not express is refused
        naming the part that is not."""
        architectures = self.source_config.get('architectures')
        if not isinstance(architectures, list) or not architectures or not isinstance(architectures[0], str):
            return None
        name = architectures[0]
        if name not in self.CLASSES:
            raise ViTVariantsError(f'{name} is not a transformers class the reader of model_type '
                                   f'{self.source_config.get("model_type")!r} converts (it reads '
                                   f'{", ".join(c for c, why in self.CLASSES.items() if why is None)})',
                                   path=self._config_path, key='architectures')
        if self.CLASSES[name] is not None:
            raise ViTVariantsError(f'{name}: {self.CLASSES[name]}', path=self._config_path, key='architectures')
        return name

    def _vision_tower(self, hints: Dict[str, Any], skipped: str, keep: Tuple[str, ...] = ()) -> None:
        """Set ``_prefix`` to the vision tower's: the caller's ``prefix`` hint, else ``vision_model.`` in a two-tower
        folder (CLIP, SigLIP), else none; one note names what lies outside it (``skipped`` says what that is), apart
        from the tensors in ``keep`` that the reader also takes (CLIP's ``visual_projection``)."""
        names = self._store.names()
        prefix = hints.get('prefix')
        self._prefix = ('vision_model.' if any(n.startswith('vision_model.') for n in names) else '') \
            if prefix is None else prefix
        others = [n for n in names if not n.startswith(self._prefix) and n not in keep]
        if others:
            self.notes.append(f'read the vision tower under {self._prefix!r}; skipped {len(others)} other tensors '
                              f'({skipped}), which the image model does not use')

    def _check_no_extra_layer(self, depth: int, layer_norm: str) -> None:
        """Refuse weights holding a layer past the config's ``num_hidden_layers`` (``layer_norm``: that layer's first
        norm weight, with ``{i}`` for its index)."""
        extra_layer = self._prefix + layer_norm.format(i=depth)
        if extra_layer in self._store:
            raise self._error(f'inconsistent depth: config says num_hidden_layers={depth}', key=extra_layer)

    def _entry(self, name: str, default: Any = None) -> int:
        value = self._settings.get(name, default)
        if value is None:
            raise ViTVariantsError('missing config entry', path=self._config_path, key=name)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ViTVariantsError(f'expected a positive integer, got {value!r}', path=self._config_path, key=name)
        return value

    def _size(self, name: str) -> Tuple[int, int]:
        value = self._settings.get(name)
        if isinstance(value, (list, tuple)):
            try:
                return pair(value, name)
            except ViTVariantsError as e:
                raise ViTVariantsError(e.reason, path=self._config_path, key=name) from None
        size = self._entry(name)
        return size, size

    def _image_size(self, patch: Tuple[int, int]) -> Tuple[int, int]:
        """The nominal image size, which a ViT config records."""
        return self._size('image_size')

    def _network(self, hints: Dict[str, Any], eps_default: float) -> Dict[str, Any]:
        """The encoder's settings from ``config.json``, each checked (and against the limits) before use."""
        cfg_path = self._config_path
        dim = self._entry('hidden_size')
        depth = self._entry('num_hidden_layers')
        num_heads = self._entry('num_attention_heads')
        mlp_dim = self._entry('intermediate_size')
        in_chans = self._entry('num_channels', 3)
        patch = self._size('patch_size')
        img = self._image_size(patch)
        for name, limit, value in (('hidden_size', 'width', dim), ('num_hidden_layers', 'depth', depth),
                                   ('num_attention_heads', 'heads', num_heads), ('intermediate_size', 'mlp', mlp_dim),
                                   ('image_size', 'img_size', max(img)), ('patch_size', 'img_size', max(patch))):
            self.limits.check(limit, value, path=cfg_path, key=name)
        if dim % num_heads:
            raise ViTVariantsError(f'hidden_size {dim} is not divisible by {num_heads} heads', path=cfg_path,
                                   key='num_attention_heads')
        if hints.get('num_heads') not in (None, num_heads):
            raise ViTVariantsError(f'num_heads={hints["num_heads"]} (given) contradicts num_attention_heads={num_heads}',
                                   path=cfg_path, key='num_attention_heads')
        act = self._settings.get('hidden_act', 'gelu')
        if not isinstance(act, str) or act not in _ACTS:
            raise ViTVariantsError(f'hidden_act {act!r} is not supported ({", ".join(_ACTS)})', path=cfg_path,
                                   key='hidden_act')
        eps = self._settings.get('layer_norm_eps', eps_default)
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
            raise ViTVariantsError(f'expected a positive number, got {eps!r}', path=cfg_path, key='layer_norm_eps')
        self.grid = (img[0] // patch[0], img[1] // patch[1])
        if self.grid[0] == 0 or self.grid[1] == 0:
            raise ViTVariantsError(f'image_size {img} is smaller than patch_size {patch}', path=cfg_path,
                                   key='image_size')
        self.limits.check('tokens', self.grid[0] * self.grid[1], path=cfg_path, key='image_size')
        return dict(img_size=img, patch_size=patch, in_chans=in_chans, embed_dim=dim, depth=depth,
                    num_heads=num_heads, mlp_dim=mlp_dim, act_layer=hints.get('act_layer') or _ACTS[act],
                    norm_eps=hints.get('norm_eps') or float(eps))

    def _labels(self, num_classes: int) -> Optional[list]:
        """The class names of ``config.json``'s ``id2label`` when it names each of ``num_classes`` once."""
        id2label = self.source_config.get('id2label')
        if not num_classes or not isinstance(id2label, dict) or len(id2label) != num_classes:
            return None
        try:
            if sorted(int(k) for k in id2label) != list(range(num_classes)):
                return None
            return [str(id2label[k]) for k in sorted(id2label, key=int)]
        except (TypeError, ValueError):
            return None

    def _recorded_preprocessing(self) -> Dict[str, Any]:
        """The image processor's mean/std/resample from ``preprocessor_config.json``, when present, each checked."""
        cfg: Dict[str, Any] = {}
        proc_file = os.path.join(os.path.dirname(self._config_path), 'preprocessor_config.json')
        if not os.path.isfile(proc_file):
            return cfg
        proc = read_json(proc_file, self.limits)
        chans = self.config.in_chans
        mean, std = proc.get('image_mean'), proc.get('image_std')
        mean = None if mean is None else channel_values(mean, chans, False, proc_file, 'image_mean')
        std = None if std is None else channel_values(std, chans, True, proc_file, 'image_std')
        if mean is not None and std is not None:
            cfg['mean'], cfg['std'] = mean, std
        resample = proc.get('resample')
        if resample is not None:
            if not isinstance(resample, int) or isinstance(resample, bool) or resample not in _PIL_RESAMPLE:
                raise ViTVariantsError(f'unknown PIL resample code {resample!r} (expected one of '
                                       f'{", ".join(f"{k} ({v})" for k, v in _PIL_RESAMPLE.items())})',
                                       path=proc_file, key='resample')
            cfg['interpolation'] = _PIL_RESAMPLE[resample]
        if proc.get('do_resize', True) and not proc.get('do_center_crop', False):
            cfg['crop_pct'], cfg['crop_mode'] = 1.0, 'squash'  # the image processor resizes straight to the size
        return cfg


class HFCheckpoint(TransformersCheckpoint):
    """A transformers ViT folder (``ViTForImageClassification``, ``ViTModel``), or one of a model saved under ViT's
    names (``VIT_MODEL_TYPES``)."""
    RULES = _TABLE
    PREPROCESSING_DEFAULTS = assumed_preprocessing(
        'bilinear', 1.0, 'squash', "not recorded by the folder; transformers' ViTImageProcessor defaults")

    @property
    def CLASSES(self) -> Dict[str, Optional[str]]:  # type: ignore[override]  # the folder's model_type decides
        return VIT_MODEL_TYPES.get(self.source_config.get('model_type'), ('', True, {}))[2]

    def _candidates(self) -> Set[str]:
        # every name: a ViTForImageClassification's classifier sits outside its 'vit.' prefix
        return set(self._store.names())

    def _infer(self, hints: Dict[str, Any]) -> SimpleViTConfig:
        cfg_path = self._config_path
        if cfg_path is None:
            raise ViTVariantsError('a transformers ViT needs its config.json next to the weights', path=self.path,
                                   key='config.json')
        model_type = self.source_config.get('model_type')
        if model_type not in VIT_MODEL_TYPES:
            raise ViTVariantsError(f"model_type {model_type!r} is not a transformers ViT "
                                   f"({', '.join(VIT_MODEL_TYPES)})", path=cfg_path, key='model_type')
        stem, class_token, _ = VIT_MODEL_TYPES[model_type]
        self._source_class()
        names = self._store.names()
        prefix = hints.get('prefix')
        self._prefix = (stem if any(n.startswith(stem) for n in names) else '') if prefix is None else prefix
        for short, reason in _UNSUPPORTED.items():
            if self._prefix + short in self._store:
                raise self._error(reason, key=self._prefix + short)
        network = self._network(hints, eps_default=1e-12)
        depth = network['depth']
        self._check_no_extra_layer(depth, 'encoder.layer.{i}.layernorm_before.weight')

        pooler = self._prefix + 'pooler.dense.weight'
        rep_size = None
        if pooler in self._store and not class_token:
            raise self._error('the pooler reads the first patch token (there is no [CLS]), which this model does not '
                              'express', key=pooler)
        if pooler in self._store:
            if self.source_config.get('pooler_act', 'tanh') != 'tanh':
                raise ViTVariantsError(f"pooler_act {self.source_config['pooler_act']!r} is not supported (only tanh)",
                                       path=cfg_path, key='pooler_act')
            if 'classifier.weight' in self._store:
                raise self._error('a pooler together with a classifier is not a transformers ViT layout', key=pooler)
            rep_size = self._shape(pooler)[0]
        num_classes = self._shape('classifier.weight')[0] if 'classifier.weight' in self._store else 0
        self._check_dims('classifier.weight', classes=num_classes, width=rep_size)
        self.label_names = self._labels(num_classes)
        return SimpleViTConfig.of(
            num_classes=num_classes, global_pool='token' if class_token else 'avg', fc_norm=False,
            qkv_bias=bool(self.source_config.get('qkv_bias', True)), class_token=class_token, pos_embed='learn',
            pos_embed_cls_slot=class_token, pos_embed_resample='hf', rep_size=rep_size, **network)
