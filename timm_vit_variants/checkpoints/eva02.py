"""EVA-02 checkpoints: BAAI's own files (baaivision/EVA ``EVA-02/asuka``) and timm's ``eva02_*`` state dicts and folders.

BAAI's files wrap the state dict in ``{'module': ...}`` (DeepSpeed) or ``{'model': ...}``; EVA's own loader
(``run_class_finetuning.py --model_key model|module``) takes either, and so does ours. Their layout:

* fine-tuned classifiers (``modeling_finetune.VisionTransformer``): ``cls_token``, ``pos_embed`` (1, 1 + N, D) with a
  [CLS] slot, ``blocks.{i}.attn.q_bias``/``v_bias`` beside a fused ``attn.qkv`` (Ti/S) or ``q_proj``/``k_proj``/
  ``v_proj`` without biases (B/L), LayerScale ``gamma_1``/``gamma_2`` when trained with it, the MLP as xformers'
  packed ``w12``/``w3`` (Ti/S) or ``w1``/``w2``/``ffn_ln``/``w3`` (B/L, sub-LN), ``fc_norm`` (mean pooling) and
  ``head``;
* MIM pretraining (``modeling_pretrain.VisionTransformerForMaskedImageModeling``): the same blocks, a final ``norm``
  on every token, and ``mask_token``/``lm_head``, which only pretraining uses: they are dropped, with a note, as
  EVA's fine-tuning load drops them.

Both store the RoPE tables of their training grid (``rope.freqs_cos``/``freqs_sin``, again under every block's
``attn.rope``), buffers EVA's code loads. They are evidence, not weights: the rotations are recomputed for each
image's own grid with EVA-02's scaling to the pretraining grid (timm's ``ref_feat_shape``), and that grid is the one
for which EVA's formula reproduces the stored tables (16x16 for every published file: ``eva02_models.EVA02_REF_GRID``,
assumed where no table is stored). Tables no grid reproduces, or that are not finite, are refused.
timm's ``eva02_*`` ports have our names already (``mlp.fc1``/``fc1_g``/``fc1_x``/``norm``/``fc2``, ``q_proj.bias``).

The head count is not stored: EVA-02's widths are the standard ViT's (192: 3, 384: 6, 768: 12, 1024: 16); a folder's
``model_args`` or ``num_heads`` gives any other. BAAI's files resize their table by EVA's ``run_class_finetuning``
rule (bicubic, no antialias: our 'deit'); timm's by timm's own ('timm').
"""
import math
from typing import Any, Dict, Set, Tuple

import torch

from ..config import SimpleViTConfig
from ..model_table import heads_for_width
from ..eva02_models import EVA02, EVA02_MEAN, EVA02_REF_GRID, EVA02_ROPE_THETA, EVA02_STD
from ..rope import Eva02Rope, rope_frequencies
from .preprocessing import assumed_preprocessing
from .source import SourceCheckpoint
from .tensor_rules import renamed_keys, timm_recorded_preprocessing

__all__ = ['Eva02Checkpoint', 'is_eva02', 'is_eva02_architecture']

_MIM_ONLY = ('mask_token', 'lm_head.weight', 'lm_head.bias')
# ours -> BAAI's, for the names that differ (xformers' packed SwiGLU, EVA's split one, its q/v biases)
_BAAI_NAMES = {'mlp.fc1_g.': 'mlp.w1.', 'mlp.fc1_x.': 'mlp.w2.', 'mlp.fc1.': 'mlp.w12.', 'mlp.fc2.': 'mlp.w3.',
               'mlp.norm.': 'mlp.ffn_ln.', 'attn.q_proj.bias': 'attn.q_bias', 'attn.v_proj.bias': 'attn.v_bias'}
# EVA's persistent RoPE buffers: its VisionTransformer's, and the same module's copy under every block's attention
_ROPE_CACHE = ('rope.freqs_cos', 'rope.freqs_sin')
_ROPE_TOLERANCE = 1e-5  # a float32 table against EVA's formula; a half-precision one gets its dtype's rounding


