"""BEiT, BEiT v2 and data2vec-vision state dicts: unilm's files (``{'model': ...}`` or bare) and timm ``Beit``'s.

unilm's ``modeling_finetune.VisionTransformer`` and timm's ``Beit`` share their names: ``blocks.{i}.attn.q_bias`` and
``v_bias`` (the k projection has no bias: ours is a fused ``qkv.bias`` with a zero k third), LayerScale as
``gamma_1``/``gamma_2``, per-block ``attn.relative_position_bias_table`` ((2g-1)² + 3, heads) for a g×g grid, an
optional absolute table ``pos_embed`` (1, 1 + g², D) with its [CLS] row first, and either mean pooling with
``fc_norm`` (no final ``norm``) or [CLS] pooling after ``norm``.

- **Pretraining files** (``modeling_pretrain``) hold one shared ``rel_pos_bias.relative_position_bias_table``; it
  becomes every block's table, as unilm's ``run_class_finetuning.py`` copies it. Their masked-image-modelling parts
  (``mask_token``, ``lm_head``, BEiT v2's ``cls_pt_layers``/``cls_pt_norm``/``cls_pt_lm_head``) are not part of the
  backbone and are left out, with a note; the backbone is read with its final ``norm`` and [CLS] pooling.
- ``relative_position_index`` buffers are the grid's index, rebuilt by the model, and are left out.
- The tables are ours as ``rel_pos.tables`` (depth, rows, heads). They are resized for another grid by BEiT's own
  rule (``relpos_resize``), the absolute table by 'deit' (bicubic, ``align_corners=False``, no antialias, [CLS]
  row kept: ``interpolate_pos_embed`` in unilm's script).

The head count is the tables' second dimension. LayerScale's initial value is not recorded (the stored gammas are
loaded); 0.1 is written, as BEiT's base fine-tuning uses.
"""
import math
import re
from typing import AbstractSet, Any, Dict, Optional, Set, Tuple

import torch
import torch.nn as nn

from ..beit_models import BEIT
from ..config import SimpleViTConfig
from ..parts import Learned
from .fills import Misfit
from .hf_dinov3 import q_none_v_bias
from .preprocessing import assumed_preprocessing
from .source import Rule, SourceCheckpoint
from .timm_format import Built, TimmCheckpoint

__all__ = ['BeitCheckpoint', 'TimmBeitCheckpoint', 'is_beit', 'stack_tables', 'expand_table', 'MIM_ONLY']

_TABLE = 'attn.relative_position_bias_table'
_SHARED = 'rel_pos_bias.relative_position_bias_table'
# Pretraining-only parts of unilm's MIM models, and the index buffers the model rebuilds.
MIM_ONLY = re.compile(r'^(mask_token$|lm_head\.|cls_pt_layers\.|cls_pt_norm\.|cls_pt_lm_head\.)')
_INDEX = re.compile(r'(^|\.)relative_position_index$')
_LAYER_SCALE = {'ls1.gamma': 'gamma_1', 'ls2.gamma': 'gamma_2'}


def is_beit(names: AbstractSet[str]) -> bool:
    """Whether a state dict is BEiT's layout: a patch conv and BEiT's relative position tables (per block or shared)."""
    return 'patch_embed.proj.weight' in names and (f'blocks.0.{_TABLE}' in names or _SHARED in names)


def table_grid(rows: int) -> Optional[int]:
    """The side g of the square grid a BEiT table of ``rows`` rows ((2g-1)² + 3) is for, or None."""
    side = math.isqrt(max(rows - 3, 0))
    return (side + 1) // 2 if side * side == rows - 3 and side % 2 == 1 else None


def stack_tables(dst: torch.Tensor, *tables: torch.Tensor) -> None:
    """Each block's (rows, heads) table into its slice of our (depth, rows, heads) ``rel_pos.tables``."""
    if len(tables) != dst.shape[0]:
        raise Misfit(f'{len(tables)} tables for {dst.shape[0]} blocks')
    for i, table in enumerate(tables):
        if tuple(table.shape) != tuple(dst.shape[1:]):
            raise Misfit('shape does not fit', table.shape, dst.shape[1:])
        dst[i].copy_(table)


