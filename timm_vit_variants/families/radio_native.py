"""The reader of RADIO (NVlabs/RADIO; C-RADIOv3) in NVIDIA's own layout (routed by ``families/radio.py``): the ``model.safetensors`` of its Hub folders
(``nvidia/C-RADIOv3-*``, ``hf_model.RADIOModel``), the ViT under ``radio_model.model.``.

The network is timm's ``VisionTransformer`` with RADIO's CPE patch generator (``enable_cpe``): a bias-free linear
embedder over C-P-P flattened patches (``patch_generator.embedder``), one [CLS] per teacher then registers
(``patch_generator.cls_token.token``, (tokens, D): our [CLS] the first, the rest registers), a position table for the
largest input (``patch_generator.pos_embed``, (1, M*M, D), no prefix rows), LayerScale and no final norm. Its output
here is every token of the last block (``forward_features``), after the input conditioner, which is preprocessing
(its mean and std are read from the file).

RADIO's table has no nominal grid: at an input of g_h x g_w patches its patch generator resizes it (bilinear,
``align_corners=False``, no antialias) to the square of the larger side and crops the top-left g_h x g_w. No resize
rule of ours is that, so the reader evaluates it for one grid: the table's own (M x M) unless ``--source-img-size``
names another, and the converted model holds the table of that grid. A resize of the converted model's table to
another grid (``--img-size``) is not RADIO's and is said so by the check. ``align_corners=False`` is NVlabs/RADIO's
code; timm notes that the Hub code released with C-RADIOv3-B/H used ``True`` (the file does not say which). Not
read: ``summary_idxs`` and the teacher adaptors (the conditioner's mean and std are the preprocessing).
"""
from typing import Any, Dict, Tuple

import torch
import torch.nn.functional as F

from ..checkpoints.fills import Misfit
from ..checkpoints.preprocessing import assumed_preprocessing
from ..checkpoints.source import Rule, SourceCheckpoint
from ..config import SimpleViTConfig, pair
from ..errors import ViTVariantsError

__all__ = ['RADIO_PREFIX', 'RadioCheckpoint', 'radio_table']

RADIO_PREFIX = 'radio_model.model.'
_GEN = '{p}patch_generator.'
# C-RADIOv3's widths -> heads (B, L, H, g: timm's vit_*_patch16_radio_v3 entries; H's heads are 80 wide)
_RADIO_HEADS = {768: 12, 1024: 16, 1280: 16, 1536: 24}
_CONDITIONER = ('radio_model.input_conditioner.norm_mean', 'radio_model.input_conditioner.norm_std')


def radio_table(table: torch.Tensor, grid: Tuple[int, int]) -> torch.Tensor:
    """RADIO's CPE table (1, M*M, D) at ``grid`` (``ViTPatchGenerator._get_pos_embeddings`` in eval): as stored at its
    own grid, else bilinear (``align_corners=False``, no antialias) to the square of the larger side, the top-left
    ``grid`` kept."""
    side = int(round(table.shape[1] ** 0.5))
    if tuple(grid) == (side, side):
        return table
    square = table.reshape(1, side, side, -1).permute(0, 3, 1, 2)
    big = max(grid)
    square = F.interpolate(square.float(), size=(big, big), mode='bilinear', align_corners=False).to(table.dtype)
    return square[:, :, :grid[0], :grid[1]].flatten(2).transpose(1, 2)


def _patch_kernel(dst: torch.Tensor, weight: torch.Tensor) -> None:
    """RADIO's embedder (D, C*P*P) over C-P-P flattened patches (its ``Im2Patches``) as our conv (D, C, P, P)."""
    if tuple(weight.shape) != (dst.shape[0], dst[0].numel()):
        raise Misfit('shape does not fit', weight.shape, (dst.shape[0], dst[0].numel()))
    dst.copy_(weight.reshape(dst.shape))


def _tokens(first: int, stop: Any = None):
    """Rows [first, stop) of RADIO's (tokens, D) [CLS] and register tokens, as our (1, n, D)."""
    def fill(dst: torch.Tensor, tokens: torch.Tensor) -> None:
        rows = tokens[first:stop].unsqueeze(0)
        if tuple(rows.shape) != tuple(dst.shape):
            raise Misfit('shape does not fit', rows.shape, dst.shape)
        dst.copy_(rows)
    return fill


