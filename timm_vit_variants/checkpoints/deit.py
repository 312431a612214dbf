"""DeiT-III checkpoints (facebookresearch/deit ``models_v2.py``, ``deit_3_{size}_{img}_{1k,21k}.pth``), saved as
``{'model': ...}``.

``vit_models`` with ``Layer_scale_init_Block``: LayerScale as ``gamma_1``/``gamma_2``, qkv bias, LayerNorm eps 1e-6,
exact GELU; a learned table (1, N, D) with no [CLS] slot, added before [CLS] is concatenated; [CLS] pooling after
the final norm, a classifier ``head``. DeiT's ``main.py`` resizes the table bicubic without antialias, square grids
only (our 'deit' rule). The files do not record the head count: DeiT-III's own of the width is assumed.

A DeiT-III file has exactly the keys of a RoPE-ViT ``rope_axial_ape`` one (RoPE-ViT is built on these blocks and
stores no tensor for axial RoPE), so the family is decided from the evidence there is: the file's name or its Hub
id (``family_evidence``), else ``--from``; without any, DeiT-III, by far the more used. Either reader names the
choice among the facts a verification shares with its reference (``record_family``).
"""
import os
import re
from typing import Any, Dict, Optional, Set, Tuple

from ..config import SimpleViTConfig
from ..deit_models import DEIT3
from .preprocessing import imagenet_preprocessing
from .source import Rule, SourceCheckpoint

__all__ = ['Deit3Checkpoint', 'LayerScaleBlocks', 'FAMILIES', 'is_layerscale_ape', 'family_evidence', 'layerscale_ape_format',
           'record_family']

_LAYER_SCALE = {'ls1.gamma': 'gamma_1', 'ls2.gamma': 'gamma_2'}
# DeiT-III's widths and head counts (models_v2.py: tiny ... Giant).
_HEADS = {192: 3, 384: 6, 512: 8, 768: 12, 1024: 16, 1280: 16, 1408: 16, 1664: 16}
# The two families of the shared layout, as the pass line names them.
FAMILIES = {'deit3': 'DeiT-III', 'ropevit': 'RoPE-ViT rope_axial_ape'}
# RoPE-ViT's names: rope_axial_ape_deit_small_patch16_LS, ropevit_*, rope-vit_*
_ROPE = re.compile(r'(?:^|[^a-z])rope(?:[-_]?vit)?(?:[^a-z]|$)')
_DEIT3 = re.compile(r'deit[_-]?(?:3|iii)(?:[^a-z0-9]|$)')  # DeiT-III's: deit_3_small_224_1k.pth, timm's deit3_*


def is_layerscale_ape(names: Set[str]) -> bool:
    """Whether a state dict has the layout DeiT-III and RoPE-ViT ``rope_axial_ape`` share: ``gamma_1`` LayerScale,
    a patch conv and a table, and no learned RoPE frequencies."""
    return {'blocks.0.gamma_1', 'patch_embed.proj.weight', 'pos_embed'} <= names and not {'freqs', 'rope.freqs'} & names


def _names(path: str) -> Tuple[str, ...]:
    """What a source's name says, most specific first: its file or folder name, then a Hub cache's repo id."""
    parts = os.path.abspath(path).split(os.sep)
    hub = [p[len('models--'):].replace('--', '/') for p in reversed(parts) if p.startswith('models--')]
    return (parts[-1], *hub[:1])


def family_evidence(path: str) -> Tuple[Optional[str], str]:
    """('ropevit' or 'deit3', the name that says so) from a source's file name or Hub id, or (None, '') when neither
    says. A RoPE-ViT name mentions 'deit' too, so 'rope' decides first."""
    for name in _names(path):
        low = name.lower()
        if _ROPE.search(low):
            return 'ropevit', name
        if _DEIT3.search(low):
            return 'deit3', name
    return None, ''


def layerscale_ape_format(path: str) -> str:
    """The reader of the shared layout for ``path``: the family its name says, else DeiT-III."""
    return family_evidence(path)[0] or 'deit3'


