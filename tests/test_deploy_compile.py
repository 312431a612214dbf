"""``torch.compile(model, dynamic=True)`` follows the input size: one graph for every H x W and batch.

Recompiles are counted, never timed: ``torch._dynamo.utils.counters['stats']['unique_graphs']`` is the
number of graphs dynamo compiled (each recompile adds one). The first call decides the symbols: when
it is square, PyTorch's duck sizing gives H and W one symbol and the first non-square input compiles a
second graph; a non-square first input, or ``torch._dynamo.mark_dynamic`` on it, avoids that.
"""
import pytest
import timm
import torch
from torch._dynamo.utils import counters

import timm_vit_variants  # noqa: F401  (registers simple_vit_*)

KINDS = {
    'sincos': {},
    'learn_timm_cls_slot': dict(pos_embed='learn', pos_embed_resample='timm', class_token=True,
                                pos_embed_cls_slot=True, global_pool='token'),
}
# Five sizes after the first: square, non-square, larger, smaller and two the patch (8) does not divide.
SIZES = [(48, 48), (24, 64), (64, 40), (16, 16), (33, 31), (17, 57)]


def _model(kind):
    torch.manual_seed(0)
    model = timm.create_model('simple_vit_tiny', embed_dim=32, depth=1, num_heads=2, mlp_dim=64, patch_size=8,
                              img_size=32, num_classes=5, **KINDS[kind]).eval()
    with torch.no_grad():
        model.head.weight.normal_()  # the head is zero-initialised
        if model.pos_embed is not None:
            model.pos_embed.normal_()  # a wrong resample must show in the logits
    return model


def _graphs_after_first(model, first, mark=False):
    """Graphs compiled for SIZES after the first call (batch 2 and 4 in turn); outputs checked against eager."""
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, dynamic=True, fullgraph=True, backend='eager')
    with torch.no_grad():
        x = torch.randn(2, 3, *first)
        if mark:
            torch._dynamo.mark_dynamic(x, (0, 2, 3))
        torch.testing.assert_close(compiled(x), model(x))
        assert counters['stats']['unique_graphs'] == 1
        for i, (h, w) in enumerate(SIZES):
            x = torch.randn(2 + 2 * (i % 2), 3, h, w)
            torch.testing.assert_close(compiled(x), model(x))
    return counters['stats']['unique_graphs'] - 1


@pytest.mark.parametrize('kind', list(KINDS))
def test_no_recompile_after_a_non_square_first_input(kind):
    assert _graphs_after_first(_model(kind), (32, 40)) == 0


def test_no_recompile_when_a_square_first_input_is_marked_dynamic():
    assert _graphs_after_first(_model('learn_timm_cls_slot'), (32, 32), mark=True) == 0


def test_square_first_input_costs_one_duck_sizing_recompile():
    # The documented condition: PyTorch (not the model) assumes W == H after a square first call.
    assert _graphs_after_first(_model('sincos'), (32, 32)) == 1
