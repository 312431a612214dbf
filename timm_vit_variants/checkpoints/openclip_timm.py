"""open_clip image towers on a timm trunk (open_clip's ``TimmModel``, e.g. every SigLIP tower open_clip ships).

The tower is ``visual.trunk.*``, a timm model that ``open_clip_config.json``'s ``vision_cfg.timm_model_name`` names,
read by the timm reader, and ``visual.head.*``, open_clip's adapter head. open_clip builds the trunk with
``timm.create_model(timm_model_name)`` and no other model argument but its class count and pooling
(``open_clip/timm_model.py``), so the reader rebuilds it the same way on the meta device:

- ``timm_proj`` 'linear': the trunk is built as named and its classifier reset (``num_classes=0``; a ``timm_pool``
  other than the trunk's own pooling is refused: the reset leaves the final norm where the default put it), and
  ``head.proj``, a Linear with a bias where ``timm_proj_bias`` says so, projects the pooled feature: here our head;
- ``timm_proj`` 'none': the trunk without a classifier (``num_classes=0``, ``global_pool=timm_pool``) is the tower;
- ``timm_proj`` unset (null or ''): the trunk's own classifier (``num_classes=embed_dim``) is the projection.

'mlp' (a GELU MLP head) and the attention pools 'abs_attn'/'rot_attn' are refused, and so is a trunk this family
does not express, by what it is (``_TRUNKS_REFUSED``), before any tensor is read. A trunk carries timm's own
activation whatever ``quick_gelu`` says, as open_clip builds it.
"""
import re
from typing import Any, Dict, Optional, Set, Tuple

import timm
import torch.nn as nn

from ..config import SimpleViTConfig
from ..errors import ViTVariantsError
from .openclip import OpenCLIPCheckpoint
from .openclip_config import open_clip_data_config, read_open_clip_config, skipped_note
from .tensor_rules import named
from .timm_format import TimmCheckpoint

__all__ = ['OpenCLIPTimmCheckpoint', 'TRUNK', 'trunk_refusal']

TRUNK = 'visual.trunk.'
_PROJ = 'visual.head.proj.'
_VISION = 'model_cfg.vision_cfg.'
# timm trunks this family does not express: (timm model name, what is missing); the first match refuses.
_TRUNKS_REFUSED = (
    (re.compile(r'^vit_pe_'), "PE-Core: RoPE together with a learned table (timm's Eva) is not expressed"),
    (re.compile(r'^eva02_'), "EVA-02 CLIP: a trunk of timm's Eva, which this reader of open_clip towers does not "
                             "read (timm's own eva02_*_clip_* folders convert)"),
    (re.compile(r'_mci_'), "MobileCLIP: its convolutional MCi stem (timm's HybridEmbed) is not expressed"),
    (re.compile(r'^vitamin_'), "ViTamin: its convolutional MbConv stem (timm's HybridEmbed) is not expressed"),
    (re.compile(r'^eva_'), "EVA01 CLIP: timm's Eva without RoPE (q and v biases apart, fc_norm after [CLS]) has no "
                           'reader for open_clip towers'),
)
# the same, told by the class of the rebuilt trunk
_CLASSES_REFUSED = {
    'VisionTransformerRelPos': "vit_relpos: its MLP-generated relative-position bias (timm's "
                               'VisionTransformerRelPos) is not expressed',
}


def trunk_refusal(name: str, trunk: nn.Module) -> Optional[str]:
    """Why a timm trunk ``name`` (built as ``trunk``) is refused, naming the part this family lacks; None when it is a
    plain timm ``VisionTransformer`` with a patch convolution."""
    for pattern, why in _TRUNKS_REFUSED:
        if pattern.search(name):
            return why
    kind = type(trunk).__name__
    if kind in _CLASSES_REFUSED:
        return _CLASSES_REFUSED[kind]
    if kind != 'VisionTransformer':
        return f'a timm {kind}, not a Vision Transformer'
    embed = type(getattr(trunk, 'patch_embed', None)).__name__
    return None if embed == 'PatchEmbed' else f'a patch embedding other than a convolution (timm {embed})'


