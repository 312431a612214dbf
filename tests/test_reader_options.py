"""``ReaderOptions``: the caller's facts about a source, checked once where ``open_checkpoint`` builds them."""
import pytest

from timm_vit_variants.checkpoints import HINTS, ReaderOptions, open_checkpoint
from timm_vit_variants.errors import ViTVariantsError


def test_hints_are_the_option_fields():
    assert HINTS == ('prefix', 'img_size', 'num_heads', 'assume_heads', 'act_layer', 'norm_eps', 'pos_embed',
                     'use_ema', 'in_chans')


def test_none_means_not_given():
    options = ReaderOptions.of(prefix=None, use_ema=None, num_heads=6)
    assert options == ReaderOptions(num_heads=6)
    assert options.use_ema is True and options.assume_heads is False and options.prefix is None


def test_an_unknown_hint_is_a_callers_bug(tmp_path):
    with pytest.raises(TypeError, match=r"unknown checkpoint hint\(s\) \['heads'\]"):
        open_checkpoint(tmp_path, heads=6)


def test_a_bad_pos_embed_is_refused_before_any_file_is_read(tmp_path):
    with pytest.raises(ViTVariantsError, match="pos_embed hint must be 'sincos', 'none' or 'learn', got 'rope'"):
        open_checkpoint(tmp_path / 'absent.pth', pos_embed='rope')


def test_options_are_frozen():
    with pytest.raises(AttributeError):
        ReaderOptions().prefix = 'x'  # type: ignore[misc]
    assert ReaderOptions(prefix='a.').with_prefix('b.').prefix == 'b.'
