"""SAM's image encoder as timm builds it (``timm.models.vision_transformer_sam.VisionTransformerSAM``: the
``samvit_*`` entries), read from a timm folder (format 'sam').

The network (Kirillov et al. 2023, arXiv:2304.02643; Li et al. 2022, arXiv:2203.16527): a patch conv; a learned
absolute table over the nominal grid, [H, W, D], no prefix tokens, resized bicubically with antialias to any other
grid as timm does on each call (``resample_abs_pos_embed_nhwc``: our rule 'timm'); pre-norm blocks attending within
windows of the grid but at ``global_attn_indexes``, each adding decomposed relative positions; then the neck over the
grid (1x1 conv, LayerNorm2d, 3x3 conv, LayerNorm2d; ``samvit_base_patch16_224``: LayerNorm2d alone) and the mean of
its outputs, before an optional classifier. Here: the 'sam' block kind and the 'sam_windows' scheme (each block's
window), the 'sam_neck' pool (``sam_parts.py``, ``sam_layers.py``). ``forward_features`` gives the neck's outputs as
tokens [B, H * W, C] (timm's are [B, C, H, W]).

What the tensors do not record (heads, windows, global blocks, the neck's presence beside its tensors) is read off
timm's own build of the folder's ``architecture`` and ``model_args`` on the meta device; every tensor must have the
shape that build gives it. Parts of that build this family does not express (RoPE, a NormMlp head, pre-norm, a pool
other than 'avg') are refused by name.
"""
from typing import Any, Dict, List

import timm
import torch.nn as nn
from timm.layers import ClassifierHead, LayerNorm2d, Mlp, SelectAdaptivePool2d
from timm.models.vision_transformer_sam import Attention as TimmSamAttention
from timm.models.vision_transformer_sam import Block as TimmSamBlock
from timm.models.vision_transformer_sam import VisionTransformerSAM

from ..checkpoints.fills import batched_grid_table
from ..checkpoints.preprocessing import assumed_preprocessing
from ..checkpoints.routes import Probe, Route
from ..checkpoints.tensor_rules import Rule
from ..checkpoints.timm_build import TimmFolder
from ..checkpoints.timm_parts import COMMON_PARTS, refuse_unexpressed
from ..config import SimpleViTConfig
from ..errors import ViTVariantsError
from ..parts import BlockPart, HeadPart, Learned, PatchPart, TokensPart
from . import sam_layers  # noqa: F401  (registers the 'sam' block, the 'sam_windows' scheme and the 'sam_neck' pool)
from .registry import Family
from .sam_parts import SAM_BLOCK, SamNeck, SamWindows

__all__ = ['SamCheckpoint', 'is_sam_architecture', 'FAMILY']

_MODULE = 'timm.models.vision_transformer_sam'
# timm's SAM classes this family expresses, beside the common ones (the neck's norm, the 'avg' classifier head).
SAM_PARTS = COMMON_PARTS | {VisionTransformerSAM, TimmSamBlock, TimmSamAttention, Mlp, LayerNorm2d, ClassifierHead,
                            SelectAdaptivePool2d, nn.AdaptiveAvgPool2d, nn.Flatten}
_NECK = ('0.weight', '1.weight', '1.bias', '2.weight', '3.weight', '3.bias', 'weight', 'bias')
# Our names -> timm's: the table as a [1, H, W, D] grid, the neck under the pool, the classifier's ``fc``.
_RULES: Dict[str, Rule] = {
    'pos_embed': Rule(('pos_embed',), batched_grid_table),
    **{f'attn_pool.neck.{k}': Rule((f'neck.{k}',)) for k in _NECK},
    'head.weight': Rule(('head.fc.weight',)),
    'head.bias': Rule(('head.fc.bias',)),
}


def is_sam_architecture(arch: Any) -> bool:
    """Whether ``arch`` names one of timm's ``vision_transformer_sam`` entries."""
    return isinstance(arch, str) and timm.is_model(arch) and timm.models.model_entrypoint(arch).__module__ == _MODULE


