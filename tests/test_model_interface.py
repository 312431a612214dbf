"""timm's model-interface contract (the checks timm's tests/test_models.py applies) over every simple_vit_*.

Structural checks run on the meta device for every variant at its full size. Numerical
checks run on real tensors for every variant at a small input size, built once per session;
ViT-L and ViT-H keep their width, heads and MLP but run 2 blocks there, so the suite fits
the CI budget on 2 cores (their full depth is covered by the meta-device checks).
"""
import fnmatch
import functools
import inspect

import pytest
import torch
import timm
from timm.models import get_notrace_functions, get_notrace_modules
from timm.models._manipulate import group_parameters

import timm_vit_variants  # noqa: F401
from timm_vit_variants.beit_models import BEIT_ROWS
from timm_vit_variants.clip_models import CLIP_ARCHS
from timm_vit_variants.config import SimpleViTConfig, grid_for
from timm_vit_variants.families import bigvision, siglip
from timm_vit_variants.families.siglip import SIGLIP_TOWERS
from timm_vit_variants.model_table import MODELS
from timm_vit_variants.deit_models import DEIT3_ROWS, DEIT_ROWS
from timm_vit_variants.dino_models import DINO_ROWS
from timm_vit_variants.eva02_models import EVA02_ROWS
from timm_vit_variants.families.registry import FAMILIES

MODEL_NAMES = sorted(timm.list_models('simple_vit_*'))
# The rows of the families under timm_vit_variants/families/ without a table of their own here (AIMv2, I-JEPA):
# published image towers, no classifier.
FAMILY_ROWS = {name for family in FAMILIES for name in family.rows} - {
    *DINO_ROWS, *DEIT_ROWS, *DEIT3_ROWS, *EVA02_ROWS, *BEIT_ROWS, *CLIP_ARCHS, *bigvision.FAMILY.rows,
    *siglip.FAMILY.rows}


def _one_per_form(names):
    """The narrowest row of each form of a family (its pooling, position schemes, norm and MLP): the sizes of one
    form run the same code, so the real-tensor checks run its smallest."""
    seen = {}
    for name in sorted(names, key=lambda n: (MODELS[n].kwargs['embed_dim'], n)):
        config = SimpleViTConfig.of(**MODELS[name].kwargs)
        form = (type(config.head.pool), tuple(type(p) for p in config.positions), config.block.norm, config.block.mlp)
        seen.setdefault(form, name)
    return sorted(seen.values())


def _one_per_network(names):
    """The first name of each distinct network: entries that differ only in their nominal image size (the SigLIP
    towers at 224/256/384/512, say) run the same code, so the real-tensor checks run one of them."""
    seen = {}
    for name in names:
        args = dict(MODELS[name].kwargs)
        args.pop('img_size', None)
        seen.setdefault(repr(sorted(args.items())), name)
    return sorted(seen.values())


# The DINO and DeiT members share their blocks within a family, and the CLIP towers' options are checked against
# open_clip in test_clip.py: one network of each form runs the real-tensor checks here.
NETWORKS = _one_per_network([n for n in MODEL_NAMES if n not in DINO_ROWS and n not in DEIT_ROWS and n not in DEIT3_ROWS
                             and n not in EVA02_ROWS and n not in BEIT_ROWS and n not in FAMILY_ROWS
                             and (n not in CLIP_ARCHS or n in ('simple_vit_base_patch16_clip_224',
                                                               'simple_vit_large_patch14_clipa_224'))]) + [
    'simple_vit_small_patch14_reg4_dinov2', 'simple_vit_small_patch16_dinov3',
    'simple_vit_small_patch16_rope_mixed_ape_224', 'simple_vit_small_patch16_deit3_224',
    'simple_vit_tiny_patch16_deit_224', 'simple_vit_tiny_patch16_deit_distilled_224',
    'simple_vit_tiny_patch14_eva02_336', 'simple_vit_base_patch14_eva02_224'] + _one_per_form(FAMILY_ROWS)
