"""timm folders of many architectures, built tiny by timm itself and saved with its ``save_for_hf``: each converts
exactly (verified against timm, and loaded back as a user does) or is refused with one error naming the timm part
this family does not express and where it sits (timm_parts.refuse_unexpressed), never an internal error text."""
import pytest
import timm
import torch
from timm.models import save_for_hf

from timm_vit_variants import ViTVariantsError
from model_probes import load_like_user
from porting.pipeline import convert

TINY = dict(embed_dim=64, depth=1, num_heads=4)
TOL = 1e-5

# architecture, extra model_args, what the refusal names (None: converts exactly)
CASES = [
    ('vit_little_patch16_reg1_gap_256', {}, None),  # LayerScale, a register, avg pooling with fc_norm
    ('eva_giant_patch14_224', {}, None),  # EVA-01: timm's Eva, q/v-only bias, no RoPE, avg pooling with fc_norm
    ('eva_giant_patch14_clip_224', {}, None),  # the same with token pooling
    ('vit_base_patch16_rpn_224', {}, None),  # post-norm residual blocks (timm's ResPostBlock)
    ('aimv2_large_patch14_224', {}, None),  # AIMv2: SwiGLU, RMSNorm, a patch norm; the AIMv2 family reads it
    ('vit_small_patch16_18x2_224', {}, None),  # timm's ParallelThingsBlock
    ('vit_base_patch16_xp_224', dict(qk_norm=False), None),  # timm's ParallelScalingBlock, RMSNorm
    ('vit_dlittle_patch16_reg1_gap_256', {}, None),  # timm's DiffAttention
    ('samvit_base_patch16_224', {}, None),  # SAM's encoder: windowed attention, decomposed rel-pos; the SAM family
    ('vit_relpos_small_patch16_224', {}, None),  # relative-position MLP biases: the vit_relpos family reads it
    ('eva02_base_patch16_clip_224', {}, None),  # EVA-02 CLIP: the attention's and MLP's sub-LNs, split q/k/v
    ('eva02_enormous_patch14_clip_224', {}, None),  # timm's EvaBlockPostNorm
    ('beit3_base_patch16_224', {}, None),  # BEiT-3 (timm's VisionTransformer): the sub-LNs in attention and MLP
    ('vit_medium_patch16_rope_reg1_gap_256', {}, None),  # EVA-02's RoPE (a reference grid), a register, no [CLS]
    ('vit_small_patch16_lingbot', {}, None),  # DINOv3's RoPE under another name: [CLS] and registers
    ('vit_intern300m_patch14_448', {}, None),  # no final norm, LayerScale
    ('vit_base_patch16_radio_v3', {}, None),  # no final norm, [CLS] + 7 registers
    ('vit_so150m_patch16_reg4_gap_256', {}, None),  # registers with rows in the table, no [CLS]
    ('vit_so150m_patch16_reg4_map_256', {}, None),  # MAP over the patch tokens alone, beside 4 registers
    ('vit_pe_spatial_base_patch16_512', {}, None),  # Perception Encoder: PE's RoPE (the pe family)
    ('vit_pe_core_base_patch16_224', {}, None),  # and its MAP head with the projection
    ('naflexvit_base_patch16_gap', {}, None),  # NaFlexVit with [CLS] and registers (no table rows), avg pooling
    ('naflexvit_base_patch16_map', {}, 'pools by MAP beside prefix tokens'),
    ('naflexvit_base_patch16_par_gap', {}, None),  # its table resized from the square of the longer side
    ('naflexvit_base_patch16_gap', dict(pos_embed_use_grid_sample=True), 'resizes its table by grid_sample'),
]


def _folder(tmp_path, arch, extra):
    args = dict(TINY, **extra)
    model = timm.create_model(arch, **args).eval()
    torch.manual_seed(0)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.1)
    folder = tmp_path / arch
    save_for_hf(model, str(folder), model_args=args)
    return folder, model


@pytest.mark.parametrize('arch, extra, part', CASES, ids=[f'{a}-{i}' for i, (a, _, _) in enumerate(CASES)])
def test_a_timm_architecture_converts_exactly_or_names_the_part(tmp_path, arch, extra, part, max_delta):
    folder, reference = _folder(tmp_path, arch, extra)
    if part is not None:
        with pytest.raises(ViTVariantsError) as info:
            convert(folder, tmp_path / 'out')
        message = str(info.value)
        assert part in message and info.value.key == 'architecture', message
        assert 'AttributeError' not in message and 'object has no attribute' not in message
        assert str(folder / 'config.json') in message and len(message.splitlines()) == 1
        return
    result = convert(folder, tmp_path / 'out')
    assert result.verification.status == 'passed', result.verification.summary()
    ours = load_like_user(tmp_path / 'out')
    size, patch = tuple(ours.patch_embed.img_size), tuple(ours.patch_embed.patch_size)
    for grid in (size, (size[0] + 2 * patch[0], size[1] - patch[1])):  # the stored grid, and a non-square one
        if hasattr(reference, 'set_input_size'):  # a NaFlexVit takes any size as it is
            reference.set_input_size(img_size=grid)
        ours.set_input_size(img_size=grid)
        x = torch.randn(2, 3, *grid, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            max_delta(f'timm {arch} folder at {grid}, converted and loaded as a user does: logits', ours(x),
                      reference(x), TOL)
