"""timm's Qwen3 vision towers (``timm.models.qwen3_vit``), each kind built tiny by timm with random weights (its
learned table included) and saved with ``save_for_hf``: a classifier (mean pool, a LayerNorm without affine
parameters, the head) and an encoder (its VLM projector left out: the tower's tokens; with ``global_pool='avg'`` their
mean) convert with the CLI, verified against timm, and the folder, loaded as a user loads it, gives what timm's model
gives at the stored grid, a larger square one and a non-square one (timm stretches its table and makes its RoPE for
each input), and so does a classifier's exported program; a list of images of different sizes gives each image's
tokens alone. A ``_merge`` classifier (it pools the projector's tokens), another RoPE base and another nominal grid are
refused by name, one error line each."""
import json
from pathlib import Path

import pytest
import timm
import torch
from timm.models import save_for_hf

from model_probes import load_like_user, weight_decay_of
from porting.cli import main

TINY = dict(embed_dim=64, depth=2, num_heads=4, img_size=96, pos_embed_grid_size=6)  # 6x6 grid of 16-pixel patches
GRIDS = ((96, 96), (128, 128), (64, 112))  # the stored grid, a larger square one, a non-square one
BOUND = 2e-5
# name -> (architecture, extra model_args)
KINDS = {
    'classifier': ('qwen3_vit_88m', dict(num_classes=5)),
    'encoder': ('qwen3_vit_88m_enc', dict(out_features=24)),
    'encoder_avg': ('qwen3_vit_306m_enc', dict(out_features=24, global_pool='avg')),
}


def _timm_folder(path: Path, arch: str, **extra) -> torch.nn.Module:
    """timm's model of ``arch``, tiny, every parameter random (the table too), saved as timm saves it."""
    args = dict(TINY, **extra)
    model = timm.create_model(arch, **args).eval()
    torch.manual_seed(0)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.1)
    save_for_hf(model, str(path), model_args=args)
    return model


@pytest.fixture(scope='module', params=sorted(KINDS))
def converted(request, tmp_path_factory):
    """(kind, timm's model, the converted folder), converted by the CLI with its verification."""
    root = tmp_path_factory.mktemp(request.param)
    arch, extra = KINDS[request.param]
    model = _timm_folder(root / 'src', arch, **extra)
    assert main(['convert', str(root / 'src'), str(root / 'out')]) == 0
    return request.param, model, root / 'out'


def test_convert_verifies_against_timm(converted):
    """The conversion's check ran timm's own model of the folder and passed."""
    _, _, folder = converted
    verification = json.loads((folder / 'config.json').read_text())['conversion']['verification']
    assert verification['status'] == 'passed' and 'local-dir' in verification['reference'], verification


@pytest.mark.parametrize('size', GRIDS, ids=['stored', 'square', 'non-square'])
def test_converted_folder_gives_timm_outputs_at_three_grids(converted, size, max_delta):
    """The tower's tokens (timm's forward_features) and the model's output (a classifier's logits, an 'avg' encoder's
    mean of the tokens) at each grid, as timm's model gives them for that input."""
    kind, model, folder = converted
    ours = load_like_user(folder)
    x = torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(1))
    tower = getattr(model, 'encoder', model)
    with torch.no_grad():
        theirs = tower.forward_features(x).flatten(1, 2)
        max_delta(f'{kind} tokens at {size}', ours.forward_features(x), theirs, BOUND)
        if kind != 'encoder':  # the encoder's own output is its projector's, which is left out
            max_delta(f'{kind} output at {size}', ours(x), model(x), BOUND)


def test_images_of_different_sizes_are_each_read_alone(converted, max_delta):
    """A list of images at their own sizes gives each one's tokens as timm gives that image alone (the table is
    stretched to each image's grid, the RoPE made for it)."""
    kind, model, folder = converted
    generator = torch.Generator().manual_seed(2)
    images = [torch.randn(3, *size, generator=generator) for size in GRIDS]
    tower = getattr(model, 'encoder', model)
    with torch.no_grad():
        laid = load_like_user(folder).forward_features(images)
        for i, image in enumerate(images):
            theirs = tower.forward_features(image[None])[0].flatten(0, 1)
            max_delta(f'{kind} image {i} of a list', laid['patches'][i, :theirs.shape[0]], theirs, BOUND)


