"""The layer registries (``layers.py``): norms, MLPs and blocks passed by class, each block option a timm layer's own
argument, checked against timm's ``Block`` and ``EvaBlock`` built the same way."""
import pytest
import torch
import torch.nn as nn
from timm.layers import LayerNorm, RmsNorm, SwiGLU
from timm.models.eva import EvaBlock
from timm.models.vision_transformer import Block

from timm_vit_variants.errors import ViTVariantsError
from timm_vit_variants.layers import BLOCKS, MLP_LAYERS, NORM_LAYERS, norm_layer

DIM, HEADS = 32, 4


def _options(**changes):
    options = dict(dim=DIM, num_heads=HEADS, mlp=MLP_LAYERS['mlp'], mlp_width=4 * DIM, qkv_bias=True,
                   act_layer=nn.GELU, norm_layer=norm_layer('layernorm', 1e-6), drop_path=0., depth=0)
    return {**options, **changes}


def _same_block(ours: nn.Module, theirs: nn.Module, max_delta, what: str) -> None:
    """Identical state-dict keys and shapes; theirs' tensors loaded strictly into ours give the same output."""
    torch.manual_seed(0)
    for t in theirs.parameters():
        nn.init.normal_(t, std=0.2)
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in theirs.state_dict().items()}
    ours.load_state_dict(theirs.state_dict(), strict=True)
    x = torch.randn(2, 5, DIM)
    max_delta(what, ours.eval()(x), theirs.eval()(x), 1e-6)


def test_the_norms_are_timms_by_name():
    assert NORM_LAYERS == {'layernorm': LayerNorm, 'rmsnorm': RmsNorm}
    norm = norm_layer('rmsnorm', 1e-5)(DIM)
    assert isinstance(norm, RmsNorm) and norm.eps == 1e-5


def test_a_vit_block_without_biases_with_rms_norms_swiglu_and_qk_norm_is_timms_block(max_delta):
    """AIMv2's block: RMSNorm, a split SwiGLU, no qkv/proj/MLP bias, q/k norms; timm's Block takes the same."""
    rms = norm_layer('rmsnorm', 1e-5)
    ours = BLOCKS['vit'](**_options(mlp=MLP_LAYERS['swiglu'], mlp_width=88, mlp_bias=False, qkv_bias=False,
                                    qk_norm=True, proj_bias=False, norm_layer=rms, act_layer=nn.SiLU))
    theirs = Block(DIM, HEADS, mlp_ratio=88 / DIM, qkv_bias=False, qk_norm=True, proj_bias=False, norm_layer=rms,
                   mlp_layer=SwiGLU, act_layer=nn.SiLU)
    assert ours.mlp.fc1_g.bias is None and ours.attn.proj.bias is None and isinstance(ours.attn.q_norm, RmsNorm)
    _same_block(ours, theirs, max_delta, 'vit block, rmsnorm + swiglu + qk_norm, no biases')


def test_the_mlp_bias_is_the_mlps_own():
    """timm's Block gives its MLP the attention's proj_bias; the MLP kind takes its own ``mlp_bias``."""
    block = BLOCKS['vit'](**_options(proj_bias=False))
    assert block.attn.proj.bias is None and block.mlp.fc1.bias is not None
    block = BLOCKS['vit'](**_options(mlp_bias=False))
    assert block.attn.proj.bias is not None and block.mlp.fc1.bias is None and block.mlp.fc2.bias is None


@pytest.mark.parametrize('kind, width', [('mlp', 100), ('swiglu_packed', 40), ('swiglu', 40)])
def test_each_mlp_kind_has_the_exact_width(kind, width):
    mlp = BLOCKS['vit'](**_options(mlp=MLP_LAYERS[kind], mlp_width=width, act_layer=nn.SiLU)).mlp
    first = mlp.fc1_g if kind == 'swiglu' else mlp.fc1
    assert first.out_features == (2 * width if kind == 'swiglu_packed' else width)


def test_a_rotary_vit_block_takes_qk_norm_and_proj_bias():
    block = BLOCKS['vit'](**_options(rotate_half=True, qk_norm=True, proj_bias=False))
    assert isinstance(block.attn.q_norm, LayerNorm) and block.attn.proj.bias is None
    x = torch.randn(1, 5, DIM)
    rope = torch.cat([torch.zeros(1, 5, DIM // HEADS), torch.ones(1, 5, DIM // HEADS)], dim=-1)
    assert block(x, rope=rope).shape == x.shape


def test_an_eva_block_with_qk_norm_is_timms_eva_block(max_delta):
    ours = BLOCKS['eva'](**_options(mlp=MLP_LAYERS['swiglu'], mlp_width=40, mlp_norm=True, qkv_fused=False,
                                    qk_norm=True, act_layer=nn.SiLU, init_values=0.1))
    theirs = EvaBlock(DIM, HEADS, qkv_fused=False, mlp_ratio=40.5 / DIM, swiglu_mlp=True, swiglu_align_to=1,
                      scale_mlp=True, num_prefix_tokens=0, qk_norm=True, init_values=0.1,
                      norm_layer=norm_layer('layernorm', 1e-6))
    _same_block(ours, theirs, max_delta, 'eva block, split swiglu + sub-LN + qk_norm')


@pytest.mark.parametrize('kind, option', [('eva', 'mlp_bias'), ('eva', 'proj_bias'), ('vit', 'qkv_fused')])
def test_a_block_refuses_an_option_its_layers_do_not_have(kind, option):
    with pytest.raises(ViTVariantsError) as e:
        BLOCKS[kind](**_options(**{option: False}))
    assert e.value.key == option


def test_a_model_of_rms_norms_and_bias_free_swiglu_blocks_needs_no_core_change():
    """AIMv2's shape from config alone: every norm (patch 'post' norm too) is RmsNorm, no q/k/v, proj or MLP bias,
    q/k norms; the state dict keeps timm's names."""
    from timm_vit_variants import SimpleVisionTransformer
    model = SimpleVisionTransformer(embed_dim=DIM, depth=2, num_heads=HEADS, patch_size=8, img_size=32,
                                    block=dict(norm='rmsnorm', norm_eps=1e-5, act='silu', mlp='swiglu', mlp_dim=40,
                                               mlp_bias=False, qkv_bias=False, proj_bias=False, qk_norm=True),
                                    patch_norm='post', pos_embed='learn', device='meta')
    norms = [m for m in model.modules() if isinstance(m, (LayerNorm, RmsNorm, nn.LayerNorm))]
    assert norms and all(isinstance(m, RmsNorm) and m.eps == 1e-5 for m in norms)
    assert isinstance(model.patch_embed.norm, RmsNorm)
    keys = set(model.state_dict())
    assert 'blocks.0.mlp.fc1_g.weight' in keys and 'blocks.0.attn.q_norm.weight' in keys
    assert not [k for k in keys if k.startswith('blocks.') and k.endswith('.bias')]
