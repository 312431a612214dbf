"""timm's ``Eva`` models: folders of any architecture timm's ``Eva`` builds (``config.json``'s ``architecture``,
rebuilt on the meta device, its parts checked by ``timm_parts``: the RoPE of timm's DINOv3 and RoPE-ViT ports, or none,
as EVA-01's), and bare state dicts of those ports (told by their keys, ``is_timm_eva``). LayerScale is
``gamma_1``/``gamma_2``, the attention keeps q and v biases apart (``q_bias``, ``v_bias``; the k bias is fixed at
zero), and DINOv3's periods are recomputed in fp32 from the temperature, as timm does."""
import re
from typing import Any

import timm
import torch.nn as nn
from timm.models.eva import Eva, EvaBlockPostNorm

from ..config import SimpleViTConfig, activation_name
from ..dino_models import DINOV3, DINOV3_HEADS, EVA_ROPE, ROPEVIT, ROPEVIT_KINDS
from ..errors import ViTVariantsError
from .preprocessing import imagenet_preprocessing
from .source import Rule
from .tensor_rules import LAYER_SCALE, dinov3_periods, for_key, qv_bias, renamed_keys
from .timm_parts import ATTN_NORM, EVA_PARTS, MLP_NORM, SPLIT_QKV, refuse_unexpressed
from .timm_format import TimmCheckpoint

__all__ = ['TimmEvaCheckpoint', 'EVA_ARCHITECTURES', 'is_eva_architecture', 'is_timm_eva']

# timm's Eva ports of DINOv3 (``vit_*_patch16_dinov3*``) and naver RoPE-ViT (``vit_*_patch16_rope[_mixed][_ape]_224``).
EVA_ARCHITECTURES = re.compile(r'^vit_\w+_patch16_(dinov3(_qkvb)?|rope(_mixed)?(_ape)?_224)$')
# timm's rotary modules -> our rope_type, with the grid indexing and rotation each must have to be that form.
_EVA_ROPE = {(module, args['rope_grid_indexing']): (kind, args['rope_rotate_half'])
             for kind, (module, args, _) in EVA_ROPE.items()}
_EVA_WHY = "not recorded by the checkpoint; timm's {port} port's pretrained_cfg"


def is_eva_architecture(name: Any) -> bool:
    """Whether a timm ``config.json`` ``architecture`` is built by timm's ``Eva`` class (its ``eva`` module)."""
    return isinstance(name, str) and timm.is_model(name) and \
        timm.models.model_entrypoint(name).__module__ == Eva.__module__


def is_timm_eva(names: set) -> bool:
    """Whether a bare state dict is timm's Eva port of DINOv3 (``reg_token`` or ``q_bias`` beside Eva's LayerScale
    ``gamma_1``) or of a mixed RoPE-ViT (timm's ``rope.freqs``). A bare axial RoPE-ViT has the naver file's keys, so
    it is read as that."""
    return 'blocks.0.gamma_1' in names and 'patch_embed.proj.weight' in names and \
        bool({'reg_token', 'blocks.0.attn.q_bias', 'rope.freqs'} & names)


