"""EVA-CLIP's image towers in BAAI's own layout (baaivision/EVA ``EVA-CLIP/rei/eva_clip``): the ``*.pt`` files of
EVA02-CLIP-B/16, -L/14, -L/14-336 and EVA01-CLIP-g/14, plain state dicts of the whole CLIP model (EVA's
``load_checkpoint`` also takes one under ``model``, ``module`` or ``state_dict``), the image tower under ``visual.``.

``EVAVisionTransformer`` as EVA-CLIP builds it (``use_mean_pooling=False``): a [CLS] token and a learned table with
its slot, q/v-only biases (``attn.q_bias`` / ``v_bias``), the final ``norm`` on the [CLS] token and ``head``, the
linear projection into the joint space (with its bias), as the classifier. EVA02-CLIP's blocks split q/k/v
(``q_proj`` ...), norm the attention output before its projection (``inner_attn_ln``: our ``attn.norm``), and run
EVA's SwiGLU with a sub-LN (``w1`` / ``w2`` / ``ffn_ln`` / ``w3``) and EVA-02's RoPE, whose stored tables
(``rope.freqs_cos`` / ``freqs_sin``) give the head width and are checked against the pretraining grid the positions
are scaled to (``pt_hw_seq_len`` 16 in every released config). EVA01-CLIP's blocks are a plain ViT's (fused ``qkv``,
GELU MLP, LayerScale where trained with it), and their head count is not stored: the released widths' are known.
EVA-CLIP resizes the table as its ``resize_evaclip_pos_embed`` does (bicubic, no antialias, square grids only: our
'deit'). The text tower is not read. Refused by name: EVA02-CLIP-bigE's post-norm blocks (width 1792), which the
tensors cannot tell from pre-norm ones.
"""
from typing import Dict, Set

from ..checkpoints.preprocessing import assumed_preprocessing
from ..checkpoints.routes import Route
from ..checkpoints.source import SourceCheckpoint
from ..checkpoints.tensor_rules import LAYER_SCALE, qv_bias, renamed_keys
from ..clip_models import OPENAI_MEAN, OPENAI_STD
from ..config import SimpleViTConfig
from ..eva02_models import EVA02, EVA02_REF_GRID, EVA02_ROPE_THETA
from ..rope import Eva02Rope
from .registry import Family

__all__ = ['EVACLIP_PREFIX', 'EvaClipCheckpoint', 'is_evaclip', 'FAMILY']

EVACLIP_PREFIX = 'visual.'
_ROPE = ('rope.freqs_cos', 'rope.freqs_sin')
# ours -> EVA02-CLIP's, for the names that differ
_EVA02_NAMES = {'mlp.fc1_g.': 'mlp.w1.', 'mlp.fc1_x.': 'mlp.w2.', 'mlp.fc2.': 'mlp.w3.', 'mlp.norm.': 'mlp.ffn_ln.',
                'attn.norm.': 'attn.inner_attn_ln.', 'attn.q_proj.bias': 'attn.q_bias',
                'attn.v_proj.bias': 'attn.v_bias'}
# EVA01-CLIP's released widths -> heads (model_configs: head_width 88 for g/14, the default 64 for B/16)
_EVA01_HEADS = {1408: 16, 768: 12}
_BIG_E = 1792  # EVA02-CLIP-bigE-14's width: post-norm blocks (model_configs: postnorm true)
_ROPE_TOLERANCE = 1e-5


def is_evaclip(names: Set[str]) -> bool:
    """Whether a state dict holds EVA-CLIP's ``EVAVisionTransformer`` under ``visual.`` (open_clip's towers name
    their tensors ``visual.conv1`` / ``class_embedding``, or put a timm trunk under ``visual.trunk.``)."""
    return {EVACLIP_PREFIX + k for k in ('patch_embed.proj.weight', 'cls_token', 'pos_embed',
                                         'blocks.0.norm1.weight')} <= names


