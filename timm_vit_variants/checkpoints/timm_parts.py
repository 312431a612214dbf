"""What a timm model built from a folder's ``architecture`` is made of, and the parts this family does not express.

A timm reader rebuilds the recorded architecture on the meta device to read the settings no tensor records. Before
it reads anything off that build, ``refuse_unexpressed`` walks every module: each must be of a timm class the reader
expresses (its ``PARTS``), with none of the options of that class this family has no equivalent of (qk_norm, a norm
inside attention or the MLP, a gate, ...). Anything else is refused by name, where it sits, and what it is, so an
unknown timm block, MLP, norm or model class is one named refusal, never an AttributeError from reading it as a part
it is not.
"""
from typing import Callable, Dict, FrozenSet, List, Optional, Tuple

import torch.nn as nn
from timm.layers import (Attention, AttentionPoolLatent, AttentionRope, DiffAttention, DropPath, GELUTanh, GluMlp,
                         LayerNorm, LayerScale, Mlp, PatchDropout, PatchEmbed, QuickGELU, RmsNorm, RotaryEmbeddingCat,
                         RotaryEmbeddingDinoV3, RotaryEmbeddingMixed, SwiGLU)
from timm.models.deit import VisionTransformerDistilled
from timm.models.eva import Eva, EvaAttention, EvaBlock, EvaBlockPostNorm
from timm.models.naflexvit import NaFlexEmbeds, NaFlexVit
from timm.models.vision_transformer import (Block, DiffParallelScalingBlock, ParallelScalingBlock,
                                            ParallelThingsBlock, ResPostBlock, VisionTransformer)

from ..errors import ViTVariantsError

__all__ = ['COMMON_PARTS', 'VIT_PARTS', 'EVA_PARTS', 'ATTN_NORM', 'MLP_NORM', 'QK_NORM', 'SPLIT_QKV',
           'refuse_unexpressed']

# Parts every timm ViT reader expresses: containers, the dense layers, LayerNorm, the activations, LayerScale, the
# patch conv, SigLIP's MAP head, and what is the identity at inference (dropout, drop path, patch dropout).
COMMON_PARTS: FrozenSet[type] = frozenset({
    nn.Sequential, nn.ModuleList, nn.Identity, nn.Linear, nn.Conv2d, nn.Dropout, nn.LayerNorm, LayerNorm, nn.GELU,
    GELUTanh, QuickGELU, nn.SiLU, nn.ReLU, LayerScale, PatchEmbed, AttentionPoolLatent, DropPath, PatchDropout})
# timm's VisionTransformer family (DeiT's distilled one and NaFlexVit too): the blocks ``timm_blocks`` reads (pre-norm
# ``Block``s, post-norm ``ResPostBlock``s, the parallel ``ParallelThingsBlock`` and ``ParallelScalingBlock``s),
# fused-qkv ``Attention`` or ``DiffAttention``, ``Mlp`` or a packed SwiGLU (``GluMlp``, as timm's DINOv2 giant uses),
# and ``RmsNorm`` as the model's norm layer (``DiffAttention``'s own sub-norm is one too).
VIT_PARTS = COMMON_PARTS | {VisionTransformer, VisionTransformerDistilled, NaFlexVit, NaFlexEmbeds, Block, Attention,
                            Mlp, GluMlp, ResPostBlock, ParallelThingsBlock, ParallelScalingBlock,
                            DiffParallelScalingBlock, DiffAttention, RmsNorm}
# timm's Eva: ``EvaBlock``s, ``EvaAttention`` (q/v-only bias) or ``AttentionRope``, ``Mlp`` or ``SwiGLU``, and the
# rotary tables of its DINOv3 and RoPE-ViT ports (which RoPE forms are expressed is the Eva reader's check).
EVA_PARTS = COMMON_PARTS | {Eva, EvaBlock, EvaBlockPostNorm, EvaAttention, AttentionRope, Mlp, SwiGLU, RotaryEmbeddingCat,
                            RotaryEmbeddingMixed, RotaryEmbeddingDinoV3}

