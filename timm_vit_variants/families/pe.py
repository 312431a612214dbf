"""Perception Encoder (Meta's PE) image towers as timm's ``Eva`` builds them: the ``vit_pe_core_*``, ``vit_pe_lang_*``
and ``vit_pe_spatial_*`` folders timm saves (``config.json``'s ``architecture`` and ``model_args``).

The tower, rebuilt on the meta device and read off that build: a patch conv without bias, a learned table (with a
[CLS] row where the tower has a [CLS]; the G towers have none) resized by timm's rule, ``ln_pre`` (timm's
``norm_pre``), pre-norm blocks with timm's ``AttentionRope`` (fused qkv), LayerScale in the lang and G towers, and
PE's RoPE (``pe_positions.PeRope``: scaled to a reference grid after a grid offset, 'xy' order, prefix tokens
unrotated). The core towers end in the final LayerNorm, timm's MAP head (``AttentionPoolLatent``, 8 heads, an MLP
of 4x the width: our 'map' pool with its own ``heads`` and ``mlp_dim``) and PE's projection to the text space, which
timm loads as the classifier ``head`` (its weight the transposed ``proj``, a zero bias): our head, bias kept. The
lang and spatial towers have no final norm and pool by timm's ``global_pool`` (the mean of the patch tokens).

timm's PE entries take a fixed input size (``fixed_input_size``); another one is timm's ``set_input_size`` (or
``dynamic_img_size=True``): the table resized from the nominal grid by ``resample_abs_pos_embed`` (bicubic,
antialias) and the RoPE made for the new grid, which is what our model does at any grid, square or not.
"""
from typing import Any, Optional

import torch.nn as nn
from timm.models.eva import Eva

from ..checkpoints.preprocessing import assumed_preprocessing
from ..checkpoints.routes import Probe, Route
from ..checkpoints.timm_eva import TimmEvaCheckpoint, is_eva_architecture
from ..checkpoints.timm_parts import EVA_PARTS, refuse_unexpressed
from ..config import SimpleViTConfig, activation_name
from ..errors import ViTVariantsError
from ..parts import Learned, MapPool
from .pe_positions import PeRope
from .registry import Family

__all__ = ['PE_PREFIX', 'is_pe_architecture', 'PeCheckpoint', 'FAMILY']

PE_PREFIX = 'vit_pe_'  # timm's names of the PE towers: vit_pe_{core,lang,spatial}_<size>_patch<p>_<img>


def is_pe_architecture(name: Any) -> bool:
    """Whether a timm ``config.json`` ``architecture`` is one of timm's PE towers (``vit_pe_*``, built by ``Eva``)."""
    return isinstance(name, str) and name.startswith(PE_PREFIX) and is_eva_architecture(name)


