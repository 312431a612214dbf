"""The position-scheme interface: one registry fills the slots from ``pos_embed``, saved keys stay as they were, and
the embedding step, block loop and packed-row loop reach the schemes only through ``PositionsMixin``."""
import ast
from pathlib import Path

import pytest

from timm_vit_variants import SimpleVisionTransformer
from timm_vit_variants.config import POS_EMBED_TYPES
from timm_vit_variants.positions import SLOTS

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