class OpenCLIPTimmCheckpoint(TimmCheckpoint):
    """An open_clip tower on a timm trunk: ``visual.trunk.*`` in timm's layout, ``visual.head.proj`` our head."""

    format = 'openclip'
    PREPROCESSING_DEFAULTS = OpenCLIPCheckpoint.PREPROCESSING_DEFAULTS
    _proj = False  # whether open_clip's head.proj is our head (set by ``_infer``)
    _whole = False  # whether the plan accounts for all of visual.* (set once the trunk is read)

    def _candidates(self) -> Set[str]:
        return {n for n in self._store.names() if n.startswith('visual.' if self._whole else TRUNK)}

    TENSOR_RULES = (named({'head.weight': _PROJ + 'weight', 'head.bias': _PROJ + 'bias'}, when=lambda r: r._proj),)

    def _recorded_preprocessing(self) -> Dict[str, Any]:
        return open_clip_data_config(self._open_clip_config)

    def _infer(self) -> SimpleViTConfig:
        self._open_clip_config, model_cfg, cfg_path = read_open_clip_config(self.path, self.limits)
        if cfg_path is None:
            raise self._error("an open_clip tower on a timm trunk records its timm model only in open_clip_config.json, "
                              'which is not beside the weights (--prefix visual.trunk. reads the trunk alone as a '
                              'timm state dict, without open_clip\'s head)', key=TRUNK + 'patch_embed.proj.weight')
        vision = model_cfg['vision_cfg']
        name, proj, embed_dim, args = self._trunk_args(model_cfg, vision, cfg_path)
        self.source_config, self._config_path = {'architecture': name, 'model_args': args}, cfg_path
        trunk = self._meta_build(*self._architecture())
        why = trunk_refusal(name, trunk)
        if why is not None:
            raise ViTVariantsError(f'{name}: {why}', path=cfg_path, key=_VISION + 'timm_model_name')
        pool = vision.get('timm_pool', 'avg')
        if proj == 'linear' and pool and pool != trunk.global_pool:
            raise ViTVariantsError(f"timm_pool {pool!r} over a trunk built to pool {trunk.global_pool!r}: open_clip "
                                   'resets the pooling after building it, leaving its final norm where the default '
                                   'put it, which is not expressed', path=cfg_path, key=_VISION + 'timm_pool')
        self.options = self.options.with_prefix(TRUNK)
        config = super()._infer()
        self._whole = True
        if proj == 'linear':
            config = self._linear_head(config, embed_dim, vision.get('timm_proj_bias', False), cfg_path)
        note = skipped_note(self._store.names())
        if note:
            self.notes.append(note)
        self.notes.append(f"detected: an open_clip image tower on the timm trunk {name} (open_clip_config.json: "
                          f"timm_pool {vision.get('timm_pool', 'avg')!r}, timm_proj {proj!r})")
        return config

    def _trunk_args(self, model_cfg: Dict[str, Any], vision: Dict[str, Any],
                    cfg_path: str) -> Tuple[str, Any, int, Dict[str, Any]]:
        """(timm model name, timm_proj, embed_dim, the model arguments open_clip's TimmModel builds the trunk with)."""
        name, pool = vision.get('timm_model_name'), vision.get('timm_pool', 'avg')
        proj = vision.get('timm_proj', 'linear')
        embed_dim = model_cfg.get('embed_dim')
        if not isinstance(name, str) or ':' in name or not timm.is_model(name):
            raise ViTVariantsError(f'{name!r} is not a registered timm model name (open_clip builds the trunk with '
                                   'timm.create_model)', path=cfg_path, key=_VISION + 'timm_model_name')
        if isinstance(embed_dim, bool) or not isinstance(embed_dim, int) or embed_dim < 1:
            raise ViTVariantsError(f'expected a positive integer, got {embed_dim!r}', path=cfg_path,
                                   key='model_cfg.embed_dim')
        if pool in ('abs_attn', 'rot_attn'):
            raise ViTVariantsError(f"timm_pool {pool!r} (open_clip's attention pool over a 2-D feature map) is not "
                                   'expressed', path=cfg_path, key=_VISION + 'timm_pool')
        if not isinstance(pool, str):
            raise ViTVariantsError(f'expected a timm pooling name, got {pool!r}', path=cfg_path,
                                   key=_VISION + 'timm_pool')
        if proj == 'mlp':
            raise ViTVariantsError("timm_proj 'mlp' (open_clip's GELU MLP head) is not expressed", path=cfg_path,
                                   key=_VISION + 'timm_proj')
        if proj not in (None, '', 'none', 'linear'):
            raise ViTVariantsError(f"timm_proj {proj!r} is not one of open_clip's ('linear', 'mlp', 'none')",
                                   path=cfg_path, key=_VISION + 'timm_proj')
        if not isinstance(vision.get('timm_proj_bias', False), bool):
            raise ViTVariantsError('expected true or false', path=cfg_path, key=_VISION + 'timm_proj_bias')
        if proj == 'linear':  # TimmModel builds the trunk as named, then resets its classifier (and pooling)
            return name, proj, embed_dim, dict(num_classes=0)
        return name, proj, embed_dim, dict(num_classes=0 if proj == 'none' else embed_dim, global_pool=pool)

    def _linear_head(self, config: SimpleViTConfig, embed_dim: int, bias: bool, cfg_path: str) -> SimpleViTConfig:
        """open_clip's ``head.proj`` Linear(num_features, embed_dim) as our head, checked against the config."""
        weight = _PROJ + 'weight'
        shape = self._shape(weight)
        if shape != (embed_dim, config.embed_dim):
            raise self._error(f'open_clip\'s projection must be (embed_dim {embed_dim}, trunk width '
                              f'{config.embed_dim})', key=weight, shapes=(shape, (embed_dim, config.embed_dim)))
        if (_PROJ + 'bias' in self._store) != bias:
            raise ViTVariantsError(f"timm_proj_bias is {str(bias).lower()}, but the weights {'lack' if bias else 'hold'}"
                                   f' {_PROJ}bias', path=cfg_path, key=_VISION + 'timm_proj_bias')
        self._check_dims(weight, classes=embed_dim)
        self._proj = True
        return config.replace(num_classes=embed_dim, head_bias=bias)