class EvaClipCheckpoint(SourceCheckpoint):
    """The image tower of an EVA-CLIP ``*.pt`` file, read as ``visual(x)`` computes (module docstring)."""
    format = 'evaclip'
    PREPROCESSING_DEFAULTS = assumed_preprocessing(
        'bicubic', 1.0, 'center', "not recorded by the checkpoint; EVA-CLIP's image_transform (OpenAI CLIP mean and "
        'std, bicubic, resized and center-cropped)', mean=OPENAI_MEAN, std=OPENAI_STD)
    TENSOR_RULES = (renamed_keys(_EVA02_NAMES, when=lambda r: r._eva02),
                    renamed_keys(LAYER_SCALE, when=lambda r: not r._eva02),
                    qv_bias('{p}blocks.{i}.attn.q_bias', '{p}blocks.{i}.attn.v_bias'))

    def _candidates(self) -> Set[str]:
        """The tower's tensors but its RoPE tables (one shared module's buffers, recomputed for each grid)."""
        return {n for n in super()._candidates() if not n.endswith(_ROPE)}

    def _infer(self) -> SimpleViTConfig:
        p = self._prefix = EVACLIP_PREFIX
        names = {n[len(p):] for n in self._store.names() if n.startswith(p)}
        self._eva02 = 'blocks.0.attn.q_proj.weight' in names
        dim, in_chans, patch_h, patch_w = self._conv_patch_kernel(p + 'patch_embed.proj.weight')
        depth = self._depth(names, first=p + 'blocks.0.attn.proj.weight')
        self._check_token_table(p + 'pos_embed', dim, (patch_h, patch_w), class_token=True, slot=True,
                                img_size=self.options.img_size)
        head = self._shape(p + 'head.weight')
        common = dict(img_size=(self.grid[0] * patch_h, self.grid[1] * patch_w), patch_size=(patch_h, patch_w),
                      in_chans=in_chans, embed_dim=dim, depth=depth, num_classes=head[0], global_pool='token',
                      class_token=True, pos_embed_cls_slot=True, pos_embed_resample='deit', fc_norm=False,
                      final_norm=True, head_bias=p + 'head.bias' in self._store,
                      qkv_bias='blocks.0.attn.q_bias' in names, norm_eps=self.options.norm_eps or 1e-6,
                      grid_mode='crop')
        skipped = sorted({n.split('.', 1)[0] for n in self._store.names() if not n.startswith(p)})
        text = f'; the text tower ({", ".join(skipped)}) is not read' if skipped else ''
        if self._eva02:
            return SimpleViTConfig.of(**common, **self._eva02_args(names, dim, text))
        return SimpleViTConfig.of(**common, **self._eva01_args(names, dim, text))

    def _eva02_args(self, names: Set[str], dim: int, text: str) -> Dict:
        p = self._prefix
        cos = self._shape(p + _ROPE[0]) if _ROPE[0] in names else None
        if cos is None or len(cos) != 2 or dim % cos[1]:
            raise self._error("EVA02-CLIP's RoPE table (grid tokens, head width) is missing or not of a head width "
                              f'that divides {dim}', key=p + _ROPE[0], shapes=None if cos is None else (cos,))
        heads = dim // cos[1]
        if self.options.num_heads not in (None, heads):
            raise self._error(f'num_heads={self.options.num_heads} (given) contradicts the {cos[1]}-wide heads of '
                              'the stored RoPE table', key=p + _ROPE[0])
        self._check_rope(cos[1])
        width = self._shape(p + 'blocks.0.mlp.w1.weight')[0]
        self._check_dims(p + 'blocks.0.mlp.w1.weight', mlp=width)
        self.notes.append('detected: an EVA02-CLIP image tower (split q/k/v with the attention sub-LN, SwiGLU with '
                          f'its sub-LN, RoPE scaled to {EVA02_REF_GRID}x{EVA02_REF_GRID}: its stored table checked); '
                          "the [CLS] token normed and projected; the table resizes as EVA-CLIP's "
                          "resize_evaclip_pos_embed (bicubic, no antialias: 'deit')" + text)
        return dict(num_heads=heads, mlp_dim=width, mlp_layer='swiglu', mlp_norm='blocks.0.mlp.ffn_ln.weight' in names,
                    attn_norm='blocks.0.attn.inner_attn_ln.weight' in names, qkv_fused=False, block_type='eva',
                    pos_embed='learn+rope', rope_type='eva02', rope_theta=EVA02_ROPE_THETA,
                    rope_ref_grid=EVA02_REF_GRID, act_layer=self.options.act_layer or EVA02['act_layer'],
                    init_values=1.0 if 'blocks.0.gamma_1' in names else None)

    def _eva01_args(self, names: Set[str], dim: int, text: str) -> Dict:
        p = self._prefix
        if dim == _BIG_E:
            raise self._error(f"width {dim} is EVA02-CLIP-bigE's, whose post-norm blocks (model_configs: postnorm) "
                              'SimpleVisionTransformer does not express', key=p + 'blocks.0.norm1.weight')
        for key in ('blocks.0.attn.qkv.weight', 'blocks.0.mlp.fc1.weight'):
            if key not in names:
                raise self._error("neither EVA02-CLIP's split q/k/v nor EVA01-CLIP's fused qkv and MLP", key=p + key)
        heads = self._head_count(dim, [(_EVA01_HEADS.get(dim), f'the EVA01-CLIP release of width {dim}')],
                                 f'an EVA-CLIP file does not record the number of attention heads, and width {dim} is '
                                 "not one of EVA01-CLIP's; give the head count", key=p + 'blocks.0.attn.qkv.weight')
        width = self._shape(p + 'blocks.0.mlp.fc1.weight')[0]
        self._check_dims(p + 'blocks.0.mlp.fc1.weight', mlp=width)
        self.notes.append('detected: an EVA01-CLIP image tower (fused qkv with q/v-only bias, GELU MLP'
                          f'{", LayerScale" if "blocks.0.gamma_1" in names else ""}, no RoPE); the [CLS] token normed '
                          "and projected; the table resizes as EVA-CLIP's resize_evaclip_pos_embed (bicubic, no "
                          "antialias: 'deit')" + text)
        return dict(num_heads=heads, mlp_dim=width, mlp_layer='mlp', qkv_fused=True, pos_embed='learn',
                    act_layer=self.options.act_layer or 'gelu',
                    init_values=1.0 if 'blocks.0.gamma_1' in names else None)

    def _check_rope(self, head_dim: int) -> None:
        """The stored tables are EVA-02's for this grid at the released pretraining grid, else refused (another
        ``pt_hw_seq_len`` would scale the positions otherwise)."""
        want = dict(zip(_ROPE, Eva02Rope(head_dim, EVA02_ROPE_THETA, EVA02_REF_GRID).tables(*self.grid)))
        for name, table in want.items():
            key = self._prefix + name
            stored = self._store.tensor(key).double()
            if tuple(stored.shape) != tuple(table.shape):
                raise self._error(f'a RoPE table for the {self.grid[0]}x{self.grid[1]} grid', key=key,
                                  shapes=(tuple(stored.shape), tuple(table.shape)))
            off = float((stored - table.double()).abs().max())
            if not off <= _ROPE_TOLERANCE:
                raise self._error(f"not EVA-02's RoPE table for this grid scaled to {EVA02_REF_GRID}x{EVA02_REF_GRID} "
                                  f'(pt_hw_seq_len {EVA02_REF_GRID}): {off:.2g} off', key=key)


FAMILY = Family(
    name='evaclip',
    # a bare state dict: before the open_clip and timm state-dict rows (2100 onward)
    routes=(Route(2040., lambda p: is_evaclip(p.names), EvaClipCheckpoint),),
)
