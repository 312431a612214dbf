"""timm's block arrangements and attention options beyond the pre-norm ``Block``: q/k norm, RMSNorm, post-norm
residual blocks (``ResPostBlock``, Eva's ``EvaBlockPostNorm``), parallel blocks (``ParallelThingsBlock``,
``ParallelScalingBlock``) and differential attention (``DiffAttention``, ``DiffParallelScalingBlock``). Each timm
entry is built tiny with random weights (norms and biases too), saved with timm's ``save_for_hf``, converted by the
CLI, loaded back as a user does and held against timm's own forward at its grid and a non-square one; packed NaFlex
rows match each image run alone; what the family does not express is refused by name."""
import pytest
import timm
import torch
from timm.models import save_for_hf

from model_probes import load_like_user
from porting.cli import main
from timm_vit_variants import SimpleVisionTransformer, ViTVariantsError
from porting.pipeline import convert

TINY = dict(embed_dim=64, depth=2, num_heads=4)
TOL = 2e-5

# timm entry, extra model_args, the block kind it converts to, its attention
CASES = [
    ('vit_base_patch16_224', dict(qk_norm=True), 'vit', 'attention'),  # q/k LayerNorm per head
    ('test_vit4', {}, 'vit', 'attention'),  # RMSNorm everywhere
    ('vit_base_patch16_xp_224', {}, 'parallel_scaling', 'attention'),  # + RMSNorm, q/k norm, pre-norm, no qkv bias
    ('vit_base_patch16_rpn_224', {}, 'res_post', 'attention'),
    ('vit_small_patch16_18x2_224', {}, 'parallel', 'attention'),
    ('vit_pwee_patch16_reg1_gap_256', {}, 'parallel_scaling', 'attention'),
    ('vit_dlittle_patch16_reg1_gap_256', {}, 'vit', 'diff'),
    ('vit_dpwee_patch16_reg1_gap_256', {}, 'parallel_scaling', 'diff'),
    ('eva02_enormous_patch14_clip_224', {}, 'eva_post', 'attention'),
]


def _folder(tmp_path, arch, extra):
    args = dict(TINY, **extra)
    model = timm.create_model(arch, **args).eval()
    torch.manual_seed(0)
    for p in model.parameters():  # every weight random, norms and biases included
        torch.nn.init.normal_(p, mean=0.5 if p.ndim == 1 else 0., std=0.1)
    folder = tmp_path / 'src'
    save_for_hf(model, str(folder), model_args=args)
    return folder, model


@pytest.mark.parametrize('arch, extra, kind, attn', CASES, ids=[c[0] for c in CASES])
def test_a_timm_block_arrangement_converts_exactly(tmp_path, arch, extra, kind, attn, max_delta):
    folder, reference = _folder(tmp_path, arch, extra)
    assert main(['convert', str(folder), str(tmp_path / 'out')]) == 0
    ours = load_like_user(tmp_path / 'out')
    assert (ours.config.block.kind, ours.config.block.attn) == (kind, attn)
    size, patch = tuple(ours.patch_embed.img_size), tuple(ours.patch_embed.patch_size)
    for grid in (size, (size[0] + 2 * patch[0], size[1] - patch[1])):  # the stored grid, and a non-square one
        reference.set_input_size(img_size=grid)
        ours.set_input_size(img_size=grid)
        x = torch.randn(2, 3, *grid, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            max_delta(f'timm {arch} at {grid}, converted by the CLI and loaded back: logits', ours(x), reference(x),
                      TOL)


@pytest.mark.parametrize('kind, attn', [('res_post', 'attention'), ('parallel', 'attention'),
                                        ('parallel_scaling', 'diff'), ('eva_post', 'attention'), ('vit', 'diff')])
def test_packed_rows_of_each_block_kind_match_each_image_alone(kind, attn, max_delta):
    torch.manual_seed(0)
    model = SimpleVisionTransformer(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=0,
                                    block_type=kind, attn_layer=attn, class_token=True, pos_embed='learn').eval()
    images = [torch.randn(3, 32, 24), torch.randn(3, 16, 40)]
    with torch.no_grad():
        packed = model.forward_features(images)['patches']
        for i, image in enumerate(images):
            alone = model.forward_features(image[None])
            max_delta(f'{kind}/{attn}: image {i} in packed rows vs alone', packed[i, :alone.shape[1]], alone[0],
                      1e-5)


@pytest.mark.parametrize('options, key', [
    (dict(block_type='res_post', pos_embed='rope', rope_type='axial'), 'block_type'),
    (dict(attn_layer='diff', pos_embed='rope', rope_type='axial'), 'attn_layer'),
    (dict(block_type='parallel_scaling', mlp_layer='swiglu', act_layer='silu'), 'mlp_layer'),
    (dict(block_type='eva', attn_layer='diff'), 'attn_layer'),
    (dict(block_type='eva_post', qk_norm=True), 'qk_norm'),
    (dict(attn_layer='sparse'), 'attn_layer'),
])
def test_a_block_option_its_timm_class_lacks_is_refused_by_name(options, key):
    with pytest.raises(ViTVariantsError) as info:
        SimpleVisionTransformer(img_size=32, patch_size=8, embed_dim=64, depth=1, num_heads=4, **options)
    assert info.value.key == key, str(info.value)


def test_sapiens2_names_its_grouped_key_value_heads(tmp_path):
    """Sapiens 2 (timm's Eva with RoPE, RMSNorm, q/k norm, a packed SwiGLU and grouped-query attention) is refused,
    naming each part, grouped-query attention among them."""
    folder, _ = _folder(tmp_path, 'vit_base_patch16_sapiens2', dict(depth=1, num_kv_heads=2))
    with pytest.raises(ViTVariantsError) as info:
        convert(folder, tmp_path / 'out')
    message = str(info.value)
    assert info.value.key == 'architecture' and 'num_kv_heads' in message and "timm's RmsNorm" in message, message


def test_a_default_block_writes_no_new_field():
    """A config of the kinds that existed before writes neither ``attn`` nor ``attn_layer``: folders stay as they
    were."""
    model = SimpleVisionTransformer(img_size=32, patch_size=8, embed_dim=64, depth=1, num_heads=4)
    assert 'attn' not in model.config.to_dict()['block'] and 'attn_layer' not in model.config.to_flat()
