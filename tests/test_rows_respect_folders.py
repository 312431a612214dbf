"""Every registered row, written as a Hub folder with 0, 10 or 1000 classes and with each pooling it can take, loads back
through ``timm.create_model('local-dir:...', pretrained=True)`` as that network: the folder's head, pooling and
pre-logits, never the row's defaults, and the stored weights, never a fresh head."""
import pytest
import torch

from porting.hub_folder import save_pretrained_folder
from timm_vit_variants import SimpleVisionTransformer
from timm_vit_variants.config import POOL_TYPES
from timm_vit_variants.model_table import MODELS

from model_probes import load_like_user

# Small stand-ins for each row's widths: the row's every other setting stays, so any field a row sets is one the
# folder must override. Head width 32 keeps RoPE's four-way split; 64 wide keeps sin-cos's.
_SMALL = dict(embed_dim=64, num_heads=2, mlp_dim=128, depth=1)


def _small(name: str, **changes) -> SimpleVisionTransformer:
    row = MODELS[name].config()
    sizes = dict(_SMALL, img_size=tuple(2 * p for p in row.patch_size))
    if row.head.rep_size:
        sizes['rep_size'] = 48
    if row.head.pool.kind == 'coca' or changes.get('global_pool') == 'coca':
        sizes.update(attn_pool_dim=32, attn_pool_heads=2, attn_pool_queries=4)
    torch.manual_seed(0)
    return SimpleVisionTransformer(row.replace(**sizes, **changes), weight_init='jax')


def _poolings(name: str):
    row = MODELS[name].config()
    return [p for p in POOL_TYPES if (p != 'token' or row.tokens.cls) and (p in ('token', '') or not row.tokens.dist)
            and not (p == 'coca' and (row.head.fc_norm or row.head.untie_norms))]


# Each row with 0, 10 and 1000 classes at its own pooling, and with 10 classes at every other pooling it can take.
CASES = [(name, classes, MODELS[name].config().head.pool.kind) for name in MODELS for classes in (0, 10, 1000)] + [
    (name, 10, pool) for name in MODELS for pool in _poolings(name) if pool != MODELS[name].config().head.pool.kind]


@pytest.mark.parametrize('name,classes,pool', CASES, ids=[f'{n}-{c}-{p or "none"}' for n, c, p in CASES])
def test_a_row_loads_back_with_the_folders_head(tmp_path, name, classes, pool):
    model = _small(name, num_classes=classes, global_pool=pool).eval()
    if classes:  # a head timm would replace by a fresh (zero) one if it dropped the stored classifier
        torch.nn.init.normal_(model.head.weight)
    save_pretrained_folder(model, tmp_path / 'out')
    loaded = load_like_user(tmp_path / 'out')
    assert loaded.config.to_dict() == model.config.to_dict()
    assert (loaded.num_classes, loaded.global_pool) == (classes, pool)
    theirs = loaded.state_dict()
    for key, tensor in model.state_dict().items():
        torch.testing.assert_close(theirs[key], tensor, rtol=0, atol=0, msg=key)
    x = torch.randn(1, model.config.in_chans, *model.config.img_size)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model(x), rtol=0, atol=0)
