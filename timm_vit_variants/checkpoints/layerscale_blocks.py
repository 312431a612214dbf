"""The layout DeiT-III and naver's RoPE-ViT share: DeiT-III's ``Layer_scale_init_Block`` (timm's names but for
LayerScale, ``gamma_1``/``gamma_2``), read by ``LayerScaleBlocks``, and how a file of that layout is told to be the
one or the other.

A DeiT-III file has exactly the keys of a RoPE-ViT ``rope_axial_ape`` one (RoPE-ViT is built on these blocks and
stores no tensor for axial RoPE), so the family is decided from the evidence there is: the file's name or its Hub
id (``family_evidence``), else ``--from``; without any, DeiT-III, by far the more used. Either reader names the
choice among the facts a verification shares with its reference (``record_family``).
"""
import os
import re
from typing import Optional, Set, Tuple

from .source import SourceCheckpoint
from .tensor_rules import LAYER_SCALE, renamed_keys

__all__ = ['LayerScaleBlocks', 'FAMILIES', 'is_layerscale_ape', 'family_evidence', 'layerscale_ape_format',
           'record_family']

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

    TENSOR_RULES = (renamed_keys(LAYER_SCALE),)

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
