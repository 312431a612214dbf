"""timm's relative-position ViTs (``vision_transformer_relpos``), built tiny by timm with random weights (the bias
MLPs' too), saved with timm's ``save_for_hf`` (or as a bare state dict), converted by the CLI, loaded back as a user
does, and compared with timm's own forward at the stored grid and, after timm's ``set_input_size``, at a
non-square one (the post-norm ``*_rpn_*`` entries as the 'res_post' block kind); the table bias is refused by name."""
import pytest
import timm
import torch
from timm.models import save_for_hf

from model_probes import load_like_user
from porting.cli import main
from timm_vit_variants import ViTVariantsError

TINY = dict(embed_dim=64, depth=2, num_heads=4, img_size=64)
TOL = 2e-5
GRIDS = ((64, 64), (96, 48))  # the stored 4x4 grid, and a non-square 6x3 one

# architecture, extra model_args: each converts exactly
CONVERTS = [
    ('test_vit_relpos', {}),  # fc_norm, no qkv bias
    ('vit_relpos_small_patch16_224', {}),
    ('vit_relpos_medium_patch16_224', {}),
    ('vit_relpos_base_patch16_224', {}),
    ('vit_relpos_base_patch16_plus_240', {}),  # qkv bias, the final norm on every token
    ('vit_relpos_medium_patch16_cls_224', {}),  # [CLS] pooling, hidden width 256
    ('vit_relpos_base_patch16_cls_224', {}),
    ('vit_relpos_base_patch16_clsgap_224', {}),  # a [CLS] beside average pooling with fc_norm
    ('vit_srelpos_small_patch16_224', {}),  # one shared MLP, hidden width 384
    ('vit_srelpos_medium_patch16_224', {}),
    ('vit_relpos_small_patch16_224', dict(rel_pos_type='mlp_swin')),  # Swin-v2's coordinates, 16 * sigmoid
    ('vit_relpos_medium_patch16_cls_224', dict(rel_pos_type='mlp_swin', shared_rel_pos=True)),
    ('vit_relpos_small_patch16_rpn_224', {}),  # post-norm blocks (timm's ResPostRelPosBlock: the 'res_post' kind)
    ('vit_relpos_base_patch32_plus_rpn_256', {}),
]
# architecture, extra model_args, what the refusal names
REFUSED = [
    ('vit_relpos_small_patch16_224', dict(rel_pos_type='bias'), "blocks.0.attn.rel_pos (timm's RelPosBias"),
    ('vit_relpos_small_patch16_224', dict(qk_norm=True), 'has qk_norm'),
]


def _timm(arch, extra):
    args = dict(TINY, **extra)
    model = timm.create_model(arch, **args).eval()
    torch.manual_seed(0)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.2)
    return model, args


def _convert(src, out, capsys, *options):
    rc = main(['convert', str(src), str(out), *options])
    captured = capsys.readouterr()
    return rc, captured.out + captured.err