def record_family(reader: SourceCheckpoint) -> None:
    """Name ``reader``'s family (its ``format``) among the facts it did not read: ``assumed`` with the evidence, or
    the default; ``given`` when the caller chose it (``--from``) against what the name says."""
    label, other_format = FAMILIES[reader.format], 'ropevit' if reader.format == 'deit3' else 'deit3'
    other = FAMILIES[other_format]
    found, name = family_evidence(reader.path)
    if found == reader.format:
        why = f'the name {name!r} says {label}'
    elif found is None and reader.format == 'deit3':
        why = f'no file name or Hub id says which; {label} is the default (by far the more used)'
    else:
        reader.given['architecture'] = label
        reader.notes.append(f'read as {label}, as asked, though the keys fit {other} too')
        return
    reader.assumed['architecture'] = (label, why)
    reader.notes.append(f'read as {label}: {why}; the keys fit {other} too (--from {other_format} reads it so)')


class LayerScaleBlocks(SourceCheckpoint):
    """DeiT-III's ``Layer_scale_init_Block`` layout (DeiT-III, RoPE-ViT): timm's names but for LayerScale
    (``gamma_1`` is our ``ls1.gamma``)."""

    def _rule(self, pattern: str, block: Optional[int]) -> Tuple[Rule, Optional[int]]:
        key = pattern.replace('{i}', str(block))
        for ours, theirs in _LAYER_SCALE.items():
            if key.endswith(ours):
                return Rule((key[:-len(ours)] + theirs,)), None
        return Rule((key,)), None

    def _block_dims(self) -> Tuple[Set[str], Tuple[int, int, int, int, int, int, int]]:
        """(the file's names, (width, input channels, patch height and width, depth, MLP width, classes)),
        each checked against the limits."""
        names = set(self._store.names())
        dim, in_chans, patch_h, patch_w = self._conv_patch_kernel()
        depth = self._depth(names)
        mlp_dim = self._shape('blocks.0.mlp.fc1.weight')[0]
        num_classes = self._shape('head.weight')[0] if 'head.weight' in names else 0
        self._check_dims('blocks.0.mlp.fc1.weight', mlp=mlp_dim, classes=num_classes)
        return names, (dim, in_chans, patch_h, patch_w, depth, mlp_dim, num_classes)


class Deit3Checkpoint(LayerScaleBlocks):
    """A DeiT-III ``models_v2`` file."""
    format = 'deit3'
    PREPROCESSING_DEFAULTS = imagenet_preprocessing(
        1.0, "not recorded by the checkpoint; DeiT-III's eval preprocessing (--eval-crop-ratio 1.0, bicubic)")

    def _infer(self, hints: Dict[str, Any]) -> SimpleViTConfig:
        names, (dim, in_chans, patch_h, patch_w, depth, mlp_dim, num_classes) = self._block_dims()
        heads = self._head_count(dim, hints, [(_HEADS.get(dim), f"DeiT-III's own of width {dim}")],
                                 'a DeiT-III checkpoint does not record the number of attention heads, and width '
                                 f"{dim} is none of DeiT-III's; give the head count")
        self._check_token_table('pos_embed', dim, (patch_h, patch_w), class_token=True, slot=False,
                                img_size=hints.get('img_size'))
        record_family(self)
        self.notes.append('detected a DeiT-III model (models_v2 vit_models, LayerScale gamma_1/gamma_2, a table with '
                          "no [CLS] slot: resize rule 'deit', DeiT's main.py bicubic without antialias)")
        return SimpleViTConfig.of(**dict(
            DEIT3, img_size=(self.grid[0] * patch_h, self.grid[1] * patch_w), patch_size=(patch_h, patch_w),
            in_chans=in_chans, num_classes=num_classes, embed_dim=dim, depth=depth, num_heads=heads, mlp_dim=mlp_dim,
            qkv_bias='blocks.0.attn.qkv.bias' in names, act_layer=hints.get('act_layer') or DEIT3['act_layer'],
            norm_eps=hints.get('norm_eps') or DEIT3['norm_eps'],
            head_bias='head.bias' in names or 'head.weight' not in names))