def is_eva02_architecture(name: Any) -> bool:
    """Whether a timm ``config.json`` ``architecture`` is one of timm's EVA-02 image models (not its CLIP towers)."""
    return isinstance(name, str) and name.startswith('eva02_') and '_clip_' not in name


def is_eva02(names: Set[str]) -> bool:
    """Whether a state dict is EVA-02's, in BAAI's or timm's layout: a learned table beside a [CLS] token, q/v-only
    biases (``attn.q_bias``, or ``q_proj`` with no ``k_proj`` bias) and a SwiGLU MLP, and none of the registers or
    learned frequencies of timm's other Eva ports, nor BEiT's relative-position tables (BEiT has q/v biases too)."""
    qv_bias = 'blocks.0.attn.q_bias' in names or (
        'blocks.0.attn.q_proj.weight' in names and 'blocks.0.attn.k_proj.bias' not in names)
    swiglu = bool({'blocks.0.mlp.w12.weight', 'blocks.0.mlp.w1.weight', 'blocks.0.mlp.fc1_g.weight'} & names) or (
        'blocks.0.attn.q_bias' in names and 'blocks.0.mlp.fc1.weight' in names)
    return {'patch_embed.proj.weight', 'cls_token', 'pos_embed'} <= names and qv_bias and swiglu and \
        not {'reg_token', 'rope.freqs', 'storage_tokens'} & names and not any('relative_position' in n for n in names)


