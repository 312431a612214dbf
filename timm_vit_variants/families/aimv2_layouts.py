"""AIMv2 (Apple, "Multimodal Autoregressive Pre-training of Large Vision Encoders"): its facts and the tensor
layouts of its three sources, as data.

What every AIMv2 vision tower is (Apple's ``aim.v2.torch.models.AIMv2VisionEncoder``, timm's ``aimv2_*`` entries,
transformers' ``Aimv2VisionModel``; the three agree):
- a conv patch embedding with a bias, then an RMSNorm (eps 1e-5) of each patch token;
- no [CLS] or other prefix token; positions are a learned table of the nominal grid's patches only (no cls slot),
  or, for the native-resolution towers (``aimv2_large_native``, transformers' ``is_native``), a computed sin-cos
  table (MAE's: frequencies ``10000 ** -(k / (D/4))``, channels ``[sin x | cos x | sin y | cos y]``);
- pre-norm blocks with RMSNorm (eps 1e-5); attention with no q/k/v bias and no output-projection bias; a SwiGLU MLP
  (silu(gate) * value) with no biases, its gated width given exactly (2816 for L/1024, 4096 for H/1536, 5632 for
  1B/2048, 8192 for 3B/3072); a final RMSNorm over the tokens;
- the image tower of the LiT model (``aimv2_large_lit``) ends in Apple's ``AttentionPoolingClassifier`` (no batch
  norm): one learned query (``cls_token``) attends, with the trunk's head count and no q projection, over k and v
  projections of every token (no biases), averaged over the queries, then a linear map D -> D with a bias.
  transformers keeps it (``Aimv2AttentionPoolingHead``, ``use_head``); timm's ``aimv2_*`` keep none (mean pooling).

The three layouts, each a table from our keys (timm's ``VisionTransformer`` names; the attention pool's under
``attn_pool``) to the source's names and the fill that lays them out. ``{i}`` is the block index.
"""
from typing import Dict, Iterable, Mapping, Optional, Tuple

import torch

from ..checkpoints.fills import add_leading_axis, stack_rows
from ..checkpoints.source import Rule

__all__ = ['AIMV2_NORM_EPS', 'AIMV2_HEADS', 'APPLE', 'HF', 'TIMM', 'LAYOUTS', 'POOL_KEYS', 'PREFIXES', 'layout_of',
           'find_layout', 'layout_rule', 'fill_state', 'tower_facts']

AIMV2_NORM_EPS = 1e-5

# The attention pool's keys (ours): the query, k and v (no biases), the output map (with a bias).
POOL_KEYS = ('attn_pool.query', 'attn_pool.k.weight', 'attn_pool.v.weight', 'attn_pool.proj.weight',
             'attn_pool.proj.bias')

# Apple's ml-aim files: ``preprocessor`` (patchifier, table), ``trunk`` (blocks, post_trunk_norm), ``head``.
APPLE: Mapping[str, Rule] = {
    'patch_embed.proj.weight': Rule(('preprocessor.patchifier.proj.weight',)),
    'patch_embed.proj.bias': Rule(('preprocessor.patchifier.proj.bias',)),
    'patch_embed.norm.weight': Rule(('preprocessor.patchifier.norm.weight',)),
    'pos_embed': Rule(('preprocessor.pos_embed',)),
    'blocks.{i}.norm1.weight': Rule(('trunk.blocks.{i}.norm_1.weight',)),
    'blocks.{i}.attn.qkv.weight': Rule(('trunk.blocks.{i}.attn.qkv.weight',)),
    'blocks.{i}.attn.proj.weight': Rule(('trunk.blocks.{i}.attn.proj.weight',)),
    'blocks.{i}.norm2.weight': Rule(('trunk.blocks.{i}.norm_2.weight',)),
    'blocks.{i}.mlp.fc1_g.weight': Rule(('trunk.blocks.{i}.mlp.fc1.weight',)),
    'blocks.{i}.mlp.fc1_x.weight': Rule(('trunk.blocks.{i}.mlp.fc3.weight',)),
    'blocks.{i}.mlp.fc2.weight': Rule(('trunk.blocks.{i}.mlp.fc2.weight',)),
    'norm.weight': Rule(('trunk.post_trunk_norm.weight',)),
    'attn_pool.query': Rule(('head.cls_token',)),
    'attn_pool.k.weight': Rule(('head.k.weight',)),
    'attn_pool.v.weight': Rule(('head.v.weight',)),
    'attn_pool.proj.weight': Rule(('head.linear.weight',)),
    'attn_pool.proj.bias': Rule(('head.linear.bias',)),
}

