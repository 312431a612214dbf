"""The shared tensor rules and the combinators readers build their ``TENSOR_RULES`` tables from."""
from types import SimpleNamespace

import pytest
import torch

from timm_vit_variants.checkpoints.fills import Misfit
from timm_vit_variants.checkpoints.tensor_rules import (LAYER_SCALE, Rule, as_token, first_rule, for_key, named,
                                                        q_none_v_bias, qv_bias, renamed_keys)


def _reader(stored=(), **attrs):
    return SimpleNamespace(_store=set(stored), **attrs)


FIELDS = dict(p='m.', i=3)


def test_q_none_v_bias_zeroes_the_k_third():
    dst = torch.full((6,), 9.)
    q_none_v_bias(dst, torch.tensor([1., 2.]), torch.tensor([3., 4.]))
    assert dst.tolist() == [1., 2., 0., 0., 3., 4.]
    with pytest.raises(Misfit):
        q_none_v_bias(dst, torch.zeros(3), torch.zeros(2))


def test_as_token_shapes_a_class_embedding():
    dst = torch.empty(1, 1, 4)
    as_token(dst, torch.arange(4.))
    assert dst.flatten().tolist() == [0., 1., 2., 3.]


def test_renamed_keys_answers_only_the_keys_it_renames():
    rule = renamed_keys(LAYER_SCALE)
    assert rule(_reader(), 'blocks.{i}.ls2.gamma', FIELDS) == Rule(('{p}blocks.{i}.gamma_2',))
    assert rule(_reader(), 'blocks.{i}.attn.qkv.weight', FIELDS) is None
    gated = renamed_keys(LAYER_SCALE, when=lambda r: r.on)
    assert gated(_reader(on=False), 'blocks.{i}.ls1.gamma', FIELDS) is None


def test_qv_bias_steps_aside_for_a_stored_fused_bias():
    rule = qv_bias('{p}blocks.{i}.attn.q_bias', '{p}blocks.{i}.attn.v_bias', unless='{p}blocks.{i}.attn.qkv.bias')
    want = Rule(('{p}blocks.{i}.attn.q_bias', '{p}blocks.{i}.attn.v_bias'), q_none_v_bias)
    assert rule(_reader(), 'blocks.{i}.attn.qkv.bias', FIELDS) == want
    assert rule(_reader(['m.blocks.3.attn.qkv.bias']), 'blocks.{i}.attn.qkv.bias', FIELDS) is None
    assert rule(_reader(), 'blocks.{i}.attn.qkv.weight', FIELDS) is None


def test_a_table_is_asked_in_order():
    table = (named({'head.weight': 'proj.weight'}, when=lambda r: r.proj),
             for_key('head.weight', lambda r: Rule(('classifier.weight',))))
    assert first_rule(_reader(proj=True), table, 'head.weight', FIELDS) == Rule(('proj.weight',))
    assert first_rule(_reader(proj=False), table, 'head.weight', FIELDS) == Rule(('classifier.weight',))
    assert first_rule(_reader(proj=False), table, 'norm.weight', FIELDS) is None
