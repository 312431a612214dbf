"""timm's relative-position ViTs (``VisionTransformerRelPos``, its ``vision_transformer_relpos`` module:
``vit_relpos_*``, ``vit_srelpos_*``, ``test_vit_relpos``): folders ``save_for_hf`` writes and bare state dicts.

The network is a pre-norm ViT whose attention adds a relative-position bias that timm's ``RelPosMlp`` generates
(``relpos_mlp.py``'s 'relpos_mlp' scheme): per block (``blocks.{i}.attn.rel_pos.mlp``) or one for every block
(``shared_rel_pos.mlp``, the ``vit_srelpos_*``), 'cr' log coordinates (timm's default) or 'swin'
(``rel_pos_type='mlp_swin'``); no absolute table; LayerScale (``init_values``); an optional [CLS] token with zero
bias; average pooling (with ``fc_norm`` or the final norm on every token; ``*_clsgap_*`` averages the patch tokens
beside a [CLS]) or the [CLS] token. The rest is timm's ViT under timm's names; the MLPs are ours as
``rel_pos.mlps.{i}`` (``rel_pos.mlps.0`` shared).

A folder's ``architecture`` and ``model_args`` are rebuilt on the meta device and every setting is read off that
build (its parts checked by ``timm_parts.refuse_unexpressed``: the table bias of ``rel_pos_type='bias'`` is refused
by name; the post-norm ``ResPostRelPosBlock`` of the ``*_rpn_*`` entries is the 'res_post' block kind), then held
against the tensors. A bare state dict records no image size, head count per attention (the MLP's output width does), or
pooling: timm's defaults are assumed and said so.
"""
import re
from typing import Any, Dict, Optional, Tuple

import timm
import torch.nn as nn
from timm.layers import Mlp, RelPosMlp
from timm.models.vision_transformer_relpos import (RelPosAttention, RelPosBlock, ResPostRelPosBlock,
                                                   VisionTransformerRelPos)

from ..checkpoints.routes import Route
from ..checkpoints.source import Rule
from ..checkpoints.tensor_rules import RuleFn
from ..checkpoints.timm_blocks import BLOCK_LAYOUTS, PLAIN, BlockLayout, block_settings
from ..checkpoints.timm_build import Built
from ..checkpoints.timm_format import TimmCheckpoint
from ..checkpoints.timm_parts import COMMON_PARTS, refuse_unexpressed
from ..config import SimpleViTConfig
from ..errors import ViTVariantsError
from .registry import Family
from .relpos_mlp import MlpRelPos

__all__ = ['RELPOS_PARTS', 'is_relpos_architecture', 'is_relpos_state_dict', 'TimmRelPosCheckpoint', 'FAMILY']

# The timm parts of a VisionTransformerRelPos this reader expresses: pre-norm and post-norm blocks, their attention,
# the MLP bias.
RELPOS_PARTS = COMMON_PARTS | {VisionTransformerRelPos, RelPosBlock, ResPostRelPosBlock, RelPosAttention, RelPosMlp,
                               Mlp, nn.Sigmoid}
# Its blocks as the block kinds they are ('vit', and 'res_post': timm's ResPostBlock with the bias in the attention)
BLOCK_LAYOUTS.update({RelPosBlock: PLAIN, ResPostRelPosBlock: BlockLayout('res_post', layer_scale=None)})
_BLOCK_MLP = 'blocks.{i}.attn.rel_pos.mlp.'
_SHARED_MLP = 'shared_rel_pos.mlp.'
_OURS = re.compile(r'^rel_pos\.mlps\.(\d+)\.(.+)$')


def is_relpos_architecture(name: Any) -> bool:
    """Whether a timm ``config.json`` ``architecture`` is built by timm's ``VisionTransformerRelPos``."""
    return isinstance(name, str) and timm.is_model(name) and \
        timm.models.model_entrypoint(name).__module__ == VisionTransformerRelPos.__module__