# transformers' ``Aimv2VisionModel`` folders (``vision_model.`` inside an ``Aimv2Model``): split q/k/v, a table of
# [N, D] rows (an ``nn.Embedding``), ``ffn.{gate,up,down}_proj``.
_HF_LAYER = 'encoder.layers.{i}.'
HF: Mapping[str, Rule] = {
    'patch_embed.proj.weight': Rule(('embeddings.patch_embed.weight',)),
    'patch_embed.proj.bias': Rule(('embeddings.patch_embed.bias',)),
    'patch_embed.norm.weight': Rule(('embeddings.rms_norm.weight',)),
    'pos_embed': Rule(('embeddings.position_embedding.weight',), add_leading_axis),
    'blocks.{i}.norm1.weight': Rule((_HF_LAYER + 'rms_norm1.weight',)),
    'blocks.{i}.attn.qkv.weight': Rule(tuple(f'{_HF_LAYER}attention.{p}_proj.weight' for p in 'qkv'), stack_rows),
    'blocks.{i}.attn.proj.weight': Rule((_HF_LAYER + 'attention.out_proj.weight',)),
    'blocks.{i}.norm2.weight': Rule((_HF_LAYER + 'rms_norm2.weight',)),
    'blocks.{i}.mlp.fc1_g.weight': Rule((_HF_LAYER + 'ffn.gate_proj.weight',)),
    'blocks.{i}.mlp.fc1_x.weight': Rule((_HF_LAYER + 'ffn.up_proj.weight',)),
    'blocks.{i}.mlp.fc2.weight': Rule((_HF_LAYER + 'ffn.down_proj.weight',)),
    'norm.weight': Rule(('rms_norm.weight',)),
    'attn_pool.query': Rule(('head.cls_token',)),
    'attn_pool.k.weight': Rule(('head.k_proj.weight',)),
    'attn_pool.v.weight': Rule(('head.v_proj.weight',)),
    'attn_pool.proj.weight': Rule(('head.output_proj.weight',)),
    'attn_pool.proj.bias': Rule(('head.output_proj.bias',)),
}

# timm's own ``aimv2_*`` state dicts: our names already (timm keeps no attention pool).
TIMM: Mapping[str, Rule] = {key: Rule((key,)) for key in APPLE if not key.startswith('attn_pool.')}

LAYOUTS: Mapping[str, Mapping[str, Rule]] = {'apple': APPLE, 'hf': HF, 'timm': TIMM}

# One name each layout is recognised by (its patch kernel) and a name none of the others holds (the patch norm).
_MARKS = {'apple': 'preprocessor.patchifier.norm.weight', 'hf': 'embeddings.rms_norm.weight',
          'timm': 'patch_embed.norm.weight'}


def layout_of(names: Iterable[str], prefix: str = '') -> Optional[str]:
    """The AIMv2 layout whose marking tensor ``names`` holds (under ``prefix``), None if none does."""
    names = set(names)
    return next((layout for layout, mark in _MARKS.items() if prefix + mark in names), None)


def layout_rule(layout: str, pattern: str, block: Optional[int] = None, prefix: str = '') -> Rule:
    """The rule for our key ``pattern`` in ``layout``, its ``{i}`` filled with ``block`` and its sources under
    ``prefix``; KeyError for a key the layout has no tensor for."""
    rule = LAYOUTS[layout][pattern]
    fields = {} if block is None else {'i': block}
    return Rule(tuple(prefix + s.format(**fields) for s in rule.sources), rule.fill)


def _pattern(key: str) -> Tuple[str, Optional[int]]:
    """Our key as its table pattern and block index ('blocks.3.norm1.weight' -> 'blocks.{i}.norm1.weight', 3)."""
    parts = key.split('.')
    if parts[0] == 'blocks' and parts[1].isdigit():
        return '.'.join(['blocks', '{i}'] + parts[2:]), int(parts[1])
    return key, None


@torch.no_grad()
def fill_state(targets: Dict[str, torch.Tensor], state: Mapping[str, torch.Tensor], layout: str,
               prefix: str = '') -> Tuple[str, ...]:
    """Fill each tensor of ``targets`` (our keys, e.g. a model's parameters) from the in-memory source ``state`` in
    ``layout``; returns the target keys the layout has no tensor for (computed buffers, a pool the source lacks)."""
    missing = []
    for key, dst in targets.items():
        pattern, block = _pattern(key)
        if pattern not in LAYOUTS[layout]:
            missing.append(key)
            continue
        rule = layout_rule(layout, pattern, block, prefix)
        if not all(s in state for s in rule.sources):
            missing.append(key)
            continue
        rule.fill(dst, *(state[s] for s in rule.sources))
    return tuple(missing)