class Eva02Checkpoint(SourceCheckpoint):
    format = 'eva02'
    SKIPPED = _MIM_ONLY
    PREPROCESSING_DEFAULTS = assumed_preprocessing(
        'bicubic', 1.0, 'center', "not recorded by the checkpoint; EVA-02's evaluation (OpenAI CLIP mean and std, "
        'bicubic, crop 1.0)', mean=EVA02_MEAN, std=EVA02_STD)
    TENSOR_RULES = (renamed_keys(_BAAI_NAMES, when=lambda r: r._baai),)

    def _recorded_preprocessing(self) -> Dict[str, Any]:
        """A timm folder's config.json pretrained_cfg, read as timm's own reader reads it."""
        return timm_recorded_preprocessing(self)

    def _candidates(self) -> Set[str]:
        """The stored training-grid RoPE tables are evidence of the pretraining grid (``_ref_grid``), not weights:
        the RoPE is recomputed for each grid."""
        return {n for n in super()._candidates() if not n.endswith(_ROPE_CACHE)}

    def _infer(self) -> SimpleViTConfig:
        names = set(self._store.names())
        self._baai = 'blocks.0.mlp.w3.weight' in names
        dim, in_chans, patch_h, patch_w = self._conv_patch_kernel()
        depth = self._depth(names, first='blocks.0.attn.proj.weight')
        fused = 'blocks.0.attn.qkv.weight' in names
        mlp_layer, mlp_dim, mlp_norm = self._mlp(names, dim)
        self._check_token_table('pos_embed', dim, (patch_h, patch_w), class_token=True, slot=True,
                                img_size=self.options.img_size)
        heads = self._heads(dim)
        fc_norm, has_head = 'fc_norm.weight' in names, 'head.weight' in names
        mim = 'mask_token' in names
        # EVA's classifiers pool patch tokens (fc_norm) or, with use_mean_pooling=False, take [CLS] after the norm
        pool = 'avg' if fc_norm or not has_head else 'token'
        ref = self._ref_grid(names, dim // heads)
        where = "BAAI's EVA-02 file" if self._baai else "timm's eva02_* port"
        self.notes.append(
            f'detected {where} ({"fused qkv" if fused else "split q/k/v"}, q/v-only bias, '
            f'{"split SwiGLU" if mlp_layer == "swiglu" else "packed SwiGLU"}{" with sub-LN" if mlp_norm else ""}'
            f'{", LayerScale" if "blocks.0.gamma_1" in names else ""}); RoPE recomputed for each grid, positions '
            f'scaled to {ref}x{ref}' + ('' if 'rope_ref_grid' in self.assumed else
                                        f', the pretraining grid its stored {_ROPE_CACHE[0]} was built for') +
            (f"; MIM pretraining file: {', '.join(n for n in _MIM_ONLY if n in names)} dropped (pretraining only), "
             'the final norm kept on every token' if mim else '') +
            ("; the table resizes by EVA's run_class_finetuning rule (bicubic, no antialias: 'deit')"
             if self._baai else "; the table resizes by timm's rule"))
        return SimpleViTConfig.of(**dict(
            EVA02, img_size=(self.grid[0] * patch_h, self.grid[1] * patch_w), patch_size=(patch_h, patch_w),
            in_chans=in_chans, num_classes=self._shape('head.weight')[0] if has_head else 0, global_pool=pool,
            embed_dim=dim, depth=depth, num_heads=heads, mlp_dim=mlp_dim, mlp_layer=mlp_layer, rope_ref_grid=ref,
            init_values=1.0 if 'blocks.0.gamma_1' in names else None,  # only the initialiser: the stored gammas load
            qkv_bias='blocks.0.attn.q_bias' in names or 'blocks.0.attn.q_proj.bias' in names,
            pos_embed_resample=EVA02['pos_embed_resample'] if self._baai else 'timm', qkv_fused=fused,
            mlp_norm=mlp_norm, fc_norm=fc_norm, head_bias='head.bias' in names or not has_head,
            act_layer=self.options.act_layer or EVA02['act_layer'],
            norm_eps=self.options.norm_eps or EVA02['norm_eps']))

    def _ref_grid(self, names: Set[str], head_dim: int) -> int:
        """EVA-02's pretraining grid, which its RoPE positions are scaled to: read from the stored tables where the
        file has them (EVA's code loads them as buffers, so at the stored grid they are what it runs), else assumed.

        It is the g for which EVA's formula (``Eva02Rope.tables``: pt_seq_len=g, ft_seq_len=the file's grid)
        reproduces every stored copy: estimated from the slowest band of one axis, then checked on every entry.
        Tables that are not finite, not of the grid's shape, or that no integer g reproduces are refused."""
        first = sorted((k for k in names if k.endswith(_ROPE_CACHE[0])), key=lambda k: (k != _ROPE_CACHE[0], k))
        tables = {key: self._rope_table(key, head_dim) for name in first for key in (name, name[:-3] + 'sin')}
        rows, cols = self.grid
        # the one axis of more than one position (EVA-02's grids are square) and its slowest band's last column
        n, band = (rows, head_dim // 2 - 1) if rows > 1 else (cols, head_dim - 1)
        if not tables or n == 1:
            why = 'the file stores no RoPE tables' if not tables else 'its RoPE tables hold one position only'
            self.assumed['rope_ref_grid'] = (EVA02_REF_GRID, "EVA-02's pretraining grid (224 px at patch 14), which "
                                             f'its RoPE positions are scaled to; {why}')
            ref = EVA02_REF_GRID
        else:  # the last token's angle there is below pi: n-1 positions scaled by ref / n, times the slowest frequency
            cos, sin = tables[first[0]], tables[first[0][:-3] + 'sin']
            slowest = float(rope_frequencies(head_dim // 2, EVA02_ROPE_THETA)[-1])
            angle = math.atan2(float(sin[-1, band]), float(cos[-1, band]))
            ref = max(1, round(angle / slowest * n / (n - 1)))
        want = dict(zip(('cos', 'sin'), Eva02Rope(head_dim, EVA02_ROPE_THETA, ref).tables(rows, cols)))
        for key, table in tables.items():
            off = float((table - want[key[-3:]].double()).abs().max())
            if off > max(_ROPE_TOLERANCE, 4 * torch.finfo(getattr(torch, self._store.dtype(key))).eps):
                why = (f"not EVA-02's RoPE table (VisionRotaryEmbeddingFast) for this {rows}x{cols} grid at any "
                       f'pretraining grid: at the nearest, {ref}x{ref}, {off:.2g} off')
                if key[:-3] != first[0][:-3]:
                    why = (f"not the table {first[0][:-3]}cos/sin hold (the {ref}x{ref} pretraining grid), {off:.2g} "
                           "off, while EVA's blocks share one RoPE module")
                raise self._error(why, key=key)
        return ref

    def _rope_table(self, key: str, head_dim: int) -> torch.Tensor:
        """A stored RoPE table (grid tokens, head width) as float64, refused unless finite floats of that shape."""
        rows, cols = self.grid
        shape = self._shape(key)
        if shape != (rows * cols, head_dim):
            raise self._error(f"EVA-02's RoPE table for the {rows}x{cols} grid has a row per patch and a column per "
                              f'channel of a {head_dim}-wide head (another width: give the head count)', key=key,
                              shapes=(shape, (rows * cols, head_dim)), needs='num_heads')
        if not self._store.is_float(key):
            raise self._error(f'expected a floating-point tensor, got {self._store.dtype(key)}', key=key)
        table = self._store.tensor(key).double()
        if not bool(torch.isfinite(table).all()):
            raise self._error('the RoPE table is not finite (NaN or infinity)', key=key)
        return table

    def _mlp(self, names: Set[str], dim: int) -> Tuple[str, int, bool]:
        """(mlp_layer, gated width, sub-LN) from the first block's MLP tensors."""
        prefix = 'blocks.0.mlp.'
        split, packed, out = ('w1', 'w12', 'w3') if self._baai else ('fc1_g', 'fc1', 'fc2')
        key = prefix + (split if prefix + split + '.weight' in names else packed) + '.weight'
        shape = self._shape(key)
        if len(shape) != 2 or shape[1] != dim:
            raise self._error('MLP input projection must be (hidden, width)', key=key, shapes=(shape, ('hidden', dim)))
        is_split = key.endswith(split + '.weight')
        if not is_split and shape[0] % 2:
            raise self._error('a packed SwiGLU holds gate then value: its first axis must be even', key=key,
                              shapes=(shape,))
        width = shape[0] if is_split else shape[0] // 2
        down = self._shape(prefix + out + '.weight')
        if len(down) != 2 or down[1] != width:
            raise self._error(f"not EVA-02's SwiGLU: {key} {shape} does not reach {out} {down} through a gate "
                              "(a plain MLP: EVA-01's?)", key=prefix + out + '.weight', shapes=(down, (dim, width)))
        self._check_dims(key, mlp=width)
        layer = 'swiglu' if is_split else 'swiglu_packed'
        norm = prefix + ('ffn_ln' if self._baai else 'norm') + '.weight'
        if norm in names and layer != 'swiglu':
            raise self._error("a sub-LN beside a packed SwiGLU is not EVA-02's (B/L split theirs)", key=norm)
        return layer, width, norm in names

    def _heads(self, dim: int) -> int:
        """The caller's head count, else a timm folder's ``model_args`` (recorded), else the standard ViT's of this
        width (assumed)."""
        args = self.source_config.get('model_args')
        recorded = args.get('num_heads') if isinstance(args, dict) else None
        if not self.options.num_heads and isinstance(recorded, int) and not isinstance(recorded, bool) and \
                recorded > 0 and dim % recorded == 0:
            return recorded
        return self._head_count(dim, [(heads_for_width(dim), f'EVA-02 (the standard ViT) of width {dim}')],
                                f'an EVA-02 checkpoint does not record the number of attention heads, and width {dim} '
                                "is not one of EVA-02's; give the head count", key='blocks.0.attn.proj.weight')