def expand_table(dst: torch.Tensor, table: torch.Tensor) -> None:
    """BEiT's shared pretraining table copied into every block, as unilm's fine-tuning script does."""
    if tuple(table.shape) != tuple(dst.shape[1:]):
        raise Misfit('shape does not fit', table.shape, dst.shape[1:])
    dst.copy_(table.unsqueeze(0).expand_as(dst))


class BeitCheckpoint(SourceCheckpoint):
    """A unilm BEiT / BEiT v2 / data2vec-vision file, or a timm ``Beit`` state dict."""
    format = 'beit'
    PREPROCESSING_DEFAULTS = assumed_preprocessing(
        'bicubic', 0.9, 'center', "not recorded by the checkpoint; BEiT's eval (crop 0.9, bicubic, mean = std = 0.5)")
    _shared = False

    def _candidates(self) -> Set[str]:
        return {n for n in super()._candidates()
                if not MIM_ONLY.match(n[len(self._prefix):]) and not _INDEX.search(n)}

    def _rule(self, pattern: str, block: Optional[int]) -> Tuple[Rule, Optional[int]]:
        p, key = self._prefix, pattern.replace('{i}', str(block))
        if key == 'rel_pos.tables':
            if self._shared:
                return Rule((p + _SHARED,), expand_table), None
            return Rule(tuple(f'{p}blocks.{i}.{_TABLE}' for i in range(self.config.depth)), stack_tables), None
        if key.endswith('attn.qkv.bias') and p + key not in self._store:
            base = p + key[:-len('qkv.bias')]
            return Rule((base + 'q_bias', base + 'v_bias'), q_none_v_bias), None
        for ours, theirs in _LAYER_SCALE.items():
            if key.endswith(ours):
                return Rule((p + key[:-len(ours)] + theirs,)), None
        return Rule((p + key,)), None

    def _infer(self, hints: Dict[str, Any]) -> SimpleViTConfig:
        p = self._prefix = hints.get('prefix') or ''
        names = {n[len(p):] for n in self._store.names() if n.startswith(p)}
        dim, in_chans, patch_h, patch_w = self._conv_patch_kernel(p + 'patch_embed.proj.weight')
        depth = self._depth(names, key_of=lambda i: f'{p}blocks.{i}', first=p + 'blocks.0.attn.qkv.weight')
        mlp_dim = self._shape(p + 'blocks.0.mlp.fc1.weight')[0]
        num_classes = self._shape(p + 'head.weight')[0] if 'head.weight' in names else 0
        self._check_dims(p + 'blocks.0.mlp.fc1.weight', mlp=mlp_dim, classes=num_classes)
        self._shared = _SHARED in names and f'blocks.0.{_TABLE}' not in names
        table_key = p + (_SHARED if self._shared else f'blocks.0.{_TABLE}')
        shape = self._shape(table_key)
        side = table_grid(shape[0]) if len(shape) == 2 else None
        if side is None or shape[1] < 1:
            raise self._error('a BEiT relative position table must be ((2g-1)^2 + 3, heads) for a g x g grid and '
                              'at least one head', key=table_key, shapes=(shape,))
        heads = shape[1]
        for i in range(0 if self._shared else depth):
            other = self._shape(f'{p}blocks.{i}.{_TABLE}')
            if other != shape:
                raise self._error('every block\'s relative position table must have the same shape',
                                  key=f'{p}blocks.{i}.{_TABLE}', shapes=(other, shape))
        self._check_dims(table_key, heads=heads, img_size=side * max(patch_h, patch_w))
        if dim % heads:
            raise self._error(f'width {dim} is not divisible by the tables\' {heads} heads', key=table_key)
        ape = 'pos_embed' in names
        if ape:
            self._check_token_table(p + 'pos_embed', dim, (patch_h, patch_w), class_token=True, slot=True,
                                    img_size=hints.get('img_size') or (side * patch_h, side * patch_w))
        mean_pool = 'fc_norm.weight' in names
        if not mean_pool and 'norm.weight' not in names:
            raise self._error('neither fc_norm (mean pooling) nor a final norm ([CLS] pooling) is stored',
                              key=p + 'norm.weight')
        skipped = sorted(n for n in names if MIM_ONLY.match(n))
        parts = ['one shared pretraining table, copied into every block' if self._shared else
                 'a relative position table per block']
        if ape:
            parts.append("an absolute table with a [CLS] slot (resize rule 'deit')")
        parts.append('mean pooling with fc_norm' if mean_pool else '[CLS] pooling')
        if 'blocks.0.gamma_1' in names:
            parts.append('LayerScale')
        if 'blocks.0.attn.q_bias' in names:
            parts.append('q/v biases')
        self.notes.append(f"detected a BEiT model ({', '.join(parts)}; BEiT's cubic table resize)"
                          + (f'; masked-image-modelling parts left out: {_summary(skipped)}' if skipped else ''))
        return SimpleViTConfig.of(**dict(
            BEIT, img_size=(side * patch_h, side * patch_w), patch_size=(patch_h, patch_w), in_chans=in_chans,
            num_classes=num_classes, global_pool='avg' if mean_pool else 'token', fc_norm=mean_pool, embed_dim=dim,
            depth=depth, num_heads=heads, mlp_dim=mlp_dim,
            init_values=0.1 if 'blocks.0.gamma_1' in names else None,
            qkv_bias='blocks.0.attn.q_bias' in names or 'blocks.0.attn.qkv.bias' in names,
            pos_embed='learn+relpos' if ape else 'relpos', pos_embed_cls_slot=True, pos_embed_resample='deit',
            act_layer=hints.get('act_layer') or BEIT['act_layer'], norm_eps=hints.get('norm_eps') or BEIT['norm_eps'],
            head_bias='head.bias' in names or 'head.weight' not in names))


