"""The composed ``SimpleViTConfig``: its parts validate themselves, and the flat release-0.2.0 names round-trip.

Torch-free: nothing here builds a model.
"""
import dataclasses
import json
from pathlib import Path

import pytest

from timm_vit_variants.config import FLAT_NAMES, SimpleViTConfig
from timm_vit_variants.model_table import MODELS
from timm_vit_variants.errors import ViTVariantsError
from timm_vit_variants.parts import (POSITION_SCHEMES, BlockPart, CocaPool, Cpe, HeadPart, Learned, MapPool, PatchPart,
                                     RelPos, Rope, SinCos, TokenPool, TokensPart, TrainingPart)

DATA = Path(__file__).parent / 'data'
RELEASE_CONFIGS = sorted([*DATA.glob('release_folders/*/config.json'), *DATA.glob('release_conversions/*/config.json')])
# Flat names that configure one position scheme: a row may set one for a scheme it does not have (RoPE-ViT's shared
# settings name a table resize rule without a table); it configures nothing, so the composed form has no place for it.
SCHEME_OPTIONS = {flat: scheme for scheme in POSITION_SCHEMES.values() for flat in scheme.FLAT.values()}
POOL_OPTIONS = {flat for flat in CocaPool.FLAT.values()}
COMPOSED = ('patch', 'tokens', 'positions', 'block', 'head', 'training')  # the parts' argument names


def _json(value):
    return json.loads(json.dumps(value))


def _inert(config: SimpleViTConfig, name: str) -> bool:
    """Whether a flat name configures a position scheme or pool this config does not have."""
    if name in SCHEME_OPTIONS:
        return config.position(SCHEME_OPTIONS[name]) is None
    return name in POOL_OPTIONS and not isinstance(config.head.pool, CocaPool)


def _round_trips(flat: dict) -> None:
    config = SimpleViTConfig.of(**flat)
    back = _json(config.to_flat(include_training=True))
    for name, value in _json(flat).items():
        assert back[name] == value or _inert(config, name), (name, back[name], value)
    assert SimpleViTConfig.of(**back) == config  # flat -> composed -> flat -> composed is the same config
    assert SimpleViTConfig.from_dict(_json(config.to_dict(include_training=True))) == config


@pytest.mark.parametrize('name', sorted(MODELS))
def test_every_registered_row_round_trips_flat_composed_flat(name):
    kwargs = MODELS[name].kwargs
    if any(k in COMPOSED for k in kwargs):  # a family's row, given as parts: its flat form is what config.json holds
        kwargs = SimpleViTConfig.of(**kwargs).to_flat(include_training=True)
    _round_trips(kwargs)


@pytest.mark.parametrize('path', RELEASE_CONFIGS, ids=lambda p: f'{p.parent.parent.name}/{p.parent.name}')
def test_every_release_config_json_round_trips_flat_composed_flat(path):
    args = dict(json.loads(path.read_text())['model_args'])
    args.pop('dtype', None)  # the weights' dtype, read by create_simple_vit, not a config field
    _round_trips(args)


def test_the_release_fixtures_are_found():
    assert len(RELEASE_CONFIGS) >= 40


def test_to_flat_is_release_0_2_0s_flat_dict_for_a_full_config():
    config = SimpleViTConfig.of(img_size=(32, 48), patch_size=8, embed_dim=64, num_heads=4, depth=2,
                                class_token=True, global_pool='coca', attn_pool_queries=4, attn_pool_heads=2,
                                pos_embed='learn+rope', pos_embed_cls_slot=True, pos_embed_resample='timm',
                                rope_type='axial', rope_theta=10., dynamic_img_pad=False)
    flat = config.to_flat()
    assert flat['img_size'] == (32, 48) and flat['patch_size'] == 8 and flat['grid_mode'] == 'strict'
    assert (flat['pos_embed'], flat['pos_embed_cls_slot'], flat['pos_embed_resample']) == ('learn+rope', True, 'timm')
    assert (flat['rope_type'], flat['rope_theta'], flat['global_pool']) == ('axial', 10., 'coca')
    assert (flat['attn_pool_queries'], flat['attn_pool_heads'], flat['attn_pool_dim']) == (4, 2, 64)
    assert 'dynamic_img_pad' not in flat and 'drop_rate' not in flat and 'norm_layer' not in flat
    assert flat['mlp_dim'] == 256 and list(flat)[:5] == ['img_size', 'patch_size', 'in_chans', 'num_classes',
                                                         'global_pool']