def test_nominal_size_other_than_the_table_converts_exactly(tmp_path, capsys, max_delta):
    """timm's img_size is nominal only; the converted model's is the table's grid, said in a note, and it gives what
    timm's gives at any input size."""
    model = _timm_folder(tmp_path / 'src', 'qwen3_vit_88m', num_classes=5, img_size=64)
    assert main(['convert', str(tmp_path / 'src'), str(tmp_path / 'out')]) == 0
    said = capsys.readouterr()
    assert 'nominal only' in said.out + said.err
    ours = load_like_user(tmp_path / 'out')
    assert tuple(ours.patch_embed.img_size) == (96, 96)
    x = torch.randn(2, 3, 64, 80, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        max_delta('classifier of nominal size 64 at 64x80', ours(x), model(x), BOUND)


def _refused(tmp_path, capsys, arch: str, *options: str, **extra) -> str:
    _timm_folder(tmp_path / 'src', arch, **extra)
    capsys.readouterr()
    assert main(['convert', str(tmp_path / 'src'), str(tmp_path / 'out'), *options]) == 1
    err = capsys.readouterr().err
    assert err.count('error:') == 1 and 'Traceback' not in err, err
    assert not (tmp_path / 'out').exists()
    return err


def test_merge_classifier_is_refused_naming_the_projector(tmp_path, capsys):
    """A ``_merge`` classifier pools the VLM projector's tokens: refused, naming the architecture key, the projector
    and the entry that converts."""
    err = _refused(tmp_path, capsys, 'qwen3_vit_88m_merge', num_classes=5, out_features=24)
    assert "key 'architecture'" in err and 'encoder.merger' in err and '_enc' in err, err


def test_another_rope_base_is_refused(tmp_path, capsys):
    err = _refused(tmp_path, capsys, 'qwen3_vit_88m_enc', out_features=24, rope_temperature=100.)
    assert "key 'architecture'" in err and 'RoPE base of 100' in err, err


def test_another_nominal_grid_is_refused(tmp_path, capsys):
    """The table is stretched from its stored grid for every input, so a conversion to another nominal grid (which
    would resize it once more) is refused, naming the table."""
    err = _refused(tmp_path, capsys, 'qwen3_vit_88m', '--img-size', '128', num_classes=5)
    assert 'abs_pos.table' in err, err


def test_exported_program_gives_timm_outputs_at_three_grids(tmp_path, max_delta):
    """``vit-port export``'s dynamic .pt2 of a converted classifier stretches the table in the graph at each input
    size (the stored one too), as timm's model does."""
    model = _timm_folder(tmp_path / 'src', 'qwen3_vit_88m', num_classes=5)
    assert main(['convert', str(tmp_path / 'src'), str(tmp_path / 'out')]) == 0
    assert main(['export', str(tmp_path / 'out'), str(tmp_path / 'model.pt2')]) == 0
    program = torch.export.load(str(tmp_path / 'model.pt2')).module()
    for size in GRIDS:
        x = torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(4))
        with torch.no_grad():
            max_delta(f'exported classifier at {size}', program(x), model(x), BOUND)


def test_weights_the_recorded_architecture_does_not_build_are_refused(tmp_path, capsys):
    """A config.json recording one more block than the weights hold: refused, naming the missing tensor."""
    _timm_folder(tmp_path / 'src', 'qwen3_vit_88m', num_classes=5)
    config = tmp_path / 'src' / 'config.json'
    recorded = json.loads(config.read_text())
    recorded['model_args']['depth'] = 3
    config.write_text(json.dumps(recorded))
    capsys.readouterr()
    assert main(['convert', str(tmp_path / 'src'), str(tmp_path / 'out')]) == 1
    err = capsys.readouterr().err
    assert err.count('error:') == 1 and "key 'encoder.blocks.2." in err and 'no such tensor' in err, err


def test_the_table_is_kept_out_of_weight_decay(converted):
    """timm's optimizer factory leaves the stretched table undecayed, as it does a learned ``pos_embed``."""
    model = load_like_user(converted[2])
    assert weight_decay_of(model, model.abs_pos.table) == 0.
    assert weight_decay_of(model, model.blocks[0].attn.qkv.weight) == 0.05
