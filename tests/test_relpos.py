"""BEiT's relative position bias as a position scheme (model side): against timm's own ``Beit`` at its grid, at
another square grid and at a non-square one (timm's resize, its checkpoint filter); every input form gives each
image what it gets alone; ``set_input_size`` by ``rel_pos_resample``; TorchScript and FX as eager."""
import pytest
import timm
import torch
from timm.data.naflex_dataset import NaFlexCollator
from timm.data.naflex_transforms import patchify_image
from timm.models import get_notrace_functions, get_notrace_modules
from timm.models.beit import Beit, checkpoint_filter_fn

import timm_vit_variants  # noqa: F401
from timm_vit_variants import SimpleVisionTransformer, ViTVariantsError

TOL = 2e-5
ALONE_TOL = 1e-5
TINY = dict(embed_dim=32, depth=2, num_heads=2, patch_size=8, img_size=32, num_classes=5)
# Ours as timm's Beit(global_pool='avg'): [CLS], LayerScale, exact GELU, mean of the patch tokens then fc_norm.
BEIT_LIKE = dict(TINY, class_token=True, global_pool='avg', fc_norm=True, init_values=0.1, act_layer='gelu',
                 rel_pos_resample='timm')


def _beit(img_size, abs_pos: bool, state=None) -> Beit:
    torch.manual_seed(0)
    beit = Beit(img_size=img_size, patch_size=8, embed_dim=32, depth=2, num_heads=2, num_classes=5, init_values=0.1,
                use_abs_pos_emb=abs_pos, use_rel_pos_bias=True).eval()
    if state is None:
        with torch.no_grad():  # values everywhere, the tables far from BEiT's zero init
            for name, p in beit.named_parameters():
                p.add_(torch.randn_like(p) * (0.5 if 'relative_position' in name else 0.05))
    else:
        missing, unexpected = beit.load_state_dict(checkpoint_filter_fn(state, beit), strict=False)
        assert not unexpected and all('relative_position_index' in k for k in missing)
    return beit


def _ours_from_beit(beit: Beit, abs_pos: bool) -> SimpleVisionTransformer:
    """Our model with timm Beit's weights: q_bias / v_bias into qkv.bias (k zero), gamma_1/2 into ls1/ls2.gamma,
    each block's relative_position_bias_table into rel_pos.tables."""
    src = beit.state_dict()
    kwargs = dict(pos_embed='learn+relpos', pos_embed_cls_slot=True, pos_embed_resample='timm') if abs_pos \
        else dict(pos_embed='relpos')
    model = SimpleVisionTransformer(**BEIT_LIKE, **kwargs).eval()
    state = {k: v for k, v in src.items() if 'relative_position' not in k and '_bias' not in k and 'gamma' not in k}
    for i in range(len(beit.blocks)):
        b = f'blocks.{i}.'
        state[b + 'attn.qkv.bias'] = torch.cat([src[b + 'attn.q_bias'], torch.zeros_like(src[b + 'attn.q_bias']),
                                                src[b + 'attn.v_bias']])
        state[b + 'ls1.gamma'], state[b + 'ls2.gamma'] = src[b + 'gamma_1'], src[b + 'gamma_2']
    state['rel_pos.tables'] = torch.stack([src[f'blocks.{i}.attn.relative_position_bias_table']
                                           for i in range(len(beit.blocks))])
    model.load_state_dict(state, strict=True)
    return model