# What some of timm's other parts are, by class name, said in the refusal.
_KNOWN = {
    'VisionTransformerSAM': "SAM's image encoder, with windowed attention, decomposed relative positions and a neck",
    'VisionTransformerRelPos': "relative position biases, timm's vit_relpos",
    'ResPostBlock': 'post-norm residual blocks, the norm after each branch',
    'ResPostRelPosBlock': 'post-norm residual blocks, the norm after each branch',
    'RelPosBias': "a learned relative-position table per block (rel_pos_type 'bias')",
    'EvaBlockPostNorm': 'post-norm residual blocks, the norm after each branch',
    'ParallelScalingBlock': 'attention and MLP run in parallel off one fused projection',
    'ParallelThingsBlock': 'parallel attention and MLP branches',
    'DiffParallelScalingBlock': 'differential attention in parallel blocks',
    'DiffAttention': 'differential attention',
    'RelPosBlock': 'relative position biases',
    'RmsNorm': 'RMSNorm in place of LayerNorm',
    'SwiGLU': 'a SwiGLU MLP with its gate and value apart, fc1_g and fc1_x',
    'HybridEmbed': 'a CNN stem in place of the patch embedding',
}
_Option = Tuple[Callable[[nn.Module], bool], str]


def _not_identity(name: str) -> Callable[[nn.Module], bool]:
    return lambda module: not isinstance(getattr(module, name, None), (nn.Identity, type(None)))


# Options of an expressed class that this family has no equivalent of: (the module has it, what it is).
ATTN_NORM = 'a norm inside attention, scale_norm'
MLP_NORM = 'a norm inside the MLP, scale_mlp_norm'
SPLIT_QKV = 'separate q, k and v projections'
QK_NORM = 'qk_norm'
_DUAL_LAMBDA: _Option = (lambda m: getattr(m, 'dual_lambda', False), 'differential attention with dual scalar lambdas')
_ATTENTION: Tuple[_Option, ...] = ((_not_identity('q_norm'), QK_NORM), (_not_identity('norm'), ATTN_NORM))
_OPTIONS: Dict[type, Tuple[_Option, ...]] = {
    Attention: _ATTENTION,
    AttentionRope: _ATTENTION + ((lambda m: getattr(m, 'num_kv_heads', m.num_heads) != m.num_heads,
                                  'grouped-query attention, fewer key/value heads than query heads (num_kv_heads)'),),
    EvaAttention: _ATTENTION + ((lambda m: getattr(m, 'qkv', None) is None, SPLIT_QKV),),
    DiffAttention: _ATTENTION + (_DUAL_LAMBDA,),
    ParallelScalingBlock: ((lambda m: getattr(m, 'out_proj', None) is not None, 'one fused output projection'),),
    DiffParallelScalingBlock: (_DUAL_LAMBDA,),
    Mlp: ((_not_identity('norm'), MLP_NORM),),
    SwiGLU: ((_not_identity('norm'), MLP_NORM),),
    GluMlp: ((_not_identity('norm'), 'a norm inside the MLP'),
             (lambda m: getattr(m, 'gate_last', False) or not isinstance(getattr(m, 'act', None), nn.SiLU),
              'a gated MLP other than a packed SwiGLU')),
    PatchEmbed: ((_not_identity('norm'), 'a norm in the patch embedding'),),
}


def _unexpressed(model: nn.Module, parts: FrozenSet[type], expressed: FrozenSet[str] = frozenset()) -> List[str]:
    """Each part of ``model`` not in ``parts``, or with an option ``_OPTIONS`` lists (other than the ``expressed``
    ones), once per kind: 'where (what)'. What a part that is not ours holds is not looked into (its own classes may
    share a name with ours)."""
    found: Dict[str, str] = {}
    foreign: List[str] = []
    for where, module in model.named_modules():
        if any(where.startswith(outer + '.') or not outer for outer in foreign):
            continue
        cls = type(module)
        if cls not in parts:
            foreign.append(where)
            whats = [f"timm's {cls.__name__}" + (f': {_KNOWN[cls.__name__]}' if cls.__name__ in _KNOWN else '')]
        else:
            whats = [text for has, text in _OPTIONS.get(cls, ()) if text not in expressed and has(module)]
        for what in whats:
            found.setdefault(what, where or 'the model')
    return [f'{where} ({what})' for what, where in found.items()]


def refuse_unexpressed(model: nn.Module, parts: FrozenSet[type], arch: str, path: Optional[str],
                       expressed: FrozenSet[str] = frozenset()) -> None:
    """Refuse ``model`` (timm's build of ``arch`` from ``path``'s config) if any of its parts is not in ``parts`` or
    has an option this family does not express (``_OPTIONS``' texts, but for the reader's ``expressed`` ones),
    naming every such part and where it first sits."""
    found = _unexpressed(model, parts, expressed)
    if found:
        raise ViTVariantsError(f'{arch} with these model_args has parts SimpleVisionTransformer does not express: '
                               f'{"; ".join(found)}', path=path, key='architecture')
