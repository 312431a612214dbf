"""BEiT's relative-position-table resize, reproduced without ``interp2d``, against tables resized by unilm's own
``run_class_finetuning.py`` under SciPy 1.13.1 (tests/data/reference_beit/relpos_tables.npz, see its README)."""
from pathlib import Path

import numpy as np
import pytest
import torch

from timm_vit_variants.errors import ViTVariantsError
from timm_vit_variants.relpos_resize import beit_resize_table, table_rows, timm_resize_table

DATA = Path(__file__).parent / 'data' / 'reference_beit'


def _cases():
    tables = np.load(DATA / 'relpos_tables.npz', allow_pickle=False)
    for key in sorted(k for k in tables.files if k.startswith('src_')):
        src, dst = (int(v) for v in key.split('_')[1::2])
        yield pytest.param(src, dst, tables[key], tables['dst_' + key[len('src_'):]], id=f'{src}to{dst}')


@pytest.mark.parametrize('src,dst,table,want', list(_cases()))
def test_beit_rule_is_bitwise_unilm(src, dst, table, want, max_delta):
    got = beit_resize_table(torch.from_numpy(table), (src, src), (dst, dst))
    assert got.dtype == torch.float32 and tuple(got.shape) == (table_rows((dst, dst)), table.shape[1])
    max_delta(f'beit table resize {src}->{dst}', got, want, 0.0)
    assert np.array_equal(got.numpy(), want)  # the same FITPACK calls interp2d made: the same bits
    assert np.array_equal(got[-3:].numpy(), table[-3:])  # the [CLS] rows are kept


@pytest.mark.parametrize('name', ['beit2_ft_meanpool', 'beit_ft_abs_cls', 'beit2_pt_shared'])
def test_model_fixture_tables_are_the_rule(name):
    """The tables unilm's fine-tuning route loaded into its models at 8x8 and 4x4 are this rule on the file's."""
    state = torch.load(DATA / f'{name}.pth', weights_only=True)['model']
    io = np.load(DATA / f'{name}_io.npz', allow_pickle=False)
    for layer in range(2):
        table = state.get(f'blocks.{layer}.attn.relative_position_bias_table',
                          state.get('rel_pos_bias.relative_position_bias_table'))
        for g in (6, 8, 4):
            got = beit_resize_table(table, (6, 6), (g, g))
            assert np.array_equal(got.numpy(), io[f'tables_{g}x{g}'][layer]), (name, layer, g)


def test_same_grid_is_unchanged_and_timm_rule_is_timms():
    from timm.layers import resize_rel_pos_bias_table

    table = torch.randn(table_rows((4, 4)), 2, generator=torch.Generator().manual_seed(0))
    assert beit_resize_table(table, (4, 4), (4, 4)) is table
    assert beit_resize_table(table.to('meta'), (4, 4), (6, 6)).shape == (table_rows((6, 6)), 2)
    want = resize_rel_pos_bias_table(table, (6, 3), (table_rows((6, 3)), 2), old_window_size=(4, 4))
    assert torch.equal(timm_resize_table(table, (4, 4), (6, 3)), want)


@pytest.mark.parametrize('src,dst', [((4, 4), (6, 3)), ((4, 5), (6, 6))])
def test_non_square_is_outside_beits_rule(src, dst):
    table = torch.zeros(table_rows(src), 2)
    with pytest.raises(ViTVariantsError, match='non-square.*--resample-like timm'):
        beit_resize_table(table, src, dst)


def test_wrong_row_count_is_refused():
    with pytest.raises(ViTVariantsError, match='52 rows'):
        beit_resize_table(torch.zeros(50, 2), (4, 4), (6, 6))
    with pytest.raises(ViTVariantsError, match='52 rows'):
        timm_resize_table(torch.zeros(52, 2, 1), (4, 4), (6, 6))
