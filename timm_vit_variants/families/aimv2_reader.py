"""The AIMv2 reader (format 'aimv2'): Apple's files, transformers' ``Aimv2VisionModel`` / ``Aimv2Model`` folders and
timm's ``aimv2_*`` state dicts, read through the tables of ``aimv2_layouts.py``.

The network comes from the tensors (``tower_facts``); what they do not record comes from a transformers
``config.json`` (heads, eps, biases) or a timm folder's ``model_args`` (heads), else the caller's ``num_heads``, else AIMv2's head count of the width
(assumed, named). A tower inside a two-tower file (Apple's LiT ``image_encoder.``, transformers' ``vision_model.``)
is read alone; the text tower, projections and logit scale are not the image tower's and are left out.
"""
import dataclasses
from typing import Any, Dict, Mapping, Optional, Tuple

from ..checkpoints.preprocessing import assumed_preprocessing
from ..checkpoints.source import SourceCheckpoint
from ..checkpoints.tensor_rules import Rule
from ..config import SimpleViTConfig
from .aimv2_parts import aimv2_parts
from .aimv2_layouts import AIMV2_HEADS, AIMV2_NORM_EPS, find_layout, layout_rule, tower_facts

__all__ = ['Aimv2Checkpoint', 'is_aimv2']

_MEAN, _STD = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)
_NATIVE_IMG = 224
_PROJECTION = 'visual_projection.weight'  # a transformers Aimv2Model's image projection, outside the tower
# transformers' vision options AIMv2's published towers all share; another value is a network we do not build.
_HF_FIXED = {'qkv_bias': False, 'mlp_bias': False, 'hidden_act': 'silu', 'num_channels': None}


def is_aimv2(names: Any) -> bool:
    """Whether ``names`` hold an AIMv2 image tower in one of its layouts."""
    return find_layout(names) is not None


class Aimv2Checkpoint(SourceCheckpoint):
    format = 'aimv2'
    PREPROCESSING_DEFAULTS = assumed_preprocessing(
        'bicubic', 1.0, 'center', "not recorded by the file; AIMv2's (timm's aimv2_* and transformers' CLIP image "
        'processor): OpenAI CLIP mean and std, bicubic, the whole image', mean=_MEAN, std=_STD)

    def _vision_config(self) -> Dict[str, Any]:
        cfg = self.source_config
        vision = cfg.get('vision_config', cfg) if isinstance(cfg, Mapping) else {}
        return dict(vision) if isinstance(vision, Mapping) else {}

    @property
    def source_layout(self) -> Tuple[str, str]:
        """(layout, prefix) of the tower read: 'apple', 'hf' or 'timm', and where its tensors sit."""
        return self._layout, self._prefix

    def _infer(self) -> SimpleViTConfig:
        base = self.options.prefix or ''
        names = [n for n in self._store.names() if n.startswith(base)]
        found = find_layout(n[len(base):] for n in names)
        if found is None:
            raise self._error('no AIMv2 image tower (patch kernel and patch norm) found')
        self._layout, self._prefix = found[0], base + found[1]
        shapes = {n: tuple(self._store.shape(n)) for n in names if n.startswith(self._prefix)}
        try:
            facts = tower_facts(shapes, self._layout, self._prefix)
        except ValueError as e:
            key = str(e).split(':', 1)[0]
            raise self._error(str(e).split(': ', 1)[1], key=key) from None
        dim = facts['embed_dim']
        vision = self._vision_config() if self._layout == 'hf' else {}
        for name, value in _HF_FIXED.items():
            if name in vision and value is not None and vision[name] != value:
                raise self._error(f'config.json says {name}={vision[name]!r}: AIMv2 towers have {value!r}',
                                  key=name)
        heads = vision.get('num_attention_heads')
        if heads is None and self._layout == 'timm':  # a timm folder's config.json: the model_args timm built with
            args = self.source_config.get('model_args')
            heads = args.get('num_heads') if isinstance(args, Mapping) else None
        if heads is None:
            if self.options.num_heads is None and dim not in AIMV2_HEADS:
                raise self._error(f'the head count of a width-{dim} AIMv2 tower is not recorded: give it '
                                  '(--num-heads)', key='num_heads', needs='--num-heads')
            heads = self._unrecorded('num_heads', self.options.num_heads, AIMV2_HEADS.get(dim),
                                     f"AIMv2's head count of width {dim}")
        eps = vision.get('rms_norm_eps', AIMV2_NORM_EPS)
        grid = facts['grid']
        patch = facts['patch_size']
        if 'is_native' in vision and bool(vision['is_native']) != (grid is None):
            raise self._error(f"config.json says is_native={vision['is_native']!r}, the weights "
                              f"{'hold no' if grid is None else 'hold a'} position table", key='is_native')
        if grid is None:  # native: no table, any grid
            img = self._unrecorded('img_size', self.options.img_size, _NATIVE_IMG,
                                   "the native tower's nominal size (any grid runs)")
            img = (img, img) if isinstance(img, int) else tuple(img)
        else:
            img = (grid[0] * patch[0], grid[1] * patch[1])
        self.grid = grid
        parts = aimv2_parts(facts['mlp_dim'], native=grid is None, pool=facts['attention_pool'])
        parts['block'] = dataclasses.replace(parts['block'], norm_eps=eps)
        if self._prefix:
            self.notes.append(f'read the image tower under {self._prefix!r}; the other tensors (text tower, its '
                              'projection, logit scale) are not part of it and are left out')
        self.notes.append(f"detected an AIMv2 tower in {self._layout}'s layout ("
                          f"{'attention-pool head' if facts['attention_pool'] else 'no head: mean pooling'}, "
                          f"{'native sin-cos' if grid is None else f'a {grid[0]}x{grid[1]} learned table'})")
        projection = self._projection(dim, facts['attention_pool'])
        return SimpleViTConfig.of(img_size=img, patch_size=patch, in_chans=facts['in_chans'], embed_dim=dim,
                                  depth=facts['depth'], num_heads=int(heads), num_classes=projection, head_bias=False,
                                  **parts)

    def _projection(self, dim: int, pooled: bool) -> int:
        """The width of a transformers ``Aimv2Model``'s ``visual_projection`` (no bias), which its
        ``get_image_features`` applies to the pooled output: the head here; 0 for any other file."""
        if self._layout != 'hf' or self.source_config.get('model_type') != 'aimv2' or _PROJECTION not in self._store:
            return 0
        shape = tuple(self._store.shape(_PROJECTION))
        if len(shape) != 2 or shape[1] != dim or not pooled:
            raise self._error(f'visual_projection must be (projection_dim, hidden_size {dim}) over the '
                              'attention-pool head', key=_PROJECTION, shapes=(shape, ('projection_dim', dim)))
        self.notes.append('Aimv2Model: visual_projection (no bias) is the head, as its get_image_features applies it '
                          'to the pooled output')
        return shape[0]

    def _candidates(self) -> set:
        return super()._candidates() | ({_PROJECTION} if self.config.num_classes else set())

    def _rule(self, pattern: str, block: Optional[int]) -> Tuple[Rule, Optional[int]]:
        if pattern == 'head.weight':
            return Rule((_PROJECTION,)), None
        return layout_rule(self._layout, pattern, block, self._prefix), None