EXPECTED = {
    'simple_vit_tiny', 'simple_vit_small', 'simple_vit_base', 'simple_vit_large', 'simple_vit_huge',
    'simple_vit_tiny_patch16_224', 'simple_vit_small_patch16_224', 'simple_vit_base_patch16_224',
    'simple_vit_large_patch16_224', 'simple_vit_huge_patch16_224',
    'simple_vit_small_patch32_224', 'simple_vit_base_patch32_224', 'simple_vit_tiny_patch4_32',
    'simple_vit_small_flexi_240', 'simple_vit_base_flexi_240', 'simple_vit_large_flexi_240',
    *(f'simple_vit_{size}_patch{patch}_siglip_{img}' for size, patch, sizes in SIGLIP_TOWERS for img in sizes),
    'simple_vit_base_patch16_siglip_naflex', 'simple_vit_so400m_patch16_siglip_naflex', *DINO_ROWS, *DEIT_ROWS,
    *DEIT3_ROWS, *CLIP_ARCHS, *EVA02_ROWS, *BEIT_ROWS, *FAMILY_ROWS,
}


def _small_input(name: str, batch: int = 2) -> torch.Tensor:
    size = timm.get_pretrained_cfg_value(name, 'input_size')
    side = min(size[-1], 64)
    return torch.randn(batch, 3, side, side, generator=torch.Generator().manual_seed(0))


def _real_kwargs(name: str) -> dict:
    # Real-tensor checks of the big variants (and of every SigLIP tower, whose blocks are the base ones) run 2
    # blocks, at full width, heads and MLP; their full structure is checked on the meta device.
    return dict(depth=2) if any(size in name for size in ('large', 'huge', 'siglip', 'dino', 'rope', 'clip', 'deit',
                                                           'eva02')) \
        or name in FAMILY_ROWS else {}