class PeCheckpoint(TimmEvaCheckpoint):
    """A timm PE folder (module docstring); the tensors keep timm's Eva names (LayerScale ``gamma_1``/``gamma_2``)."""
    PREPROCESSING_DEFAULTS = assumed_preprocessing(
        'bicubic', 1.0, 'center', "not recorded by the checkpoint; timm's PE entries' pretrained_cfg (mean and std "
        '0.5, bicubic, the whole image)')

    def _infer(self) -> SimpleViTConfig:
        self._prefix = self.options.prefix or ''
        arch, args = self._architecture()
        model = self._meta_build(arch, args)
        refuse_unexpressed(model, EVA_PARTS, arch, self._config_path)
        if not isinstance(model, Eva):
            raise self._refused(arch, f"timm's {type(model).__name__} in place of its Eva")
        rope = self._pe_rope(arch, model)
        block, attn = model.blocks[0], model.blocks[0].attn
        if model.reg_token is not None:
            raise self._refused(arch, 'register tokens')
        if model.global_pool == 'map':
            pool: Any = self._map_pool(arch, model)
        elif model.global_pool in ('token', 'avg', ''):
            pool = model.global_pool
        else:
            raise self._refused(arch, f'pooling by {model.global_pool!r}')
        table = model.pos_embed is not None
        if table:
            self.grid = tuple(model.patch_embed.grid_size)
        cls_slot = table and model.cls_token is not None and not model.no_embed_class
        positions = ((Learned(cls_slot=cls_slot, resample='timm'),) if table else ()) + (rope,)
        self.notes.append(
            f'detected a timm Perception Encoder tower {arch} (PE RoPE: base {rope.theta:g}, scaled to a '
            f'{rope.ref_grid[0]}x{rope.ref_grid[1]} reference grid, offset {rope.offset:g}, prefix tokens unrotated'
            f'{"; a learned table, resize rule " + repr("timm") if table else ""}; pooling '
            f'{"by its MAP head" if pool != model.global_pool else repr(model.global_pool)}'
            f'{"; the projection as the classifier head" if model.num_classes else ""})')
        return SimpleViTConfig.of(
            img_size=tuple(model.patch_embed.img_size), patch_size=tuple(model.patch_embed.patch_size),
            in_chans=model.patch_embed.proj.in_channels, num_classes=model.num_classes, global_pool=pool,
            embed_dim=model.embed_dim, depth=len(model.blocks), num_heads=attn.num_heads,
            mlp_dim=block.mlp.fc2.in_features, mlp_layer='mlp', init_values=1.0 if block.gamma_1 is not None else None,
            qkv_bias=attn.qkv.bias is not None, class_token=model.cls_token is not None, reg_tokens=0,
            positions=positions, pre_norm=not isinstance(model.norm_pre, nn.Identity),
            patch_bias=model.patch_embed.proj.bias is not None, final_norm=not isinstance(model.norm, nn.Identity),
            fc_norm=not isinstance(model.fc_norm, nn.Identity),
            head_bias=not isinstance(model.head, nn.Linear) or model.head.bias is not None,
            act_layer=self.options.act_layer or activation_name(block.mlp.act),
            norm_eps=self.options.norm_eps or block.norm1.eps, grid_mode='crop')

    def _refused(self, arch: str, what: str) -> ViTVariantsError:
        return ViTVariantsError(f'{arch} with these model_args has {what}, which the PE family does not express',
                                path=self._config_path, key='architecture')

    def _pe_rope(self, arch: str, model: nn.Module) -> PeRope:
        """PE's RoPE from timm's rotary module: a ``RotaryEmbeddingCat`` on integer positions with a reference grid,
        'xy' order and interleaved pairs; any other setting is refused by name."""
        rope, attn = model.rope, model.blocks[0].attn
        ref: Optional[tuple] = getattr(rope, 'ref_feat_shape', None)
        beyond = [(rope is None, 'no RoPE (use_rot_pos_emb=False)'),
                  (type(rope).__name__ != 'RotaryEmbeddingCat', f"timm's {type(rope).__name__} as its RoPE"),
                  (getattr(rope, 'grid_type', 'index') != 'index', 'RoPE positions in pixels or centred'),
                  (getattr(rope, 'grid_indexing', 'xy') != 'xy', "a RoPE in 'ij' order"),
                  (not ref, 'a RoPE without a reference grid (ref_feat_shape)'),
                  (bool(getattr(attn, 'rotate_half', False)), 'another rotation layout (rotate_half)'),
                  (getattr(rope, 'aug_active', False), 'train-time RoPE coordinate augmentation')]
        for refused, what in beyond:
            if refused:
                raise self._refused(arch, what)
        return PeRope(theta=float(rope.temperature), ref_grid=(int(ref[0]), int(ref[1])),
                      offset=float(rope.grid_offset))

    def _map_pool(self, arch: str, model: nn.Module) -> MapPool:
        """timm's Eva MAP head (``AttentionPoolLatent``) as our 'map' pool: one latent, its own head count and MLP
        width, over every token; anything else it can hold is refused by name."""
        pool, block = model.attn_pool, model.blocks[0]
        beyond = [(pool.latent_len != 1, 'a MAP head with several latents'),
                  (pool.pos_embed is not None, 'a MAP head with its own position table'),
                  (not isinstance(pool.q_norm, nn.Identity), 'a MAP head with q/k norms'),
                  (pool.mlp is None, 'a MAP head without its MLP'),
                  ((pool.q.bias is None) != (block.attn.qkv.bias is None), "a MAP head whose q/kv biases are not "
                   "the blocks' qkv biases"),
                  (type(pool.mlp.act) is not type(block.mlp.act), "a MAP head whose activation is not the blocks'")]
        for refused, what in beyond:
            if refused:
                raise self._refused(arch, what)
        return MapPool(heads=pool.num_heads, mlp_dim=pool.mlp.fc1.out_features)


def _pe_folder(probe: Probe) -> bool:
    """A timm folder (or training checkpoint naming it) of a ``vit_pe_*`` entry."""
    return is_pe_architecture(probe.config.get('architecture'))


FAMILY = Family(
    'pe',
    routes=(Route(850., _pe_folder, PeCheckpoint),),  # before timm's other Eva folders (900)
)