def _image(height, width, batch=2, seed=0):
    return torch.randn(batch, 3, height, width, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize('abs_pos', [False, True], ids=['relpos', 'learn+relpos'])
def test_timms_beit_at_its_grid(abs_pos, max_delta):
    beit = _beit(32, abs_pos)
    ours = _ours_from_beit(beit, abs_pos)
    x = _image(32, 32)
    with torch.no_grad():
        max_delta(f"timm Beit ({'abs + ' if abs_pos else ''}rel pos), its 4x4 grid: logits", ours(x), beit(x), TOL)


@pytest.mark.parametrize('size', [(48, 48), (32, 48)], ids=['6x6', '4x6'])
def test_timms_beit_at_another_grid(size, max_delta):
    """At run time our tables follow the grid by timm's linear rule, as timm's filter resizes Beit's for its own."""
    beit = _beit(32, False)
    ours = _ours_from_beit(beit, False)
    other = _beit(size, False, state=beit.state_dict())
    x = _image(*size)
    with torch.no_grad():
        first = ours(x)
        max_delta(f'timm Beit (rel pos) resized to {size}: logits at run time', first, other(x), TOL)
        assert (size[0] // 8, size[1] // 8) in ours.rel_pos._cache
        assert torch.equal(ours(x), first)  # the second call takes the cached tables


def test_set_input_size_resizes_the_tables_by_rel_pos_resample(max_delta):
    beit = _beit(32, False)
    ours = _ours_from_beit(beit, False)
    other = _beit(48, False, state=beit.state_dict())
    tables = ours.rel_pos.tables.detach().clone()
    ours.set_input_size(img_size=48)
    assert ours.rel_pos.tables.shape == (2, 11 * 11 + 3, 2) and ours.rel_pos.grid_size == (6, 6)
    assert ours.rel_pos.index.shape == (37, 37)
    x = _image(48, 48)
    with torch.no_grad():
        max_delta('timm Beit (rel pos) at 48 vs set_input_size(48) with the timm rule', ours(x), other(x), TOL)
    ours.set_input_size(img_size=32)
    assert ours.rel_pos.tables.shape == tables.shape and ours.config.grid_size == (4, 4)
    rebuilt = SimpleVisionTransformer(ours.config)
    assert [(k, v.shape) for k, v in rebuilt.state_dict().items()] == \
        [(k, v.shape) for k, v in ours.state_dict().items()]
    # BEiT's own rule (checked against unilm's outputs in test_beit.py) resizes square grids only
    beit_rule = SimpleVisionTransformer(**dict(BEIT_LIKE, pos_embed='relpos', rel_pos_resample='beit'))
    beit_rule.set_input_size(img_size=48)
    assert beit_rule.rel_pos.tables.shape == (2, 11 * 11 + 3, 2)
    with pytest.raises(ViTVariantsError, match='resample-like timm'):
        beit_rule.set_input_size(img_size=(48, 32))


def test_every_input_form_gives_each_image_its_own_bias(max_delta):
    """NCHW, a list (packed rows: each image's bias block-diagonal) and timm's NaFlex dict agree per image, at
    grids square, not square and not a patch multiple."""
    ours = _ours_from_beit(_beit(32, False), False)
    generator = torch.Generator().manual_seed(1)
    images = [torch.randn(3, h, w, generator=generator) for h, w in [(32, 32), (24, 40), (16, 16), (36, 20), (8, 8)]]
    with torch.no_grad():
        alone = [ours(image[None])[0] for image in images]
        as_list = ours(images)
        whole = [im[:, :im.shape[1] // 8 * 8, :im.shape[2] // 8 * 8] for im in images]
        batch, _ = NaFlexCollator(max_seq_len=40)([({'patches': p, 'patch_coord': c, 'patch_valid': v}, 0)
                                                    for p, c, v in (patchify_image(im, (8, 8)) for im in whole)])
        as_dict = ours(batch)
        as_whole_list = ours(whole)
    for i, expected in enumerate(alone):
        max_delta(f'rel pos: list vs alone, image {i} {tuple(images[i].shape[1:])}', as_list[i], expected, ALONE_TOL)
    max_delta("rel pos: timm's NaFlex dict vs the list", as_dict, as_whole_list, ALONE_TOL)


def test_the_scheme_needs_one_cls_token():
    for bad in (dict(class_token=False, global_pool='avg'), dict(reg_tokens=4), dict(dist_token=True, global_pool='token')):
        with pytest.raises(ViTVariantsError, match='one \\[CLS\\] token'):
            SimpleVisionTransformer(**dict(BEIT_LIKE, pos_embed='relpos', **bad))


@pytest.mark.parametrize('pos_embed', ['relpos', 'learn+relpos'])
def test_torchscript_and_fx_match_eager(pos_embed):
    from torchvision.models.feature_extraction import create_feature_extractor, get_graph_node_names
    torch.manual_seed(0)
    model = SimpleVisionTransformer(**dict(BEIT_LIKE, pos_embed=pos_embed, pos_embed_cls_slot=True)).eval()
    with torch.no_grad():
        model.rel_pos.tables.normal_()
        model.head.weight.normal_(std=0.1)
    scripted = torch.jit.script(model)
    tracer_kwargs = dict(leaf_modules=get_notrace_modules(), autowrap_functions=get_notrace_functions())
    _, nodes = get_graph_node_names(model, tracer_kwargs=tracer_kwargs)
    fx_model = create_feature_extractor(model, return_nodes=[nodes[-1]], tracer_kwargs=tracer_kwargs)
    with torch.no_grad():
        for x in (_image(32, 32, batch=1), _image(40, 24, batch=1)):
            torch.testing.assert_close(scripted(x), model(x))
            torch.testing.assert_close(fx_model(x)[nodes[-1]], model(x))


def test_torch_export_matches_eager():
    torch.manual_seed(0)
    model = SimpleVisionTransformer(**dict(BEIT_LIKE, pos_embed='relpos')).eval()
    with torch.no_grad():
        model.rel_pos.tables.normal_()
    x = _image(32, 32, batch=1)
    exported = torch.export.export(model, (x,))
    with torch.no_grad():
        torch.testing.assert_close(exported.module()(x), model(x))


def test_timm_create_model_takes_the_fields():
    model = timm.create_model('simple_vit_tiny', **dict(BEIT_LIKE, pos_embed='relpos'))
    assert model.rel_pos is not None and model.abs_pos is None and model.rope is None
    assert 'rel_pos.tables' in model.no_weight_decay()
    assert 'rel_pos.index' not in model.state_dict()