# AIMv2's head counts by width (Apple's aimv2_{large,huge,1B,3B}; their files do not record it).
AIMV2_HEADS: Mapping[int, int] = {1024: 8, 1536: 12, 2048: 16, 3072: 24}
# Prefixes a tower sits under: Apple's LiT model (``image_encoder.``), transformers' ``Aimv2Model``
# (``vision_model.``); the other towers' tensors (text, projections, logit scale) are not the image tower's.
PREFIXES: Mapping[str, Tuple[str, ...]] = {'apple': ('', 'image_encoder.'), 'hf': ('', 'vision_model.'),
                                           'timm': ('',)}
_PATCH = {'apple': 'preprocessor.patchifier.proj.weight', 'hf': 'embeddings.patch_embed.weight',
          'timm': 'patch_embed.proj.weight'}
_GATE = {'apple': 'trunk.blocks.{i}.mlp.fc1.weight', 'hf': _HF_LAYER + 'ffn.gate_proj.weight',
         'timm': 'blocks.{i}.mlp.fc1_g.weight'}
_NORM1 = {layout: LAYOUTS[layout]['blocks.{i}.norm1.weight'].sources[0] for layout in LAYOUTS}


# What tells timm's ``aimv2_*`` layout from timm's other ViTs with a patch norm: the SwiGLU gate, RMSNorm (no norm
# bias), no [CLS].
_TIMM_NEEDS, _TIMM_NEVER = ('blocks.0.mlp.fc1_g.weight',), ('blocks.0.norm1.bias', 'patch_embed.norm.bias', 'cls_token')


def find_layout(names: Iterable[str]) -> Optional[Tuple[str, str]]:
    """The (layout, prefix) of the AIMv2 tower ``names`` hold, None if they hold none."""
    names = set(names)
    for layout, prefixes in PREFIXES.items():
        for prefix in prefixes:
            if layout_of(names, prefix) != layout or prefix + _PATCH[layout] not in names:
                continue
            if layout == 'timm' and (any(prefix + n not in names for n in _TIMM_NEEDS) or
                                     any(prefix + n in names for n in _TIMM_NEVER)):
                continue
            return layout, prefix
    return None


def tower_facts(shapes: Mapping[str, Tuple[int, ...]], layout: str, prefix: str = '') -> Dict[str, object]:
    """What the tensors of an AIMv2 tower say about its network: ``embed_dim``, ``in_chans``, ``patch_size``,
    ``depth``, ``mlp_dim``, ``grid`` (the learned table's, None for a native tower), ``table_rows`` and
    ``attention_pool`` (the LiT head's tensors are there). Shapes are trusted only as far as they agree; a
    disagreement raises ``ValueError`` naming the tensor (the reader reports it as its own error)."""
    kernel = shapes[prefix + _PATCH[layout]]
    if len(kernel) != 4:
        raise ValueError(f'{prefix + _PATCH[layout]}: expected a [D, C, p, p] patch kernel, got {list(kernel)}')
    dim, chans, ph, pw = kernel
    depth = 0
    while prefix + _NORM1[layout].format(i=depth) in shapes:
        depth += 1
    if not depth:
        raise ValueError(f'{prefix + _NORM1[layout].format(i=0)}: no block found')
    gate = shapes.get(prefix + _GATE[layout].format(i=0))
    if gate is None or len(gate) != 2 or gate[1] != dim:
        raise ValueError(f'{prefix + _GATE[layout].format(i=0)}: expected a [width, {dim}] SwiGLU gate, got {gate}')
    table_key = prefix + LAYOUTS[layout]['pos_embed'].sources[0]
    table = shapes.get(table_key)
    grid = None
    if table is not None:
        rows = table[-2]
        side = int(round(rows ** 0.5))
        if side * side != rows or table[-1] != dim:
            raise ValueError(f'{table_key}: a table of {rows} rows of width {table[-1]} is not a square grid of '
                             f'width {dim}')
        grid = (side, side)
    rules = LAYOUTS[layout]
    pool = all(k in rules and prefix + rules[k].sources[0] in shapes for k in POOL_KEYS)
    return dict(embed_dim=dim, in_chans=chans, patch_size=(ph, pw), depth=depth, mlp_dim=gate[0], grid=grid,
                attention_pool=pool)
