"""The SigLIP towers inside Idefics2, Idefics3 and SmolVLM: a transformers ``Idefics3VisionTransformer`` or
``SmolVLMVisionTransformer`` folder, and the tower of the full models (``Idefics2Model``,
``Idefics3ForConditionalGeneration``), each tiny with random weights, converts, verified against the class itself,
and the converted folder, loaded as a user loads it, gives the tower's tokens for a whole image with an all-true patch
mask at the stored grid, a larger one and a non-square one (the 'bucketed' scheme reads the stored table for each);
the scheme's rows are the towers' own position ids at every grid, a padded batch's valid patches are each image's
tokens alone, and what is not expressed is refused by name."""
import json
from pathlib import Path

import pytest
import torch

from model_probes import load_like_user, weight_decay_of
from porting.cli import main
from timm_vit_variants.families.idefics_positions import bucket_rows
from timm_vit_variants.posemb import grid_coords

transformers = pytest.importorskip('transformers')

STORED = (16, 16)  # a 4x4 grid of 4-pixel patches
GRIDS = (STORED, (24, 24), (12, 20))  # the stored grid, a larger one, a non-square one
BOUND = 2e-5
_VISION = dict(image_size=16, patch_size=4, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
               intermediate_size=32)
_TEXT = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, vocab_size=64,
             max_position_embeddings=8)
_PERCEIVER = dict(hidden_size=16, resampler_n_latents=4, resampler_depth=1, resampler_n_heads=2,
                  resampler_head_dim=8, num_key_value_heads=1)


def _idefics3_vision():
    return transformers.Idefics3VisionTransformer(transformers.Idefics3VisionConfig(**_VISION))


def _smolvlm_vision():
    return transformers.SmolVLMVisionTransformer(transformers.SmolVLMVisionConfig(**_VISION))


def _idefics2_model():
    return transformers.Idefics2Model(transformers.Idefics2Config(vision_config=_VISION, text_config=_TEXT,
                                                                  perceiver_config=_PERCEIVER))


def _idefics3_generation():
    return transformers.Idefics3ForConditionalGeneration(transformers.Idefics3Config(vision_config=_VISION,
                                                                                     text_config=_TEXT))


# name -> (builder, the image tower inside what it builds)
TOWERS = {'Idefics3VisionTransformer': (_idefics3_vision, lambda m: m),
          'SmolVLMVisionTransformer': (_smolvlm_vision, lambda m: m),
          'Idefics2Model': (_idefics2_model, lambda m: m.vision_model),
          'Idefics3ForConditionalGeneration': (_idefics3_generation, lambda m: m.model.vision_model)}


def _folder(path: Path, name: str):
    """A tiny ``name`` with every weight moved off its init (the norms' too), saved to ``path``; its image tower."""
    build, tower = TOWERS[name]
    torch.manual_seed(0)
    model = build().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(str(path))
    return tower(model)


