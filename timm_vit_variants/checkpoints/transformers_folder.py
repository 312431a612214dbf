"""What every transformers reader shares: a folder's ``config.json`` (``TransformersCheckpoint``: the encoder's
settings each checked, ``preprocessor_config.json``, the label names of ``id2label``, and the class the folder
declares, ``architectures[0]``, which must be one of the reader's ``CLASSES``: a folder is read as what that class
outputs, or refused naming the part of it the model does not express), and transformers' classic ViT layer names
(``VIT_LAYER_NAMES``), which the ViT, DeiT and BEiT folders share.
"""
import os
from typing import Any, Callable, Dict, Optional, Tuple

from ..config import pair
from ..errors import ViTVariantsError
from .files import read_json
from .fills import stack_rows
from .preprocessing import assumed_preprocessing, channel_values
from .source import Rule, SourceCheckpoint

__all__ = ['TransformersCheckpoint', 'VIT_LAYER_NAMES', 'VIT_PROCESSOR_DEFAULTS']

# transformers activation names -> act_layer ('gelu_new' and 'gelu_pytorch_tanh' are both the tanh form).
_ACTS = {'gelu': 'gelu', 'gelu_new': 'gelu_tanh', 'gelu_pytorch_tanh': 'gelu_tanh', 'quick_gelu': 'quick_gelu'}
# PIL resample codes used in transformers' preprocessor_config.json.
_PIL_RESAMPLE = {0: 'nearest', 1: 'lanczos', 2: 'bilinear', 3: 'bicubic', 4: 'box', 5: 'hamming'}
_QKV = tuple(f'{{p}}encoder.layer.{{i}}.attention.attention.{n}' for n in ('query', 'key', 'value'))

# Our key -> transformers names; {p} is 'vit.' for ViTForImageClassification, {i} the layer.
VIT_LAYER_NAMES: Dict[str, Rule] = {
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
# What transformers' ViTImageProcessor does when a folder records no preprocessing.
VIT_PROCESSOR_DEFAULTS = assumed_preprocessing(
    'bilinear', 1.0, 'squash', "not recorded by the folder; transformers' ViTImageProcessor defaults")


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

    def _vision_tower(self, skipped: str, keep: Tuple[str, ...] = (),
                      locate: Optional[Callable[[], str]] = None) -> None:
        """Set ``_prefix`` to the vision tower's: the caller's ``prefix`` hint, else where ``locate`` finds it, else
        ``vision_model.`` in a two-tower folder (CLIP, SigLIP), else none; one note names what lies outside it
        (``skipped`` says what that is), apart from the tensors in ``keep`` that the reader also takes (CLIP's
        ``visual_projection``)."""
        names = self._store.names()
        if self.options.prefix is not None:
            self._prefix = self.options.prefix
        elif locate is not None:
            self._prefix = locate()
        else:
            self._prefix = 'vision_model.' if any(n.startswith('vision_model.') for n in names) else ''
        others = [n for n in names if not n.startswith(self._prefix) and n not in keep]
        if others:
            self.notes.append(f'read the vision tower under {self._prefix!r}; skipped {len(others)} other tensors '
                              f'({skipped}), which the image model does not use')

    def _tower_prefix(self, key: str, tower: str = '') -> str:
        """The one prefix under which ``tower + key`` sits (the tower's tensors start there, ``tower`` included):
        where a model nests its image tower (GIT's ``image_encoder.``, a VLM's ``model.``)."""
        wanted = tower + key
        found = sorted(n[:-len(key)] for n in self._store.names() if n.endswith(wanted))
        if len(found) != 1:
            raise self._error(f'expected one image tower (a {wanted}), found {len(found)}', key=wanted)
        return found[0]

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

    def _network(self, eps_default: float) -> Dict[str, Any]:
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
        if self.options.num_heads not in (None, num_heads):
            raise ViTVariantsError(f'num_heads={self.options.num_heads} (given) contradicts '
                                   f'num_attention_heads={num_heads}',
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
                    num_heads=num_heads, mlp_dim=mlp_dim, act_layer=self.options.act_layer or _ACTS[act],
                    norm_eps=self.options.norm_eps or float(eps))

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
