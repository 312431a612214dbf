"""The head (``heads.py``): each pooling kind is a module class that owns its pooling, its reset and its keys, the
state-dict names staying timm's; a family registers its own kind by subclassing."""
import ast
from pathlib import Path

import pytest
import torch

from timm_vit_variants import SimpleVisionTransformer
from timm_vit_variants.config import POOL_TYPES
from timm_vit_variants.errors import ViTVariantsError
from timm_vit_variants.heads import POOL_MODULES, CocaPool, DistilledTokenPool, MapPool, PoolModule

PACKAGE = Path(__file__).resolve().parents[1] / 'timm_vit_variants'
TINY = dict(embed_dim=32, depth=1, num_heads=2, patch_size=8, img_size=32, class_token=True, num_classes=3)
CORE = ('vision_transformer.py', 'heads.py', 'layers.py', 'positions.py', 'eva_block.py', 'embedding.py', 'rope.py',
        'patch_embed.py', 'patch_layers.py')


def test_every_pooling_kind_is_a_registered_module_class():
    assert set(POOL_TYPES) <= set(POOL_MODULES)
    for kind in POOL_TYPES:
        model = SimpleVisionTransformer(**TINY, global_pool=kind, device='meta')
        pool = model.attn_pool if model.attn_pool is not None else model.pooler
        assert isinstance(pool, POOL_MODULES[kind]) and pool.kind == kind
        assert (model.attn_pool is not None) == POOL_MODULES[kind].weighted
        assert any(k.startswith('attn_pool.') for k in model.state_dict()) == POOL_MODULES[kind].weighted
        assert not any(k.startswith('pooler') for k in model.state_dict())


def test_the_model_core_compares_no_kind_name():
    """No ``== 'coca'``-style branch: the model core reads classes and their declared attributes."""
    kinds = set(POOL_TYPES) | {'eva', 'vit', 'sincos', 'learn', 'rope', 'relpos', 'cpe', 'none', 'dinov3', 'axial',
                               'mixed', 'eva02', 'mlp', 'swiglu', 'swiglu_packed', 'conv', 'linear', 'conv_stem',
                               'overlap', 'pre', 'post', 'dual'}
    for name in CORE:
        for node in ast.walk(ast.parse((PACKAGE / name).read_text())):
            if isinstance(node, ast.Compare):
                named = [c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and c.value in kinds]
                assert not named, f'{name}:{node.lineno} compares with {named}'


def test_deits_pair_is_its_own_pool_class():
    model = SimpleVisionTransformer(**TINY, dist_token=True, global_pool='token').eval()
    assert isinstance(model.pooler, DistilledTokenPool) and model.head_dist is not None
    x = torch.randn(2, 3, 32, 32)
    tokens = model.forward_features(x)
    torch.testing.assert_close(model.forward_head(tokens, pre_logits=True), (tokens[:, 0] + tokens[:, 1]) / 2)


def test_pool_by_another_kind_without_weights_and_refuse_one_with_weights():
    model = SimpleVisionTransformer(**TINY, global_pool='token').eval()
    tokens = model.forward_features(torch.randn(2, 3, 32, 32))
    torch.testing.assert_close(model.pool(tokens, 'avg'), tokens[:, 1:].mean(dim=1))
    torch.testing.assert_close(model.pool(tokens, 'token'), tokens[:, 0])
    with pytest.raises(ViTVariantsError, match="pool_type='map'"):
        model.pool(tokens, 'map')  # it has no attention pool: it used to hand back the tokens unpooled


def test_resets_follow_each_kinds_declaration():
    model = SimpleVisionTransformer(**TINY, global_pool='map', pos_embed='learn')
    model.reset_classifier(5, 'token')
    assert model.attn_pool is None and type(model.pooler) is POOL_MODULES['token']
    with pytest.raises(ViTVariantsError, match='cannot create'):
        model.reset_classifier(5, 'map')
    coca = SimpleVisionTransformer(**TINY, global_pool='coca', attn_pool_dim=16, attn_pool_queries=4)
    assert isinstance(coca.attn_pool, CocaPool) and isinstance(coca.norm, torch.nn.Identity)
    with pytest.raises(ViTVariantsError, match='holds the final norm'):
        coca.reset_classifier(5, 'avg')
    coca.prune_intermediate_layers(1)  # the pool holding the final norm stays
    assert isinstance(coca.attn_pool, CocaPool) and coca.num_classes == 0


def test_a_family_registers_its_own_pooling_kind():
    class LastToken(PoolModule, kind='test_last_token'):
        def pool_tokens(self, x, patch_valid=None):
            return x[:, -1]

    try:
        assert POOL_MODULES['test_last_token'] is LastToken
        cfg = SimpleVisionTransformer(**TINY, device='meta').config
        pool = LastToken.create(cfg, None, None, {})
        x = torch.randn(2, 5, 4)
        assert pool.num_prefix_tokens == 1 and torch.equal(pool.pool_tokens(x), x[:, -1])
        with pytest.raises(ValueError, match='registered twice'):
            type('Again', (PoolModule,), {}, kind='test_last_token')
    finally:
        POOL_MODULES.pop('test_last_token')


def test_the_map_pool_keeps_timms_keys():
    model = SimpleVisionTransformer(**TINY, global_pool='map', pos_embed='learn', device='meta')
    assert isinstance(model.attn_pool, MapPool)
    assert {k for k in model.state_dict() if k.startswith('attn_pool.')} >= {
        'attn_pool.latent', 'attn_pool.q.weight', 'attn_pool.kv.weight', 'attn_pool.proj.weight',
        'attn_pool.norm.weight', 'attn_pool.mlp.fc1.weight'}


@pytest.mark.parametrize('kwargs', [dict(global_pool=kind) for kind in POOL_TYPES] + [
    dict(global_pool='token', dist_token=True, pos_embed='learn', pos_embed_cls_slot=True)], ids=str)
def test_each_pooling_kind_scripts(kwargs):
    """TorchScript compiles each pool's own ``pool_tokens`` (CoCa's key mask included) to the eager numbers."""
    if kwargs['global_pool'] == 'coca':
        kwargs = dict(kwargs, attn_pool_dim=16, attn_pool_queries=4)
    model = SimpleVisionTransformer(**TINY, **kwargs).eval()
    x = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(torch.jit.script(model)(x), model(x))