def is_relpos_state_dict(names: Any) -> bool:
    """Whether a bare state dict is a ``VisionTransformerRelPos``'s: a patch conv and the bias MLP of its blocks or
    the shared one."""
    return 'patch_embed.proj.weight' in names and \
        bool({_BLOCK_MLP.format(i=0) + 'fc1.weight', _SHARED_MLP + 'fc1.weight'} & set(names))


def _mlp_rule(reader: 'TimmRelPosCheckpoint', pattern: str, fields: Dict[str, Any]) -> Optional[Rule]:
    """Our ``rel_pos.mlps.{n}.*`` from block n's MLP, or from the shared one."""
    match = _OURS.match(pattern)
    if match is None:
        return None
    where = _SHARED_MLP if reader.shared else _BLOCK_MLP.format(i=match.group(1))
    return Rule(('{p}' + where + match.group(2),))


class TimmRelPosCheckpoint(TimmCheckpoint):
    """A timm ``VisionTransformerRelPos`` folder or state dict (module docstring)."""
    format = 'vit_relpos'
    KIND = 'VisionTransformerRelPos'
    TENSOR_RULES: Tuple[RuleFn, ...] = (_mlp_rule,)
    shared = False  # one MLP for every block (set by ``_infer``)

    def _infer(self) -> SimpleViTConfig:
        self._prefix = self.options.prefix or ''
        names = self.source_config.get('label_names')
        if isinstance(names, list) and names:
            self.label_names = [str(n) for n in names]
        arch, args = self._architecture()
        if arch is None:
            return self._from_relpos_tensors()
        model = self._meta_build(arch, args)
        refuse_unexpressed(model, RELPOS_PARTS, arch, self._config_path)
        where = dict(path=self._config_path, key='architecture')
        block = model.blocks[0]
        settings = block_settings(block)
        if settings['qk_norm']:
            raise ViTVariantsError(f'{arch} with these model_args has qk_norm, which this family does not express',
                                   **where)
        rel = model.shared_rel_pos if model.shared_rel_pos is not None else block.attn.rel_pos
        if tuple(rel.pretrained_window_size) != (0, 0):
            raise ViTVariantsError(f'{arch} with these model_args scales its relative coordinates to a pretrained '
                                   'window, which this family does not express', **where)
        self.shared = model.shared_rel_pos is not None
        part = MlpRelPos(mode='swin' if rel.mode == 'swin' else 'cr', hidden=rel.mlp.fc1.out_features,
                         shared=self.shared)
        config = SimpleViTConfig.of(
            img_size=tuple(model.patch_embed.img_size), patch_size=tuple(model.patch_embed.patch_size),
            in_chans=model.in_chans, num_classes=model.num_classes, global_pool=model.global_pool,
            embed_dim=model.embed_dim, depth=len(model.blocks), mlp_dim=settings['fc1_width'],
            class_token=model.cls_token is not None, positions=(part,), fc_norm=not isinstance(model.fc_norm,
                                                                                            nn.Identity),
            patch_bias=model.patch_embed.proj.bias is not None, grid_mode='crop',
            **{**{k: v for k, v in settings.items() if k not in ('fc1_width', 'embed_dim', 'qk_norm')},
               'act_layer': self.options.act_layer or settings['act_layer'],
               'norm_eps': self.options.norm_eps or settings['norm_eps']})
        local = {n[len(self._prefix):] for n in self._candidates()}
        Built.of_vit(arch, args, model, settings, self._classes is not None).check(self, self._found(local), local)
        self._note(arch, part)
        return config

    def _found(self, local: set) -> Dict[str, Any]:
        """What the tensors say of the settings ``Built`` holds against the build."""
        p = self._prefix
        return dict(depth=self._depth(local, key_of=lambda i: f'{p}blocks.{i}', first=p + 'blocks.0.attn.qkv.weight'),
                    embed_dim=self._shape(p + self.KERNEL)[0],
                    mlp_dim=self._shape(p + 'blocks.0.mlp.fc1.weight')[0],
                    num_classes=self._shape(p + 'head.weight')[0] if 'head.weight' in local else 0,
                    qkv_bias='blocks.0.attn.qkv.bias' in local, class_token=self.CLS in local)

    def _note(self, what: str, part: MlpRelPos) -> None:
        self.notes.append(f"detected: timm's VisionTransformerRelPos ({what}): a relative-position bias from "
                          f"{'one shared MLP' if part.shared else 'an MLP per block'} over {part.mode!r} log "
                          f'coordinates (hidden width {part.hidden}), made for each input grid as timm makes it '
                          'after set_input_size')

    def _from_relpos_tensors(self) -> SimpleViTConfig:
        """A bare state dict: every size from its shapes, the heads from the bias MLP's output; the image size and
        pooling assumed (timm's defaults)."""
        p = self._prefix
        local = {n[len(p):] for n in self._candidates()}
        self.shared = _SHARED_MLP + 'fc1.weight' in local
        mlp = _SHARED_MLP if self.shared else _BLOCK_MLP.format(i=0)
        dim, in_chans, patch_h, patch_w = self._conv_patch_kernel(p + self.KERNEL)
        found = self._found(local)
        heads, hidden = self._shape(p + mlp + 'fc2.weight')[0], self._shape(p + mlp + 'fc1.weight')[0]
        self._check_dims(p + mlp + 'fc2.weight', heads=heads, width=hidden, mlp=found['mlp_dim'],
                         classes=found['num_classes'])
        if 'blocks.0.ls1.gamma' not in local:
            raise self._error("a VisionTransformerRelPos state dict without LayerScale may hold timm's post-norm "
                              'ResPostRelPosBlock (the *_rpn_* entries) or pre-norm blocks, whose tensors are the '
                              "same; the folder's config.json tells them apart", key=p + 'blocks.0.ls1.gamma')
        part = MlpRelPos(mode='cr' if mlp + 'fc2.bias' in local else 'swin', hidden=hidden, shared=self.shared)
        self._unrecorded('architecture', None, self.KIND, 'a state dict does not record its architecture; told by '
                         'its relative-position MLP')
        fc_norm = 'fc_norm.weight' in local
        pool = self._unrecorded('global_pool', None,
                                'token' if found['class_token'] and not fc_norm else 'avg',
                                "not recorded by a state dict; timm's vit_relpos entries pool a [CLS] without "
                                'fc_norm, else average')
        img_size = self._unrecorded('img_size', self.options.img_size, 224, 'a state dict of relative positions '
                                    "records no grid; timm's vit_relpos_* default")
        self._note('a bare state dict', part)
        return SimpleViTConfig.of(
            img_size=img_size, patch_size=(patch_h, patch_w), in_chans=in_chans, num_classes=found['num_classes'],
            global_pool=pool, embed_dim=dim, depth=found['depth'], num_heads=heads, mlp_dim=found['mlp_dim'],
            qkv_bias=found['qkv_bias'], class_token=found['class_token'], positions=(part,), fc_norm=fc_norm,
            init_values=1.0, act_layer=self._unrecorded('act_layer', self.options.act_layer, 'gelu',
                                                        "timm's VisionTransformerRelPos default"),
            norm_eps=self._unrecorded('norm_eps', self.options.norm_eps, 1e-6, "timm's VisionTransformerRelPos "
                                      'default'), patch_bias=p + 'patch_embed.proj.bias' in self._store,
            grid_mode='crop')


FAMILY = Family(
    'vit_relpos',
    # folders: before timm's VisionTransformer folders (1100); state dicts: before timm's bare ViT rows
    routes=(Route(1060., lambda p: is_relpos_architecture(p.config.get('architecture')), TimmRelPosCheckpoint),
            Route(2150., lambda p: 'architecture' not in p.config and 'model_type' not in p.config
                  and is_relpos_state_dict(p.local), TimmRelPosCheckpoint)),
)