class TimmEvaCheckpoint(TimmCheckpoint):
    """timm ``Eva`` folders of DINOv3 and RoPE-ViT (``EVA_ARCHITECTURES``), rebuilt on the meta device from their
    ``architecture`` and ``model_args``: LayerScale is ``gamma_1``/``gamma_2``, DINOv3's attention keeps q and v
    biases apart (``q_bias``, ``v_bias``; the k bias is fixed at zero), and the periods are recomputed in fp32 from
    the temperature, as timm does."""
    KIND = 'Eva'
    PREPROCESSING_DEFAULTS = imagenet_preprocessing(1.0, _EVA_WHY.format(port='DINOv3'))

    TENSOR_RULES = (
        for_key('rope.periods', lambda r: Rule((), dinov3_periods(r._theta))),
        renamed_keys(LAYER_SCALE),
        qv_bias('{p}blocks.{i}.attn.q_bias', '{p}blocks.{i}.attn.v_bias', unless='{p}blocks.{i}.attn.qkv.bias'),
    )

    def _infer(self) -> SimpleViTConfig:
        self._prefix = self.options.prefix or ''
        arch, args = self._architecture()
        if arch is None:
            return self._from_eva_tensors()
        model = self._meta_build(arch, args)
        # timm's EvaBlock options the 'eva' block has: EVA-02 CLIP's sub-LNs and split q/k/v
        refuse_unexpressed(model, EVA_PARTS, arch, self._config_path, frozenset({ATTN_NORM, MLP_NORM, SPLIT_QKV}))
        where = dict(path=self._config_path, key='architecture')
        block, rope = model.blocks[0], model.rope
        if model.global_pool not in ('token', 'avg', ''):
            raise ViTVariantsError(f"{arch} with these model_args pools by {model.global_pool!r}, which this family does "
                                   "not express for timm's Eva (token, avg or none)", **where)
        kind = self._rope_kind(arch, model) if rope is not None else None
        self._theta = float(rope.temperature) if rope is not None else None
        swiglu = type(block.mlp).__name__ == 'SwiGLU'
        mlp_dim = block.mlp.fc2.in_features
        patch = tuple(model.patch_embed.patch_size)
        ape = model.pos_embed is not None
        if ape:
            self.grid = tuple(model.patch_embed.grid_size)
        slot = ape and model.cls_token is not None and not getattr(model, 'no_embed_class', False)
        attn = block.attn
        fused = getattr(attn, 'qkv', None) is not None
        qkv_bias = getattr(attn, 'q_bias', None) is not None or \
            getattr(attn.qkv if fused else attn.q_proj, 'bias', None) is not None
        norms = dict(attn_norm=not isinstance(attn.norm, nn.Identity),
                     mlp_norm=not isinstance(getattr(block.mlp, 'norm', None), (nn.Identity, type(None))))
        # timm's own EvaBlock where the plain block has no equivalent (split q/k/v, the sub-LNs), its post-norm form
        post = isinstance(block, EvaBlockPostNorm)
        eva = dict(block_type='eva_post' if post else 'eva', qkv_fused=fused, **norms) \
            if post or not fused or any(norms.values()) else {}
        config = SimpleViTConfig.of(
            img_size=tuple(model.patch_embed.img_size), patch_size=patch, in_chans=model.patch_embed.proj.in_channels,
            num_classes=model.num_classes, global_pool=model.global_pool, embed_dim=model.embed_dim,
            depth=len(model.blocks), num_heads=block.attn.num_heads, mlp_dim=mlp_dim,
            mlp_layer='swiglu' if swiglu else 'mlp', init_values=1.0 if getattr(block, 'gamma_1', None) is not None else None,
            qkv_bias=qkv_bias, class_token=model.cls_token is not None,
            reg_tokens=0 if model.reg_token is None else model.reg_token.shape[1],
            pos_embed='+'.join(part for part, used in (('learn', ape), ('rope', bool(kind))) if used) or 'none',
            pos_embed_cls_slot=slot, pos_embed_resample='timm', **(dict(rope_type=kind, rope_theta=self._theta) if kind
                                                                  else {}),
            **(dict(rope_ref_grid=self._ref_grid) if kind == 'eva02' else {}),
            act_layer=self.options.act_layer or ('silu' if swiglu else activation_name(block.mlp.act)),
            norm_eps=self.options.norm_eps or block.norm1.eps, grid_mode='crop',
            fc_norm=not isinstance(model.fc_norm, nn.Identity),
            head_bias=not isinstance(model.head, nn.Linear) or model.head.bias is not None, **eva)
        if kind and kind != 'eva02' and slot:  # EVA-02 has both (a table with its [CLS] slot and RoPE)
            raise ViTVariantsError(f'{arch}: a table with a [CLS] slot next to RoPE is not supported', **where)
        self.notes.append(f'detected a timm Eva {arch} (' + (
            f'{kind} RoPE, base {self._theta:g}{", periods recomputed in fp32 as timm does" if kind == "dinov3" else ""}'
            if kind else 'no RoPE: a learned table with its [CLS] slot, q/v-only biases') +
            f'{", table resize rule " + repr("timm") if ape else ""}{", post-norm blocks" if post else ""}'
            f'{", the attention sub-LN" if norms["attn_norm"] else ""}{", the MLP sub-LN" if norms["mlp_norm"] else ""})')
        return config

    def _rope_kind(self, arch: str, model: nn.Module) -> str:
        """Our ``rope_type`` for the RoPE of timm's DINOv3 and RoPE-ViT ports (``EVA_ARCHITECTURES``); any other is
        refused, naming what differs."""
        rope, attn = model.rope, model.blocks[0].attn
        kind, half = _EVA_ROPE.get((type(rope).__name__, getattr(rope, 'grid_indexing', 'ij')), (None, None))
        ref = getattr(rope, 'ref_feat_shape', None)
        self._ref_grid = int(ref[0]) if kind == 'eva02' and ref else None
        beyond = [(kind is None, f"timm's {type(rope).__name__} with grid indexing "
                   f"{getattr(rope, 'grid_indexing', 'ij')!r}"),
                  (bool(getattr(attn, 'rotate_half', False)) != half, 'another rotation layout (rotate_half)'),
                  # EVA-02's RoPE (timm's RotaryEmbeddingCat, 'ij') is scaled to a square reference grid; the
                  # others are not
                  (kind == 'eva02' and (not ref or ref[0] != ref[1]), 'an EVA-02 RoPE without a square reference '
                   'grid (ref_feat_shape)'),
                  (kind != 'eva02' and bool(ref), 'a RoPE scaled to a reference grid (ref_feat_shape)'),
                  (bool(getattr(rope, 'grid_offset', 0.)), 'a RoPE grid offset'),
                  (getattr(rope, 'in_pixels', False), 'RoPE positions in pixels'),
                  (getattr(rope, 'min_period', None) is not None, 'a RoPE minimum period'),
                  (getattr(rope, 'normalize_coords', 'separate') != 'separate', 'another RoPE coordinate normalisation')]
        for refused, what in beyond:
            if refused:
                raise ViTVariantsError(f'{arch} with these model_args uses {what}, which this family does not express '
                                       "(DINOv3's, RoPE-ViT's or EVA-02's RoPE)", path=self._config_path,
                                       key='architecture')
        return kind

    def _from_eva_tensors(self) -> SimpleViTConfig:
        """A bare timm Eva state dict: the RoPE form told by its keys (``is_timm_eva``), the sizes by its shapes, and
        what timm's architecture would record (heads, eps, pooling, the image size of a RoPE-only model) assumed."""
        p = self._prefix
        local = {n[len(p):] for n in self._candidates()}
        dim, in_chans, patch_h, patch_w = self._conv_patch_kernel(p + self.KERNEL)
        depth = self._depth(local, key_of=lambda i: f'{p}blocks.{i}', first=p + 'blocks.0.attn.qkv.weight')
        swiglu = 'blocks.0.mlp.fc1_g.weight' in local
        mlp_dim = self._shape(p + 'blocks.0.mlp.fc2.weight')[-1]
        num_classes = self._shape(p + 'head.weight')[0] if 'head.weight' in local else 0
        self._check_dims(p + 'blocks.0.mlp.fc2.weight', mlp=mlp_dim, classes=num_classes)
        if 'reg_token' in local or 'blocks.0.attn.q_bias' in local:
            kind, theta, family, port = 'dinov3', DINOV3['rope_theta'], DINOV3, 'DINOv3'
            # timm's DINOv3 port of the width (H+ has 20 heads, not ViT-H's 16), else timm's policy
            heads = self._heads(dim, {}, [(DINOV3_HEADS.get(dim), f"timm's DINOv3 port of width {dim}")])
        else:
            kind, theta, family, port = 'mixed', ROPEVIT_KINDS['mixed']['rope_theta'], ROPEVIT, 'mixed RoPE-ViT'
            heads = self._heads(dim, {})
            self.PREPROCESSING_DEFAULTS = imagenet_preprocessing(0.9, _EVA_WHY.format(port=port))
        self._theta = theta
        self._unrecorded('architecture', None, f'Eva ({port} port)', 'a state dict does not record its architecture; '
                         'told by its keys')
        ape = 'pos_embed' in local
        if ape:
            self._check_token_table(p + 'pos_embed', dim, (patch_h, patch_w), class_token='cls_token' in local,
                                    slot=False, img_size=self.options.img_size)
            img_size: Any = (self.grid[0] * patch_h, self.grid[1] * patch_w)
        else:
            img_size = self._unrecorded('img_size', self.options.img_size, family['img_size'],
                                        "a RoPE backbone records no grid; timm's port's")
        reg_tokens = self._token_count(p + 'reg_token', dim)
        # a head was trained on the pooling of timm's port (its DINOv3 entries mean the patch tokens); a backbone
        # alone is read with the original's [CLS] feature
        trained_avg = kind == 'dinov3' and num_classes > 0
        pool = self._unrecorded('global_pool', None, 'avg' if trained_avg else 'token', (
            f"not recorded by a state dict; timm's {port} port's, which its head was trained on" if trained_avg else
            f"not recorded by a state dict; the {port}'s own [CLS] pooling" +
            (" (timm's Eva defaults to 'avg')" if kind == 'dinov3' else '')))
        self.notes.append(f"detected a bare timm Eva state dict of the {port} port ({kind} RoPE, base {theta:g}"
                          f"{', periods recomputed in fp32 as timm does' if kind == 'dinov3' else ''}"
                          f"{', table resize rule ' + repr('timm') if ape else ''})")
        return SimpleViTConfig.of(
            img_size=img_size, patch_size=(patch_h, patch_w), in_chans=in_chans, num_classes=num_classes,
            global_pool=pool, embed_dim=dim, depth=depth, num_heads=heads, mlp_dim=mlp_dim,
            mlp_layer='swiglu' if swiglu else 'mlp', init_values=1.0,
            qkv_bias='blocks.0.attn.q_bias' in local or 'blocks.0.attn.qkv.bias' in local,
            class_token='cls_token' in local, reg_tokens=reg_tokens, pos_embed='learn+rope' if ape else 'rope',
            pos_embed_cls_slot=False, pos_embed_resample='timm', rope_type=kind, rope_theta=theta,
            act_layer=self._unrecorded('act_layer', self.options.act_layer, 'silu' if swiglu else 'gelu',
                                       f"timm's {port} port's"),
            norm_eps=self._unrecorded('norm_eps', self.options.norm_eps, family['norm_eps'],
                                      f"timm's {port} port's LayerNorm eps"), grid_mode='crop',
            head_bias='head.bias' in local or 'head.weight' not in local)
