"""A resized conversion is checked at the target geometry too, against the source framework's own resize
rule written independently (porting/verification/rules.py), and says so plainly when no such rule exists."""
from pathlib import Path

import pytest

from porting.cli import main

import _porting_fixtures as F

REF = Path(__file__).resolve().parent / 'data' / 'reference'


def _convert(capsys, *argv):
    code = main(['convert', *map(str, argv)])
    out = capsys.readouterr()
    return code, out.out + out.err


@pytest.mark.parametrize('src,flags,rule_text', [
    (REF / 'vitjax_tiny.npz', ['--img-size', '48', '--patch-size', '6'], "big_vision's scipy zoom"),
    (REF / 'bigvision_sincos_gap.npz', ['--img-size', '32', '48'], 'numpy big_vision sin-cos'),
    (REF / 'flexivit_tiny.npz', ['--img-size', '240', '--patch-size', '48', '--resample-like', 'flexi'],
     "FlexiViT's jax.image.resize"),
])
def test_resized_output_is_checked_at_the_target_geometry(tmp_path, capsys, src, flags, rule_text):
    code, text = _convert(capsys, src, tmp_path / 'out', *flags)
    assert code == 0, text
    assert 'target geometry' in text and 'passed vs' in text.split('target geometry')[1] and rule_text in text
    card = (tmp_path / 'out' / 'README.md').read_text()
    assert 'target geometry' in card and rule_text in card


def test_a_wrong_kernel_resize_is_caught_at_the_target_geometry(tmp_path, capsys, monkeypatch):
    import timm.layers
    import timm_vit_variants.geometry as geometry

    # An antialiased PI-resize: plausible, and not big_vision's rule.
    monkeypatch.setattr(geometry, 'resample_patch_embed', lambda w, size, interpolation, antialias:
                        timm.layers.resample_patch_embed(w, size, interpolation='bicubic', antialias=True))
    code, text = _convert(capsys, REF / 'vitjax_tiny.npz', tmp_path / 'out', '--patch-size', '6')
    assert code == 1 and 'target geometry' in text and 'failed' in text
    assert not (tmp_path / 'out').exists()


def test_no_reference_rule_is_said_plainly(tmp_path, capsys):
    folder = F.write_hf_folder(tmp_path)
    code, text = _convert(capsys, folder, tmp_path / 'patch4', '--patch-size', '4')
    assert code == 0 and 'NOT checked: transformers has no rule for a patch-size change' in text
    assert 'NOT checked' in (tmp_path / 'patch4' / 'README.md').read_text()
    code, text = _convert(capsys, folder, tmp_path / 'img48', '--img-size', '48')
    assert code == 0 and 'with interpolate_pos_encoding' in text and 'NOT checked' not in text


def test_options_timm_cannot_express_are_said_plainly(tmp_path, capsys):
    """A folder with CPVT's position encoding has no timm equivalent to resize: reported as not checked, and why."""
    from porting.hub_folder import save_pretrained_folder
    from timm_vit_variants import SimpleVisionTransformer, SimpleViTConfig

    model = SimpleVisionTransformer(SimpleViTConfig.of(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=2,
                                                    num_classes=5, pos_embed='sincos+cpe'))
    save_pretrained_folder(model, tmp_path / 'src')
    code, text = _convert(capsys, tmp_path / 'src', tmp_path / 'out', '--img-size', '48')
    assert code == 0 and '(regenerated sin-cos)' in text
    assert "NOT checked: timm's VisionTransformer has no equivalent of pos_embed='sincos+cpe'" in text
