"""timm's Qwen3 vision towers (``timm.models.qwen3_vit``: the Qwen3-VL / Qwen3.5 / Qwen3.8 image encoders) as timm
saves them: a folder whose ``config.json`` ``architecture`` is one of that module's, rebuilt on the meta device.

The tower (``Qwen3VitEncoder``) is a plain pre-norm ViT: a Conv2d patch embedding with a bias (timm's loader already
folded the source's Conv3d over two repeated frames into it, by summing the temporal kernel slices), no prefix tokens,
fused qkv with bias, a GELU-tanh MLP, LayerNorm, no final norm; its positions are a learned square table stretched to
each grid (the 'stretched' scheme) and axial RoPE in timm's ``RotaryEmbeddingCat`` form ('axial_half'), both in
``qwen3_vit_positions.py``. What each model does with the tower's tokens:

* the classifiers (``qwen3_vit_*``, ``Qwen3VitClassifier``): the mean of the tokens, a LayerNorm without affine
  parameters, the linear head: our 'avg' pool with ``fc_norm`` (its weight ones, its bias zeros) and the head;
* the ``_merge`` classifiers: the mean of the VLM projector's tokens (``encoder.merger``: 2 x 2 patch tokens
  concatenated, projected to the language model's width) instead, which this family does not express: refused by
  name;
* the encoders (``qwen3_vit_*_enc``, ``Qwen3VitEncoder``): the projector's tokens, the tokens the language model
  reads. The projector is not part of the image tower: it is left out, with a note, and the tower's tokens are
  converted (timm's ``forward_features``); with ``global_pool='avg'`` their mean, and with ``''`` the tokens alone.
"""
from typing import Any, Dict, Set

import timm
import torch
import torch.nn as nn
from timm.layers import AttentionRope, Mlp, RotaryEmbeddingCat
from timm.models.eva import EvaBlock
from timm.models.qwen3_vit import Qwen3VitClassifier, Qwen3VitEncoder, Qwen3VitPatchMerger

from ..checkpoints.fills import Fill, Misfit
from ..checkpoints.preprocessing import assumed_preprocessing
from ..checkpoints.routes import Probe, Route
from ..checkpoints.source import Rule
from ..checkpoints.tensor_rules import for_key
from ..checkpoints.timm_build import Built
from ..checkpoints.timm_format import TimmCheckpoint
from ..checkpoints.timm_parts import COMMON_PARTS, refuse_unexpressed
from ..config import SimpleViTConfig, activation_name
from ..errors import ViTVariantsError
from .qwen3_vit_positions import THETA, AxialHalf, Stretched
from .registry import Family

__all__ = ['QWEN3_VIT_PARTS', 'is_qwen3_vit_architecture', 'Qwen3VitCheckpoint', 'FAMILY']

# The timm classes a Qwen3 tower is made of, and its VLM projector (left out of an encoder; a classifier pooling its
# tokens is refused by the reader before its parts are checked).
QWEN3_VIT_PARTS = COMMON_PARTS | {Qwen3VitClassifier, Qwen3VitEncoder, EvaBlock, AttentionRope, RotaryEmbeddingCat,
                                  Mlp, Qwen3VitPatchMerger}
_MERGER = 'merger'


def is_qwen3_vit_architecture(name: Any) -> bool:
    """Whether a timm ``config.json`` ``architecture`` is one of ``timm.models.qwen3_vit``'s entries."""
    return isinstance(name, str) and timm.is_model(name) and \
        timm.models.model_entrypoint(name).__module__ == Qwen3VitEncoder.__module__


def _table_rows(dst: torch.Tensor, table: torch.Tensor) -> None:
    """timm's (1, side * side, D) ``pos_embed`` as the 'stretched' scheme's (side * side, D) table."""
    if tuple(table.shape) != (1, *dst.shape):
        raise Misfit('shape does not fit', table.shape, (1, *dst.shape))
    dst.copy_(table[0])


def _constant(value: float) -> Fill:
    """A fill of ``value`` everywhere (the affine parameters of a LayerNorm that has none)."""
    def fill(dst: torch.Tensor) -> None:
        dst.fill_(value)

    fill.__name__ = fill.__qualname__ = f'constant_{value:g}'
    return fill


