"""The AIMv2 family's rows, tags and parts (``families/aimv2.py``): every row a valid composed config that
round-trips through both JSON forms, with the facts of Apple's towers."""
import pytest

from timm_vit_variants.config import SimpleViTConfig
from timm_vit_variants.families.aimv2 import AIMV2_CFGS, AIMV2_ROWS, Aimv2Pool, Aimv2SinCos
from timm_vit_variants.errors import ViTVariantsError
from timm_vit_variants.parts import Learned, PoolPart, PositionScheme


@pytest.mark.parametrize('name', sorted(AIMV2_ROWS))
def test_rows_round_trip(name):
    config = SimpleViTConfig.of(**AIMV2_ROWS[name][1])
    assert SimpleViTConfig.from_dict(config.to_dict()) == config
    assert SimpleViTConfig.of(**config.to_flat()) == config
    assert config.num_prefix_tokens == 0 and config.block.norm == 'rmsnorm' and config.block.norm_eps == 1e-5
    assert not (config.block.qkv_bias or config.block.proj_bias or config.block.mlp_bias)
    assert (config.position(Aimv2SinCos) is None) == (config.position(Learned) is not None)


def test_facts_of_the_published_towers():
    sizes = {name: SimpleViTConfig.of(**args) for name, (_, args, _) in AIMV2_ROWS.items()}
    assert [(c.embed_dim, c.num_heads, c.block.mlp_dim) for n, c in sizes.items() if n.endswith('aimv2_224')] == \
        [(1024, 8, 2816), (1536, 12, 4096), (2048, 16, 5632), (3072, 24, 8192)]
    assert isinstance(sizes['simple_vit_large_patch14_aimv2_lit_224'].head.pool, Aimv2Pool)
    assert sizes['simple_vit_large_patch14_aimv2_native'].position(Aimv2SinCos) == Aimv2SinCos()
    for tag, cfg in AIMV2_CFGS.items():
        assert tag.split('.')[0] in AIMV2_ROWS and cfg['hf_hub_id'].startswith('apple/aimv2-')


def test_parts_parse_and_refuse():
    assert PoolPart.parse({'kind': 'aimv2', 'queries': 2}) == Aimv2Pool(2)
    assert PositionScheme.parse({'scheme': 'aimv2_sincos'}) == Aimv2SinCos()
    with pytest.raises(ViTVariantsError, match='queries'):
        Aimv2Pool(0)
    with pytest.raises(ViTVariantsError, match='temperature'):
        Aimv2SinCos(-1.)