def _compare(max_delta, what, ours, reference):
    """ours against timm at each grid: timm after its ``set_input_size``, ours as it is and after its own."""
    for grid in GRIDS:
        reference.set_input_size(img_size=grid)
        x = torch.randn(2, 3, *grid, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            expected = reference(x)
            max_delta(f'{what} at {grid}: logits', ours(x), expected, TOL)
            ours.set_input_size(img_size=grid)
            max_delta(f'{what} at {grid} after set_input_size: logits', ours(x), expected, TOL)
            max_delta(f'{what} at {grid}: features', ours.forward_features(x), reference.forward_features(x), TOL)


@pytest.mark.parametrize('arch, extra', CONVERTS, ids=[f'{a}-{i}' for i, (a, _) in enumerate(CONVERTS)])
def test_a_relpos_folder_converts_exactly_at_any_grid(tmp_path, capsys, arch, extra, max_delta):
    reference, args = _timm(arch, extra)
    save_for_hf(reference, str(tmp_path / 'src'), model_args=args)
    rc, err = _convert(tmp_path / 'src', tmp_path / 'out', capsys)
    assert rc == 0, err
    _compare(max_delta, f'timm {arch} {extra} folder, converted and loaded as a user does', load_like_user(
        tmp_path / 'out'), reference)


@pytest.mark.parametrize('arch, extra', [CONVERTS[1], CONVERTS[8], CONVERTS[10]], ids=['per-block', 'shared', 'swin'])
def test_a_bare_relpos_state_dict_converts_exactly(tmp_path, capsys, arch, extra, max_delta):
    reference, _ = _timm(arch, extra)
    torch.save(reference.state_dict(), tmp_path / 'relpos.pth')
    rc, err = _convert(tmp_path / 'relpos.pth', tmp_path / 'out', capsys)
    assert rc == 0, err
    assert "architecture='VisionTransformerRelPos'" in err and 'img_size=224' in err  # said to be assumed
    ours = load_like_user(tmp_path / 'out')
    assert tuple(ours.patch_embed.img_size) == (224, 224)
    _compare(max_delta, f'timm {arch} {extra} state dict, converted', ours, reference)


def test_a_conversion_to_a_non_square_grid_is_checked_against_timms_set_input_size(tmp_path, capsys, max_delta):
    reference, args = _timm('vit_srelpos_small_patch16_224', {})
    save_for_hf(reference, str(tmp_path / 'src'), model_args=args)
    rc, said = _convert(tmp_path / 'src', tmp_path / 'out', capsys, '--img-size', '96', '48')
    assert rc == 0 and 'target geometry (96x48, patch 16) passed' in said and 'set_input_size' in said, said
    ours = load_like_user(tmp_path / 'out')
    assert tuple(ours.patch_embed.img_size) == (96, 48)
    reference.set_input_size(img_size=(96, 48))
    x = torch.randn(2, 3, 96, 48, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        max_delta('timm vit_srelpos folder converted to 96x48: logits', ours(x), reference(x), TOL)


@pytest.mark.parametrize('arch, extra, part', REFUSED, ids=[f'{a}-{i}' for i, (a, _, _) in enumerate(REFUSED)])
def test_what_the_relpos_family_does_not_express_is_refused_by_name(tmp_path, capsys, arch, extra, part):
    reference, args = _timm(arch, extra)
    save_for_hf(reference, str(tmp_path / 'src'), model_args=args)
    rc, err = _convert(tmp_path / 'src', tmp_path / 'out', capsys)
    lines = [line for line in err.splitlines() if line.startswith('error:')]
    assert rc != 0 and len(lines) == 1 and 'Traceback' not in err, err
    assert part in lines[0] and "key 'architecture'" in lines[0], lines[0]


def test_a_post_norm_state_dict_without_layer_scale_is_refused_by_name(tmp_path, capsys):
    reference, _ = _timm('vit_relpos_small_patch16_rpn_224', {})
    torch.save(reference.state_dict(), tmp_path / 'relpos.pth')
    rc, err = _convert(tmp_path / 'relpos.pth', tmp_path / 'out', capsys)
    lines = [line for line in err.splitlines() if line.startswith('error:')]
    assert rc != 0 and len(lines) == 1 and 'ResPostRelPosBlock' in lines[0] and 'blocks.0.ls1.gamma' in lines[0], err


@pytest.fixture(scope='module')
def converted(tmp_path_factory):
    """Converted models (no verification: the tests compare them), by case: per-block 'cr' with a [CLS], shared
    'swin'; each beside its timm reference."""
    models = {}
    for name, arch, extra in (('cls', 'vit_relpos_medium_patch16_cls_224', {}),
                              ('swin', 'vit_srelpos_small_patch16_224', dict(rel_pos_type='mlp_swin'))):
        root = tmp_path_factory.mktemp(name)
        reference, args = _timm(arch, extra)
        save_for_hf(reference, str(root / 'src'), model_args=args)
        assert main(['convert', str(root / 'src'), str(root / 'out'), '--no-verify']) == 0
        models[name] = load_like_user(root / 'out'), reference
    return models


def test_a_grid_timm_divides_by_zero_on_is_refused_by_name(converted):
    ours, _ = converted['swin']
    with pytest.raises(ViTVariantsError, match=r"'swin' relative coordinates divide by \(side - 1\).*1x4 grid"):
        ours(torch.randn(1, 3, 16, 64))
    with pytest.raises(ViTVariantsError, match=r'1x4 grid'):
        ours([torch.randn(3, 64, 64), torch.randn(3, 16, 64)])


@pytest.mark.parametrize('case', ['cls', 'swin'])
def test_packed_images_of_several_grids_each_get_what_timm_gives_them_alone(converted, case, max_delta):
    ours, reference = converted[case]
    images = [torch.randn(3, *size, generator=torch.Generator().manual_seed(i))
              for i, size in enumerate(((64, 64), (96, 48), (32, 80)))]
    with torch.no_grad():
        packed = ours(images)
        for i, image in enumerate(images):
            reference.set_input_size(img_size=tuple(image.shape[1:]))
            max_delta(f'{case}: image {i} ({tuple(image.shape[1:])}) packed beside others: logits', packed[i],
                      reference(image[None])[0], TOL)


def test_a_converted_relpos_model_scripts_and_keeps_its_numbers(converted, max_delta):
    ours, reference = converted['cls']
    reference.set_input_size(img_size=(96, 48))
    x = torch.randn(2, 3, 96, 48, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        max_delta('TorchScript of a converted vit_relpos at 96x48: logits', torch.jit.script(ours)(x), reference(x),
                  TOL)