def _whole(tower, x: torch.Tensor) -> torch.Tensor:
    """The tower's tokens for whole images ``x``: an all-true patch mask."""
    mask = torch.ones(x.shape[0], x.shape[2] // 4, x.shape[3] // 4, dtype=torch.bool)
    with torch.no_grad():
        return tower(pixel_values=x, patch_attention_mask=mask).last_hidden_state


@pytest.fixture(scope='module', params=list(TOWERS))
def converted(request, tmp_path_factory):
    """(the class name, its image tower, the converted folder), converted by the CLI with its verification."""
    root = tmp_path_factory.mktemp(request.param)
    tower = _folder(root / 'src', request.param)
    assert main(['convert', str(root / 'src'), str(root / 'out')]) == 0
    return request.param, tower, root / 'out'


def test_convert_verifies_against_the_class(converted, capsys, tmp_path):
    """The CLI's verification ran the class itself on its tower, and notes the bucketed table."""
    name, _, folder = converted
    assert main(['convert', str(folder.parent / 'src'), str(tmp_path / 'out')]) == 0
    out, err = capsys.readouterr()
    assert f'verification passed vs transformers {name}.from_pretrained' in out
    assert "the 'bucketed' scheme" in err


@pytest.mark.parametrize('size', GRIDS)
def test_converted_folder_gives_the_tower_tokens_at_three_grids(converted, size, max_delta):
    """Loaded as a user loads it, the folder gives the tower's tokens for a whole image of that size (its table
    bucketed into that grid by the tower itself)."""
    name, tower, folder = converted
    x = torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        tokens = load_like_user(folder).forward_features(x)
    max_delta(f'{name} tokens {size}', tokens, _whole(tower, x), BOUND)


@pytest.mark.parametrize('side', [7, 26, 70])
def test_bucketed_rows_are_the_tower_position_ids(side):
    """At every row count and column count up to twice the table's side (and some), each patch's row is the one the
    tower's embeddings give it (read off a tower whose table row r holds r and whose patch conv is zero). Sides 26
    and 70 (Idefics3's and Idefics2's grids) have grids where the float32 bucketing differs from exact floor(i n / h)
    and from nearest-neighbour resizing, so only the towers' own arithmetic passes."""
    config = transformers.Idefics3VisionConfig(image_size=side, patch_size=1, hidden_size=1)
    embeddings = transformers.models.idefics3.modeling_idefics3.Idefics3VisionEmbeddings(config)
    last = 2 * side + 8
    with torch.no_grad():
        embeddings.patch_embedding.weight.zero_()
        embeddings.patch_embedding.bias.zero_()
        embeddings.position_embedding.weight.copy_(torch.arange(side * side, dtype=torch.float32)[:, None])
        for h in range(1, last):
            w = last - h  # every row count, and every column count, once
            ids = embeddings(torch.zeros(1, 3, h, w), torch.ones(1, h, w, dtype=torch.bool))[0, :, 0].long()
            rows = bucket_rows(grid_coords(h, w), torch.tensor([[h, w]]), side)
            assert torch.equal(rows, ids), (side, h, w)


def test_padded_batch_valid_patches_are_each_image_alone(converted, max_delta):
    """A batch the tower pads (a patch mask marking each image's valid patches) gives, on those patches, what the
    converted model gives a list of the images at their own sizes."""
    name, tower, folder = converted
    sizes = ((16, 16), (12, 20))
    generator = torch.Generator().manual_seed(2)
    images = [torch.randn(3, *s, generator=generator) for s in sizes]
    padded = torch.zeros(2, 3, 16, 20)
    mask = torch.zeros(2, 4, 5, dtype=torch.bool)
    for i, (image, (h, w)) in enumerate(zip(images, sizes)):
        padded[i, :, :h, :w] = image
        mask[i, :h // 4, :w // 4] = True
    with torch.no_grad():
        theirs = tower(pixel_values=padded, patch_attention_mask=mask).last_hidden_state
        laid = load_like_user(folder).forward_features(images)
    for i, (h, w) in enumerate(sizes):
        valid = theirs[i].reshape(4, 5, -1)[:h // 4, :w // 4].reshape((h // 4) * (w // 4), -1)
        max_delta(f'{name} padded image {i} ({h}x{w})', laid['patches'][i, :valid.shape[0]], valid, BOUND)


def test_another_nominal_grid_is_refused(tmp_path, capsys):
    """The table is read at its stored grid for every input, so a conversion to another nominal grid (which would
    resize it) is refused: one error line naming the table, no folder written."""
    _folder(tmp_path / 'src', 'Idefics3VisionTransformer')
    capsys.readouterr()
    assert main(['convert', str(tmp_path / 'src'), str(tmp_path / 'out'), '--img-size', '24']) == 1
    err = capsys.readouterr().err
    assert err.count('error:') == 1 and 'Traceback' not in err and 'abs_pos.table' in err
    assert not (tmp_path / 'out').exists()


def test_full_model_without_vision_config_is_refused(tmp_path, capsys):
    """A full model's config.json without its vision_config: one error line naming the file and the key."""
    _folder(tmp_path / 'src', 'Idefics2Model')
    config_path = tmp_path / 'src' / 'config.json'
    config = json.loads(config_path.read_text())
    del config['vision_config']
    config_path.write_text(json.dumps(config))
    capsys.readouterr()
    assert main(['convert', str(tmp_path / 'src'), str(tmp_path / 'out')]) == 1
    err = capsys.readouterr().err
    assert err.count('error:') == 1 and 'Traceback' not in err and 'vision_config' in err and 'config.json' in err


def test_the_table_is_kept_out_of_weight_decay(converted):
    """timm's optimizer factory leaves the bucketed table undecayed, as it does a learned ``pos_embed``."""
    model = load_like_user(converted[2])
    assert weight_decay_of(model, model.abs_pos.table) == 0.
    assert weight_decay_of(model, model.blocks[0].attn.qkv.weight) == 0.05