class Qwen3VitCheckpoint(TimmCheckpoint):
    """A timm folder of a ``qwen3_vit`` architecture (module docstring); ``{p}`` is where the tower's tensors sit
    (``encoder.`` in a classifier)."""
    format = 'qwen3_vit'
    PREPROCESSING_DEFAULTS = assumed_preprocessing(
        'bicubic', 1.0, 'squash', "not recorded by the folder; timm's qwen3_vit pretrained_cfg")
    RULES = {'abs_pos.table': Rule(('{p}pos_embed',), _table_rows),
             'head.weight': Rule(('head.weight',)), 'head.bias': Rule(('head.bias',))}
    TENSOR_RULES = (for_key('fc_norm.weight', lambda r: Rule((), _constant(1.))),
                    for_key('fc_norm.bias', lambda r: Rule((), _constant(0.))))

    def _candidates(self) -> Set[str]:
        """Every tensor but the VLM projector's (left out of an encoder, refused in a classifier)."""
        return {n for n in self._store.names() if not n.startswith(self._prefix + _MERGER + '.')}

    def _infer(self) -> SimpleViTConfig:
        arch, args = self._architecture()
        if arch is None:
            raise ViTVariantsError("a timm qwen3_vit folder needs its config.json's architecture", path=self.path,
                                   key='architecture')
        where = dict(path=self._config_path, key='architecture')
        model = self._meta_build(arch, args)
        classifier = isinstance(model, Qwen3VitClassifier)
        tower: Qwen3VitEncoder = model.encoder if classifier else model
        if classifier and tower.merger is not None:
            raise ViTVariantsError(
                f"{arch} with these model_args pools the VLM projector's tokens (encoder.merger, timm's "
                'Qwen3VitPatchMerger: 2 x 2 patch tokens concatenated and projected to the language model\'s width), '
                'which this family does not express; the tower alone converts as its qwen3_vit_*_enc entry',
                **where)
        refuse_unexpressed(model, QWEN3_VIT_PARTS, arch, self._config_path)
        if not len(tower.blocks):
            raise ViTVariantsError(f'{arch} with these model_args has no transformer blocks', **where)
        block, rope = tower.blocks[0], tower.rope
        head_dim = tower.embed_dim // block.attn.num_heads
        beyond = [(rope.ref_feat_shape is not None, 'a RoPE scaled to a reference grid (ref_feat_shape)'),
                  (bool(rope.in_pixels), 'RoPE positions in pixels'),
                  (bool(rope.linear_bands), 'linearly spaced RoPE frequencies'),
                  (bool(rope.grid_offset), 'a RoPE grid offset'),
                  ((rope.grid_indexing, rope.grid_type) != ('ij', 'index'), 'another RoPE grid'),
                  (float(rope.temperature) != THETA, f'a RoPE base of {rope.temperature:g}, not {THETA:g}'),
                  (rope.dim != head_dim, f'a RoPE over {rope.dim} of the {head_dim} head channels'),
                  (not (rope.rotate_half and block.attn.rotate_half), 'another rotation layout (rotate_half)'),
                  (classifier and model.global_pool != 'avg', f'classifier pooling {model.global_pool!r}')]
        for refused, what in beyond:
            if refused:
                raise ViTVariantsError(f'{arch} with these model_args uses {what}, which this family does not express',
                                       **where)
        self._check_built(arch, args, model, set(self._store.names()))
        self._prefix = 'encoder.' if classifier else ''
        pool, fc_norm, final_norm = 'avg', False, False
        if classifier:
            fc_norm = final_norm = not isinstance(model.norm, nn.Identity)
        elif tower.global_pool != 'avg':
            pool = ''
        patch = tower.patch_embed
        dim, side = tower.embed_dim, tower.pos_embed_grid_size
        # timm's img_size is only nominal (the table is stretched to every input): ours is the table's grid
        self.grid = (side, side)
        img_size = (side * patch.patch_size[0], side * patch.patch_size[1])
        if tuple(patch.img_size) != img_size:
            self.notes.append(f'img_size {tuple(patch.img_size)} of the folder is nominal only in timm; the converted '
                              f"model's is the table's {side}x{side} grid, {img_size}: it gives what timm's does at "
                              'every input size')
        mlp = block.mlp
        self.notes.append(
            f"detected a timm Qwen3 vision tower ({arch}): its {side}x{side} table stretched to every grid "
            "(bilinear, corners aligned: the 'stretched' scheme), axial RoPE in timm's RotaryEmbeddingCat form "
            f"('axial_half', base {THETA:g})" +
            (f"; the VLM projector ({_MERGER}.*) is not part of the image tower and is left out: the converted "
             "model gives the tower's tokens (timm's forward_features), not the projected ones timm's forward gives"
             if tower.merger is not None else ''))
        return SimpleViTConfig.of(
            img_size=img_size, patch_size=tuple(patch.patch_size), in_chans=patch.proj.in_channels,
            num_classes=model.num_classes if classifier else 0, global_pool=pool, embed_dim=dim,
            depth=len(tower.blocks), num_heads=block.attn.num_heads, mlp_dim=mlp.fc1.out_features,
            qkv_bias=block.attn.qkv.bias is not None, class_token=False,
            positions=(Stretched(), AxialHalf()),
            act_layer=self.options.act_layer or activation_name(mlp.act),
            norm_eps=self.options.norm_eps or block.norm1.eps, final_norm=final_norm, fc_norm=fc_norm,
            patch_bias=patch.proj.bias is not None, grid_mode='crop',
            head_bias=not classifier or not isinstance(model.head, nn.Linear) or model.head.bias is not None)

    def _check_built(self, arch: str, args: Dict[str, Any], model: nn.Module, local: Set[str]) -> None:
        """Refuse weights whose tensors are not the ones the recorded architecture builds, naming the first."""
        head = 'head.weight'
        found = dict(num_classes=self._shape(head)[0] if head in local else 0)
        Built(arch, args, model, {}, self._classes is not None).check(self, found if self._classes is not None
                                                                      else {}, local)


def _qwen3_folder(probe: Probe) -> bool:
    return is_qwen3_vit_architecture(probe.config.get('architecture'))


FAMILY = Family('qwen3_vit', routes=(Route(1040., _qwen3_folder, Qwen3VitCheckpoint),))  # before timm's folders