@functools.lru_cache(maxsize=None)
def _real_model(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    model = timm.create_model(name, num_classes=7, **_real_kwargs(name)).eval()
    # a zero-init head makes every logit 0; give it values so comparisons mean something
    with torch.no_grad():
        model.head.weight.normal_(std=0.02)
        if model.head.bias is not None:  # CLIP's projection has none
            model.head.bias.normal_(std=0.02)
    return model


def test_registry_lists_family():
    assert EXPECTED == set(MODEL_NAMES)
    tagged = set(timm.list_models('simple_vit*', pretrained=True))
    assert {f'simple_vit_small_patch16_224.bv_i1k_{e}ep' for e in (90, 150, 300)} <= tagged
    assert timm.list_modules() and 'simple_vit' in timm.list_modules()


@pytest.mark.parametrize('name', MODEL_NAMES)
def test_default_cfg_and_api_contract(name):
    headless = timm.get_pretrained_cfg_value(name, 'num_classes') == 0  # the SigLIP towers: an image embedding
    assert headless == ('_siglip_' in name or '_dinov' in name or name.endswith('_eva02_224')  # EVA-02's MIM
                        or name in FAMILY_ROWS)
    with torch.device('meta'):  # with a classifier, so that its contract is checked too
        model = timm.create_model(name, device='meta', dtype=torch.float32, num_classes=1000).eval()
    cfg = model.pretrained_cfg
    assert cfg['input_size'][0] == model.in_chans == 3
    if name not in DINO_ROWS and name not in DEIT_ROWS and name not in DEIT3_ROWS and name not in CLIP_ARCHS and \
            name not in EVA02_ROWS and name not in BEIT_ROWS and name not in FAMILY_ROWS:
        # DINO, DeiT, BEiT: ImageNet's statistics; CLIP: open_clip's (test_clip); EVA-02: CLIP's; a family's: its own
        # tests'
        assert cfg['mean'] == cfg['std'] == (0.5, 0.5, 0.5)
    for key in ('crop_pct', 'interpolation', 'first_conv', 'classifier'):
        assert cfg.get(key) is not None, key
    state_dict = model.state_dict()
    assert cfg['first_conv'] + '.weight' in state_dict
    assert cfg['classifier'] + '.weight' in state_dict
    assert not any('sincos' in k for k in state_dict), 'the fixed table must not be saved'

    with pytest.raises(TypeError):
        timm.create_model(name, device='meta', not_a_model_arg=1)
    assert inspect.signature(model.reset_classifier).parameters['global_pool'].default is None
    groups = group_parameters(model, model.group_matcher(coarse=False), reverse=True)
    assert len(set(groups.values())) > 1
    param_names = [n for n, _ in model.named_parameters()]
    for pattern in model.no_weight_decay():
        if not any(fnmatch.fnmatch(n, pattern) for n in param_names):
            assert getattr(model, pattern, None) is None, pattern

    assert model.num_classes == 1000 and model.num_features > 0 and model.head_hidden_size > 0
    x = torch.randn(1, *cfg['input_size'], device='meta')
    feats = model.forward_features(x)
    grid = model.patch_embed.grid_size
    assert feats.shape == (1, model.num_prefix_tokens + grid[0] * grid[1], model.num_features)
    pre = model.forward_head(feats, pre_logits=True)
    assert pre.shape == (1, model.head_hidden_size)

    model.to(torch.bfloat16)
    assert model(x.to(torch.bfloat16)).dtype == torch.bfloat16
    model.to(torch.float32)

    model.reset_classifier(0)
    assert model.num_classes == 0 and model(x).shape == pre.shape
    model.reset_classifier(0, '')
    assert model(x).shape == feats.shape
    headless = timm.create_model(name, num_classes=0, device='meta')
    assert headless(x).shape == pre.shape
    unpooled = timm.create_model(name, num_classes=0, global_pool='', device='meta')
    assert unpooled(x).shape == feats.shape

    # reset_classifier keeps the parent's device, dtype and train/eval state
    model.to(device='meta', dtype=torch.float64)
    model.reset_classifier(2)
    assert all(p.device.type == 'meta' and p.dtype == torch.float64 for p in model.head.parameters())
    assert not model.head.training

    # create_model(device=...) places everything; frozen params survive reset and resize
    frozen = timm.create_model(name, device='meta', dtype=torch.float32)
    assert all(t.device.type == 'meta' for t in [*frozen.parameters(), *frozen.buffers()])
    frozen.requires_grad_(False)
    frozen.reset_classifier(0)
    frozen.reset_classifier(0, '')
    frozen.set_input_size(img_size=tuple(2 * s for s in cfg['input_size'][-2:]))
    assert not [n for n, p in frozen.named_parameters() if p.requires_grad]


@pytest.mark.parametrize('name', NETWORKS)
def test_forward_and_grad_checkpointing(name):
    model = _real_model(name)
    x = _small_input(name)
    with torch.no_grad():
        out = model(x)
        assert out.shape == (2, 7) and not torch.isnan(out).any()
        model.set_grad_checkpointing(True)
        try:
            out_ckpt = model(x)
        finally:
            model.set_grad_checkpointing(False)
    torch.testing.assert_close(out, out_ckpt, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('name', NETWORKS)
def test_backward_reaches_every_parameter(name):
    model = _real_model(name)
    model.train()
    try:
        out = model(_small_input(name))
        out.mean().backward()
        missing = [n for n, p in model.named_parameters() if p.grad is None]
        assert not missing, missing
    finally:
        model.zero_grad(set_to_none=True)
        model.eval()


@pytest.mark.parametrize('name', NETWORKS)
def test_torchscript_matches_eager(name):
    model = _real_model(name)
    x = _small_input(name, batch=1)
    scripted = torch.jit.script(model)
    with torch.no_grad():
        torch.testing.assert_close(scripted(x), model(x))


@pytest.mark.parametrize('name', NETWORKS)
def test_fx_trace_matches_eager(name):
    from torchvision.models.feature_extraction import create_feature_extractor, get_graph_node_names
    model = _real_model(name)
    tracer_kwargs = dict(leaf_modules=get_notrace_modules(), autowrap_functions=get_notrace_functions())
    _, eval_nodes = get_graph_node_names(model, tracer_kwargs=tracer_kwargs)
    fx_model = create_feature_extractor(model, return_nodes=[eval_nodes[-1]], tracer_kwargs=tracer_kwargs)
    x = _small_input(name, batch=1)
    with torch.no_grad():
        torch.testing.assert_close(fx_model(x)[eval_nodes[-1]], model(x))


@pytest.mark.parametrize('name', NETWORKS)
def test_forward_intermediates_parity(name):
    model = _real_model(name)
    x = _small_input(name, batch=1)
    depth = len(model.blocks)
    with torch.no_grad():
        final, inter = model.forward_intermediates(x)
        torch.testing.assert_close(final, model.forward_features(x))
        assert len(inter) == depth
        grid = grid_for(tuple(x.shape[-2:]), model.patch_embed.patch_size, model.patch_embed.dynamic_img_pad)
        assert all(t.shape == (1, model.embed_dim, *grid) for t in inter)
        nlc = model.forward_intermediates(x, indices=[0, depth - 1], output_fmt='NLC', intermediates_only=True)
        torch.testing.assert_close(nlc[-1].transpose(1, 2).reshape(inter[-1].shape), inter[-1])
        early = model.forward_intermediates(x, indices=1, stop_early=True, norm=True, intermediates_only=True)
        torch.testing.assert_close(early[0], model.norm(nlc[-1]).transpose(1, 2).reshape(inter[-1].shape))
        as_dict = model.forward_intermediates(x, indices=2, output_dict=True)
        assert set(as_dict) == {'image_intermediates', 'image_features'}


@pytest.mark.parametrize('name', NETWORKS)
def test_features_only(name):
    torch.manual_seed(0)
    feat_model = timm.create_model(name, features_only=True, out_indices=(0, 1), **_real_kwargs(name)).eval()
    x = _small_input(name, batch=1)
    with torch.no_grad():
        feats = feat_model(x)
    assert len(feats) == 2
    crops = timm.create_model(name, device='meta').config.grid_mode == 'crop'  # a VALID conv: floor, not ceil
    for f, ch, red in zip(feats, feat_model.feature_info.channels(), feat_model.feature_info.reduction()):
        assert f.shape[1] == ch
        assert f.shape[-1] == (x.shape[-1] // red if crops else -(-x.shape[-1] // red))


def test_features_only_equals_forward_intermediates():
    torch.manual_seed(0)
    full = timm.create_model('simple_vit_tiny', depth=3, num_classes=0).eval()
    feat = timm.create_model('simple_vit_tiny', depth=3, features_only=True, out_indices=(0, 2)).eval()
    # features_only prunes the final norm (norm=False) and wraps the model as `.model`
    feat.model.load_state_dict({k: v for k, v in full.state_dict().items() if not k.startswith('norm.')})
    x = torch.randn(1, 3, 48, 64)
    with torch.no_grad():
        expected = full.forward_intermediates(x, indices=[0, 2], intermediates_only=True)
        got = feat(x)
    for e, g in zip(expected, got):
        torch.testing.assert_close(e, g)


def test_prune_intermediate_layers_keeps_outputs():
    torch.manual_seed(0)
    model = timm.create_model('simple_vit_small_patch16_224', depth=4).eval()
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        before = model.forward_intermediates(x, indices=[1], intermediates_only=True)
        kept = model.prune_intermediate_layers([1], prune_head=True)
        after = model.forward_intermediates(x, indices=kept, intermediates_only=True)
    assert len(model.blocks) == 2 and model.num_classes == 0 and model.head_hidden_size == model.embed_dim
    torch.testing.assert_close(before[0], after[0])



@pytest.mark.parametrize('kwargs', [dict(pos_embed='relpos', class_token=True),
                                    dict(pos_embed='rope', rope_type='mixed', rope_theta=10.)],
                         ids=['relpos', 'rope_mixed'])
def test_pruning_keeps_per_layer_position_tensors_of_the_kept_blocks(kwargs):
    """Per-layer position tensors (BEiT's tables, RoPE-ViT's mixed frequencies) follow the blocks a prune keeps, so
    the pruned model is the one its config describes and its intermediates are unchanged."""
    torch.manual_seed(0)
    model = timm.create_model('simple_vit_tiny', embed_dim=32, num_heads=2, mlp_dim=64, depth=4, img_size=32,
                              patch_size=8, **kwargs).eval()
    for param in (model.rel_pos.tables,) if model.rel_pos is not None else ():
        torch.nn.init.normal_(param)
    x = torch.randn(1, 3, 40, 32)
    with torch.no_grad():
        before = model.forward_intermediates(x, indices=[1], intermediates_only=True)
        kept = model.prune_intermediate_layers([1])
        after = model.forward_intermediates(x, indices=kept, intermediates_only=True)
    torch.testing.assert_close(before[0], after[0], rtol=0, atol=0)
    rebuilt = timm.create_model('simple_vit_tiny', **{**model.config.to_dict(), 'weight_init': 'skip'})
    assert {k: v.shape for k, v in rebuilt.state_dict().items()} == {k: v.shape for k, v in model.state_dict().items()}

def test_model_args_are_recorded_for_reconstruction():
    model = timm.create_model('simple_vit_tiny', num_classes=3, img_size=48, patch_size=8)
    model.set_input_size(img_size=(64, 96), patch_size=16)
    rebuilt = timm.create_model('simple_vit_tiny', **{**model._model_args, 'num_classes': 3})
    assert rebuilt.patch_embed.patch_size == (16, 16) and rebuilt.patch_embed.img_size == (64, 96)


@pytest.mark.parametrize('pos_embed', ['sincos', 'learn', 'relpos'])
def test_torch_compile_fullgraph_dynamic(pos_embed):
    torch.manual_seed(0)
    kwargs = dict(embed_dim=32, depth=2, num_heads=2, mlp_dim=64, patch_size=8, img_size=32, num_classes=5,
                  pos_embed=pos_embed)
    if pos_embed == 'learn':
        kwargs.update(class_token=True, pos_embed_cls_slot=True, global_pool='token')
    if pos_embed == 'relpos':  # its tables resized at the other grids, in the graph
        kwargs.update(class_token=True, rel_pos_resample='timm')
    model = timm.create_model('simple_vit_tiny', **kwargs).eval()
    if model.rel_pos is not None:
        with torch.no_grad():
            model.rel_pos.tables.normal_()
    compiled = torch.compile(model, fullgraph=True, dynamic=True, backend='eager')
    with torch.no_grad():
        for shape in [(2, 3, 32, 32), (1, 3, 48, 40), (1, 3, 37, 30)]:
            x = torch.randn(*shape)
            torch.testing.assert_close(compiled(x), model(x))


def test_bf16_forward_close_to_fp32():
    torch.manual_seed(0)
    model = timm.create_model('simple_vit_tiny', depth=2, num_classes=0).eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        ref = model(x)
        out = model.to(torch.bfloat16)(x.bfloat16())
    assert out.dtype == torch.bfloat16
    assert (out.float() - ref).abs().max() < 0.1 * ref.abs().max()


def test_unknown_kwarg_raises_type_error():
    with pytest.raises(TypeError):
        timm.create_model('simple_vit_tiny', no_such_arg=True)