class RadioCheckpoint(SourceCheckpoint):
    """The ViT of a RADIO ``model.safetensors``, its table evaluated for one grid (module docstring)."""
    format = 'radio'
    PREPROCESSING_DEFAULTS = assumed_preprocessing(
        'bicubic', 1.0, 'center', "not recorded by the checkpoint; RADIO's processor resizes to a multiple of the "
        'patch (no crop)')

    @property
    def RULES(self) -> Dict[str, Rule]:  # type: ignore[override]
        return {'patch_embed.proj.weight': Rule((_GEN + 'embedder.weight',), _patch_kernel),
                'cls_token': Rule((_GEN + 'cls_token.token',), _tokens(0, 1)),
                'reg_token': Rule((_GEN + 'cls_token.token',), _tokens(1)),
                'pos_embed': Rule((_GEN + 'pos_embed',), self._table)}

    def _table(self, dst: torch.Tensor, table: torch.Tensor) -> None:
        value = radio_table(table, self.grid)
        if tuple(value.shape) != tuple(dst.shape):
            raise Misfit('shape does not fit', value.shape, dst.shape)
        dst.copy_(value)

    def _recorded_preprocessing(self) -> Dict[str, Any]:
        """The input conditioner's mean and std (RADIO takes pixels in [0, 1])."""
        if not all(k in self._store for k in _CONDITIONER):
            return {}
        mean, std = (tuple(float(v) for v in self._store.tensor(k).flatten()) for k in _CONDITIONER)
        return dict(mean=mean, std=std)

    def _infer(self) -> SimpleViTConfig:
        p = self._prefix = RADIO_PREFIX
        names = {n[len(p):] for n in self._store.names() if n.startswith(p)}
        key = p + 'patch_generator.embedder.weight'
        dim, flat = self._shape(key)
        patch = int(round((flat // 3) ** 0.5))
        if 3 * patch * patch != flat:
            raise self._error('expected a linear embedder over 3-channel square patches (width, 3*P*P)', key=key,
                              shapes=((dim, flat),))
        if p + 'patch_generator.embedder.bias' in self._store:
            raise self._error("a bias on the patch embedder: not C-RADIOv3's (a DINOv2-based RADIO?)",
                              key=p + 'patch_generator.embedder.bias')
        tokens = self._shape(p + 'patch_generator.cls_token.token')
        table = self._shape(p + 'patch_generator.pos_embed')
        side = int(round(table[1] ** 0.5)) if len(table) == 3 else 0
        if len(table) != 3 or side * side != table[1] or table[2] != dim or len(tokens) != 2 or tokens[1] != dim:
            raise self._error("RADIO's square CPE table (1, M*M, width) beside its (tokens, width) [CLS] and "
                              'registers', key=p + 'patch_generator.pos_embed', shapes=(table, tokens))
        self._check_dims(key, width=dim, tokens=table[1])
        size = self.options.img_size
        if size is None:
            self.grid = (side, side)
        else:
            h, w = pair(size, 'img_size')
            if h % patch or w % patch:
                raise ViTVariantsError(f'the source image size {h}x{w} is not a multiple of the patch {patch}',
                                       path=self.path, key=key)
            self.grid = (h // patch, w // patch)
        depth = self._depth(names, first=p + 'blocks.0.attn.qkv.weight')
        heads = self._head_count(dim, [(_RADIO_HEADS.get(dim), f'the C-RADIOv3 release of width {dim}')],
                                 f'a RADIO file does not record the number of attention heads, and width {dim} is not '
                                 "one of C-RADIOv3's; give the head count", key=p + 'blocks.0.attn.qkv.weight')
        mlp = self._shape(p + 'blocks.0.mlp.fc1.weight')[0]
        self._check_dims(p + 'blocks.0.mlp.fc1.weight', mlp=mlp)
        skipped = sorted({n for n in self._store.names() if not n.startswith(p)})
        where = 'its own grid' if size is None else f'the {self.grid[0]}x{self.grid[1]} grid asked for'
        self.notes.append(
            f'detected: a RADIO ViT ({tokens[0]} [CLS] and register tokens: the first our [CLS], the rest registers; '
            f'LayerScale, no final norm); its {side}x{side} CPE table evaluated for {where} as its patch generator '
            "does (bilinear to the square of the larger side, no antialias, the top-left cropped); another --img-size "
            "resizes that table by our rule, not RADIO's; the input conditioner's mean and std are the preprocessing"
            + (f'; not read: {", ".join(n for n in skipped if n not in _CONDITIONER)}' if skipped else ''))
        return SimpleViTConfig.of(
            img_size=(self.grid[0] * patch, self.grid[1] * patch), patch_size=patch, embed_dim=dim, depth=depth,
            num_heads=heads, mlp_dim=mlp, num_classes=0, global_pool='token', class_token=True,
            reg_tokens=tokens[0] - 1, pos_embed='learn', pos_embed_cls_slot=False, pos_embed_resample='timm',
            final_norm=False, fc_norm=False, patch_bias=False, qkv_bias=p + 'blocks.0.attn.qkv.bias' in self._store,
            init_values=1.0 if 'blocks.0.ls1.gamma' in names else None,
            norm_eps=self.options.norm_eps or 1e-6, act_layer=self.options.act_layer or 'gelu')
