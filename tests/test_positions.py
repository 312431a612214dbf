"""The position-scheme interface: one registry fills the slots from ``pos_embed``, saved keys stay as they were, and
the embedding step, block loop and packed-row loop reach the schemes only through ``PositionsMixin``."""
import ast
from pathlib import Path

import pytest

from timm_vit_variants import SimpleVisionTransformer
from timm_vit_variants.config import POS_EMBED_TYPES
from timm_vit_variants.positions import SLOTS, SchemeModule
from timm_vit_variants.rope import ROPE_FORMS, ROPE_TYPES, RotaryScheme, create_rope

PACKAGE = Path(__file__).resolve().parents[1] / 'timm_vit_variants'
TINY = dict(embed_dim=32, depth=2, num_heads=2, patch_size=8, img_size=32, class_token=True, global_pool='token')
# Each scheme's tensors in the state dict, as saved folders hold them.
KEYS = {'learn': {'pos_embed'}, 'sincos': set(), 'none': set(), 'cpe': {'pos_cpe.proj.weight', 'pos_cpe.proj.bias'},
        'rope': {'rope.periods'}, 'relpos': {'rel_pos.tables'}}
SLOT_OF = {'learn': 'abs_pos', 'sincos': 'abs_pos', 'cpe': 'pos_cpe', 'rope': 'rope', 'relpos': 'rel_pos'}


@pytest.mark.parametrize('pos_embed', POS_EMBED_TYPES)
def test_the_registry_fills_one_slot_per_scheme_and_keeps_the_keys(pos_embed):
    model = SimpleVisionTransformer(**TINY, pos_embed=pos_embed, device='meta')
    names = pos_embed.split('+')
    filled = {slot for slot in SLOTS if getattr(model, slot) is not None}
    assert filled == {SLOT_OF[name] for name in names if name in SLOT_OF}
    keys = {k for k in model.state_dict() if not k.startswith(('blocks.', 'patch_embed.', 'norm', 'head', 'fc_norm'))}
    assert keys - {'cls_token'} == set().union(*(KEYS[name] for name in names))


def test_the_loops_name_no_scheme():
    """No model file outside positions.py reads a slot: the loops go through the interface."""
    for name in ('vision_transformer.py', 'embedding.py', 'naflex.py', 'block_context.py', 'packing.py'):
        tree = ast.parse((PACKAGE / name).read_text())
        reads = [node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr in SLOTS]
        assert not reads, f'{name} reads the position slots {reads}'


@pytest.mark.parametrize('pos_embed', POS_EMBED_TYPES)
def test_every_scheme_module_declares_the_protocol(pos_embed):
    """Each filled slot is a ``SchemeModule``: the hooks the mixin calls exist by declaration, never by ``hasattr``."""
    model = SimpleVisionTransformer(**TINY, pos_embed=pos_embed, device='meta')
    for slot in SLOTS:
        scheme = getattr(model, slot)
        assert scheme is None or isinstance(scheme, SchemeModule), (slot, type(scheme))
    assert 'hasattr' not in (PACKAGE / 'positions.py').read_text()


def test_a_scheme_overrides_only_the_hooks_it_needs():
    """The base's defaults: no cost to refuse, no bytes per pair, nothing to lay out, keep or regrid."""
    class Quiet(SchemeModule):
        pass

    scheme = Quiet()
    assert scheme.pair_bytes(4) == 0
    assert scheme.check_cost(10, [(2, 2)], 4, None, 'an image') is None
    assert scheme.prepare_rows(None, None, {}, {}, {}) is None
    assert scheme.set_grid_size((3, 3)) is None and scheme.keep_layers(1) is None


@pytest.mark.parametrize('rope_type', ROPE_TYPES)
def test_each_rope_type_is_a_row_of_the_table(rope_type):
    rope = create_rope(rope_type, 8, 2, 2, 100., ref_grid=4)
    assert isinstance(rope, RotaryScheme) and set(ROPE_FORMS) == set(ROPE_TYPES)