def test_to_dict_is_plain_json_of_the_parts():
    config = SimpleViTConfig.of(embed_dim=64, num_heads=4, class_token=True, global_pool='coca',
                                pos_embed='learn+rope', rope_type='eva02', rope_ref_grid=4, patch_size=(8, 4))
    data = config.to_dict()
    assert _json(data) == data  # no tuples, no objects
    assert data['positions'] == [{'scheme': 'learn', 'cls_slot': False, 'resample': 'bigvision'},
                                 {'scheme': 'rope', 'kind': 'eva02', 'theta': 100.0, 'ref_grid': 4}]
    assert data['head']['pool'] == {'kind': 'coca', 'queries': 256, 'heads': 8, 'dim': 64}
    assert data['patch_size'] == [8, 4] and 'training' not in data
    assert config.to_dict(include_training=True)['training']['weight_init'] == 'jax'
    assert SimpleViTConfig.from_dict(data) == config


def test_of_takes_parts_as_objects_or_dicts_and_flat_names_win():
    as_dict = SimpleViTConfig.of(head={'pool': {'kind': 'avg'}, 'fc_norm': True}, global_pool='map')
    as_object = SimpleViTConfig.of(head=HeadPart(fc_norm=True), global_pool='map')
    assert as_dict == as_object and isinstance(as_dict.head.pool, MapPool) and as_dict.head.fc_norm
    config = SimpleViTConfig.of(block={'norm_eps': 1e-5, 'act': 'gelu'}, norm_eps=1e-12)
    assert (config.block.norm_eps, config.block.act) == (1e-12, 'gelu')
    config = SimpleViTConfig.of(positions=[{'scheme': 'learn', 'resample': 'timm'}], pos_embed_resample='hf')
    assert config.position(Learned) == Learned(resample='hf') and config.position(SinCos) is None


def test_replace_applies_parts_then_flat_names_and_keeps_scheme_settings():
    config = SimpleViTConfig.of(embed_dim=64, num_heads=4, class_token=True, pos_embed='learn',
                                pos_embed_resample='timm')
    moved = config.replace(pos_embed='learn+rope', rope_type='axial')
    assert moved.position(Learned).resample == 'timm' and moved.position(Rope).kind == 'axial'
    assert config.replace(tokens=TokensPart(), global_pool='avg', class_token=True).tokens.cls
    assert config.replace(pos_embed='none').positions == ()
    assert config.replace(dynamic_img_pad=False).grid_mode == 'strict'


def test_every_flat_name_of_release_0_2_0_is_accepted():
    names = set(FLAT_NAMES)
    assert {'global_pool', 'pos_embed', 'dynamic_img_pad', 'attn_pool_queries', 'attn_pool_heads', 'attn_pool_dim',
            'rope_ref_grid', 'untie_cls_and_patch_norms', 'weight_init', 'patch_drop_rate'} <= names
    full = SimpleViTConfig.of().to_flat(include_training=True)
    assert set(full) <= names and len(dataclasses.fields(SimpleViTConfig)) == 14


def test_the_cls_slot_exists_only_next_to_a_class_token():
    assert SimpleViTConfig.of(pos_embed='learn', pos_embed_cls_slot=True).num_prefix_slots == 0
    assert SimpleViTConfig.of(pos_embed='learn', pos_embed_cls_slot=True, class_token=True,
                              global_pool='token', dist_token=True).num_prefix_slots == 2


@pytest.mark.parametrize('part, kwargs, key', [
    (PatchPart, dict(kind='hexagon'), 'patch_embed'),
    (PatchPart, dict(kind='overlap', norm='pre'), 'patch_norm'),
    (PatchPart, dict(bias=1), 'patch_bias'),
    (TokensPart, dict(registers=-1), 'reg_tokens'),
    (TokensPart, dict(cls='yes'), 'class_token'),
    (SinCos, dict(temperature=0), 'sincos_temperature'),
    (Learned, dict(resample='nearest'), 'pos_embed_resample'),
    (Rope, dict(kind='spiral'), 'rope_type'),
    (Rope, dict(kind='eva02'), 'rope_ref_grid'),
    (Rope, dict(ref_grid=16), 'rope_ref_grid'),
    (RelPos, dict(resample='cubic'), 'rel_pos_resample'),
    (BlockPart, dict(norm='batchnorm'), 'norm_layer'),
    (BlockPart, dict(mlp='swiglu'), 'mlp_layer'),
    (BlockPart, dict(qkv_fused=False), 'qkv_fused'),
    (BlockPart, dict(kind='eva', mlp='swiglu_packed', act='silu', mlp_norm=True), 'mlp_norm'),
    (BlockPart, dict(norm_eps=-1.), 'norm_eps'),
    (BlockPart, dict(qk_norm=None), 'qk_norm'),
    (CocaPool, dict(queries=0), 'attn_pool_queries'),
    (CocaPool, dict(dim=10, heads=3), 'attn_pool_heads'),
    (HeadPart, dict(pool=CocaPool(), fc_norm=True), 'fc_norm'),
    (HeadPart, dict(final_norm=False, fc_norm=True), 'final_norm'),
    (HeadPart, dict(pool='pyramid'), 'global_pool'),
    (HeadPart, dict(rep_size=-3), 'rep_size'),
    (TrainingPart, dict(drop_rate=2.), 'drop_rate'),
    (TrainingPart, dict(patch_drop_rate=1.), 'patch_drop_rate'),
    (TrainingPart, dict(weight_init='xavier'), 'weight_init'),
])
def test_each_part_refuses_its_own_bad_values_naming_the_key(part, kwargs, key):
    with pytest.raises(ViTVariantsError) as e:
        part(**kwargs)
    assert e.value.key == key and key in str(e.value)