class SamCheckpoint(TimmFolder):
    """A timm folder of a ``samvit_*`` architecture (module docstring)."""
    format = 'sam'
    RULES = _RULES
    PREPROCESSING_DEFAULTS = assumed_preprocessing(
        'bicubic', 1.0, 'center', "not recorded by the folder; timm's samvit_* cfg: ImageNet's mean and std",
        mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))

    def _infer(self) -> SimpleViTConfig:
        self._prefix = ''
        arch, args = self._architecture()
        model = self._meta_build(arch, args)
        if not isinstance(model, VisionTransformerSAM):
            raise ViTVariantsError(f'{arch} builds a {type(model).__name__}, not a VisionTransformerSAM',
                                   path=self._config_path, key='architecture')
        refuse_unexpressed(model, SAM_PARTS, arch, self._config_path)
        self._refuse_options(model, arch)
        self._check_tensors(model)
        blocks: List[Any] = list(model.blocks)
        first = blocks[0]
        windows = [blk.window_size for blk in blocks]
        neck = model.neck
        chans = neck[0].out_channels if isinstance(neck, nn.Sequential) else None
        positions = (Learned(cls_slot=False, resample='timm'),) if model.pos_embed is not None else ()
        positions += (SamWindows(window_size=max(windows) or 1, global_blocks=tuple(i for i, w in enumerate(windows)
                                                                                    if not w),
                                 rel_pos=bool(first.attn.use_rel_pos),
                                 table_grid=tuple(model.patch_embed.grid_size)),)
        proj = model.patch_embed.proj
        self.notes.append(f'detected: timm {arch} (SAM image encoder: {len(blocks)} blocks, windows of '
                          f'{max(windows)} but global blocks {[i for i, w in enumerate(windows) if not w]}, '
                          f"{'a conv neck to ' + str(chans) + ' channels' if chans else 'a LayerNorm2d neck'}, "
                          'mean pooling)')
        return SimpleViTConfig.of(
            img_size=tuple(model.patch_embed.img_size), patch_size=tuple(model.patch_embed.patch_size),
            in_chans=proj.in_channels, embed_dim=model.embed_dim, depth=len(blocks), num_heads=first.attn.num_heads,
            num_classes=model.num_classes, grid_mode='crop',
            patch=PatchPart(kind='conv', bias=proj.bias is not None), tokens=TokensPart(), positions=positions,
            block=BlockPart(kind=SAM_BLOCK, norm_eps=first.norm1.eps, act='gelu', mlp_dim=first.mlp.fc1.out_features,
                            mlp_bias=first.mlp.fc1.bias is not None, qkv_bias=first.attn.qkv.bias is not None,
                            qk_norm=not isinstance(first.attn.q_norm, nn.Identity),
                            init_values=1.0 if hasattr(first.ls1, 'gamma') else None),
            head=HeadPart(pool=SamNeck(chans=chans)))

    def _refuse_options(self, model: VisionTransformerSAM, arch: str) -> None:
        """Options of timm's SAM class with no equivalent here, by name."""
        first = model.blocks[0]
        refused = {
            'pre_norm': not isinstance(model.norm_pre, nn.Identity),
            'act_layer': not (type(first.mlp.act) is nn.GELU and first.mlp.act.approximate == 'none'),
        }
        for name, bad in refused.items():
            if bad:
                raise ViTVariantsError(f'{arch} with these model_args has {name} other than timm\'s SAM default, '
                                       'which SimpleVisionTransformer does not express', path=self._config_path,
                                       key=f'model_args.{name}')

    def _check_tensors(self, model: nn.Module) -> None:
        """Every tensor of timm's build, at its shape, and no other: else the weights are another network."""
        expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
        names = set(self._store.names())
        for name in sorted(names - set(expected)):
            raise self._error(f'not a tensor of the {type(model).__name__} config.json describes', key=name)
        for name, shape in expected.items():
            if name not in names:
                raise self._error('missing: config.json describes a network that has it', key=name)
            found = tuple(self._store.shape(name))
            if found != shape:
                raise self._error('config.json describes a network with another shape here', key=name,
                                  shapes=(found, shape))


def _timm_folder(probe: Probe) -> bool:
    """A timm folder whose ``architecture`` is one of timm's SAM entries."""
    return is_sam_architecture(probe.config.get('architecture'))


FAMILY = Family(
    name='sam',
    routes=(Route(1040., _timm_folder, SamCheckpoint),),  # before timm's folders (their architecture)
)