def _summary(names: Any) -> str:
    """``mask_token, lm_head.* (2), ...``: each skipped part once, with its tensor count."""
    parts: Dict[str, int] = {}
    for name in names:
        part = name if '.' not in name else name.split('.', 1)[0] + '.*'
        parts[part] = parts.get(part, 0) + 1
    return ', '.join(f'{k} ({v})' if v > 1 else k for k, v in parts.items())


class TimmBeitCheckpoint(BeitCheckpoint):
    """A timm ``beit*`` folder (``config.json``'s ``architecture``): the tensors are read as a BEiT state dict, held
    against timm's build of the recorded architecture and model_args (a contradiction is refused, naming the config
    key and the tensor that shows it), and the preprocessing is the folder's ``pretrained_cfg``."""
    format = 'timm'
    _recorded_preprocessing = TimmCheckpoint._recorded_preprocessing
    _architecture = TimmCheckpoint._architecture
    _meta_build = TimmCheckpoint._meta_build

    def _infer(self, hints: Dict[str, Any]) -> SimpleViTConfig:
        config = super()._infer(hints)
        arch, args = self._architecture()
        model = self._meta_build(arch, args)
        block, p = model.blocks[0], self._prefix
        table = _SHARED if self._shared else f'blocks.0.{_TABLE}'
        built = Built(arch, args, model, dict(
            depth=len(model.blocks), embed_dim=model.embed_dim, mlp_dim=block.mlp.fc1.out_features,
            num_heads=block.attn.num_heads, qkv_bias=block.attn.q_bias is not None,
            abs_pos_emb=model.pos_embed is not None, shared_rel_pos_bias=model.rel_pos_bias is not None,
            layer_scale=block.gamma_1 is not None, fc_norm=not isinstance(model.fc_norm, nn.Identity)),
            self._classes is not None)
        local = {n[len(p):] for n in self._candidates()}
        built.check(self, dict(
            depth=config.depth, embed_dim=config.embed_dim, mlp_dim=config.block.mlp_dim, num_heads=config.num_heads,
            qkv_bias=config.block.qkv_bias, abs_pos_emb=config.position(Learned) is not None,
            shared_rel_pos_bias=self._shared, layer_scale=config.block.init_values is not None, fc_norm=config.head.fc_norm,
            num_classes=config.num_classes), local, evidence=dict(
            num_heads=f'{p}{table} {self._shape(p + table)}: (rows, heads)',
            qkv_bias=f'{p}blocks.0.attn.q_bias {"stored" if "blocks.0.attn.q_bias" in local else "absent"}',
            abs_pos_emb=f'{p}pos_embed {"stored" if "pos_embed" in local else "absent"}',
            layer_scale=f'{p}blocks.0.gamma_1 {"stored" if "blocks.0.gamma_1" in local else "absent"}',
            fc_norm=f'{p}fc_norm.weight {"stored" if "fc_norm.weight" in local else "absent"}',
            shared_rel_pos_bias=f'{p}{_SHARED} {"stored" if self._shared else "absent"}'))
        return config