@pytest.mark.parametrize('kwargs, key', [
    (dict(global_pool='token'), 'global_pool'),  # a [CLS] pool without a [CLS] token
    (dict(embed_dim=66, num_heads=3), 'embed_dim'),  # sin-cos needs a width divisible by 4
    (dict(embed_dim=48, num_heads=8, pos_embed='rope'), 'num_heads'),  # head width 6: not a multiple of 4
    (dict(pos_embed='relpos'), 'pos_embed'),  # BEiT's bias needs its one [CLS] token
    (dict(dist_token=True, class_token=True, global_pool='avg'), 'dist_token'),
    (dict(untie_cls_and_patch_norms=True), 'untie_cls_and_patch_norms'),
    (dict(patch_embed='conv_stem', patch_size=12), 'patch_size'),
    (dict(pos_embed='sincos+learn'), 'pos_embed'),  # two tables
    (dict(pos_embed='rope+learn'), 'pos_embed'),  # not the order flat names are written in
    (dict(pos_embed='learn+spiral'), 'pos_embed'),
    (dict(grid_mode='pad', dynamic_img_pad=False), 'dynamic_img_pad'),
    (dict(grid_mode='wrap'), 'grid_mode'),
    (dict(depth=0), 'depth'),
    (dict(mystery=1), 'mystery'),
    (dict(block={'kind': 'vit', 'gated': True}), 'block.gated'),
    (dict(positions=[{'scheme': 'fourier'}]), 'positions'),
])
def test_cross_part_and_unknown_values_are_refused_naming_the_key(kwargs, key):
    with pytest.raises(ViTVariantsError) as e:
        SimpleViTConfig.of(**kwargs)
    assert e.value.key == key


def test_from_dict_names_the_file_and_the_unknown_key():
    with pytest.raises(ViTVariantsError) as e:
        SimpleViTConfig.from_dict({'embed_dim': 64, 'num_heads': 4, 'swin': True}, path='config.json')
    assert (e.value.key, e.value.path) == ('swin', 'config.json')
    with pytest.raises(ViTVariantsError) as e:
        SimpleViTConfig.from_dict(['embed_dim'], path='config.json')
    assert e.value.path == 'config.json'


def test_cross_part_needs_are_declared_by_the_parts():
    assert TokenPool.needs_class_token and not MapPool.needs_class_token and CocaPool.owns_final_norm
    assert Rope.needs_head_width_multiple_of_4 and RelPos.needs_single_class_token and SinCos.width_multiple == 4
    assert {s.slot for s in (SinCos, Learned, Cpe, Rope, RelPos)} == {'abs_pos', 'pos_cpe', 'rope', 'rel_pos'}


def test_new_block_options_default_to_todays_models_and_appear_flat_only_when_set():
    block = SimpleViTConfig.of().block
    assert (block.norm, block.mlp_bias, block.proj_bias, block.qk_norm) == ('layernorm', True, True, False)
    flat = SimpleViTConfig.of(norm_layer='rmsnorm', qk_norm=True).to_flat()
    assert (flat['norm_layer'], flat['qk_norm']) == ('rmsnorm', True) and 'mlp_bias' not in flat


def test_fields_newer_than_the_composed_form_are_written_only_when_set():
    """A table's register rows and the attention's sub-LN appear in to_dict / to_flat only when set, so a config
    without them is written as before they existed, and what is written reads back equal."""
    plain = SimpleViTConfig.of(embed_dim=64, num_heads=4, class_token=True, reg_tokens=2, pos_embed='learn',
                               pos_embed_cls_slot=True)
    assert 'attn_norm' not in plain.to_dict()['block'] and 'attn_norm' not in plain.to_flat()
    assert 'reg_slots' not in plain.to_dict()['positions'][0] and 'pos_embed_reg_slots' not in plain.to_flat()
    newer = plain.replace(attn_norm=True, pos_embed_reg_slots=True)
    assert newer.to_dict()['block']['attn_norm'] is True and newer.to_dict()['positions'][0]['reg_slots'] is True
    assert SimpleViTConfig.from_dict(newer.to_dict()) == newer == SimpleViTConfig.of(**newer.to_flat())
