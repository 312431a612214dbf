"""OpenAI CLIP files in OpenAI's own forms: the state dict (``.pt``, ``.pth``, ``.bin``; fp16 as OpenAI's
``convert_weights`` leaves it, or fp32) with the ``input_resolution``, ``context_length`` and ``vocab_size`` scalars
that only OpenAI's files hold, and the TorchScript archive. Each is converted with ``vit-port convert``, loaded the way
the README tells users, and compared with open_clip's own OpenAI path at the stored grid and at a resized one.

The tiny models are open_clip's ``CLIP`` (QuickGELU, width 128 so that OpenAI's width // 64 rule gives 2 heads);
their ``state_dict()`` names are OpenAI's (checked against the archive OpenAI's ``clip/model.py`` wrote,
tests/data/reference_clip/README.md). The scalars are 0-d int64 tensors, as in that archive's ``state_dict()``,
from which OpenAI's ``build_model`` and open_clip's ``build_model_from_openai_state_dict`` pop them."""
import shutil
from pathlib import Path

import numpy as np
import pytest
import timm
import torch

from porting.cli import main
from timm_vit_variants.checkpoints.torchscript_store import TorchScriptStore

from model_probes import load_like_user

open_clip = pytest.importorskip('open_clip')
from open_clip.model import CLIP, CLIPTextCfg, CLIPVisionCfg  # noqa: E402

REF = Path(__file__).resolve().parent / 'data' / 'reference_clip'
TOL = 2e-5
PATCH, GRID, RESIZED = 16, (6, 6), (12, 9)
SCALARS = {'input_resolution': PATCH * GRID[0], 'context_length': 8, 'vocab_size': 64}


def _clip(image_size) -> CLIP:
    """open_clip's CLIP at the fixture's sizes (OpenAI's text tower: width 64, width // 64 = 1 head)."""
    return CLIP(32, CLIPVisionCfg(layers=2, width=128, patch_size=PATCH, image_size=image_size),
                CLIPTextCfg(context_length=8, vocab_size=64, width=64, heads=1, layers=1), quick_gelu=True)


def _source_model(fp16: bool) -> CLIP:
    """The tiny model, every parameter moved off its initial value by seeded noise; fp16 as OpenAI ships it."""
    torch.manual_seed(0)
    model = _clip(PATCH * GRID[0]).eval()
    noise = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=noise))
    if fp16:
        open_clip.model.convert_weights_to_fp16(model)  # OpenAI's convert_weights: conv, linear, MHA, proj
    return model


class _Holder(torch.nn.Module):
    """A module that only holds tensors, so that a scripted tree of them names each as OpenAI's archive does."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def _write_archive(path: Path, state) -> None:
    root = _Holder()
    for name, tensor in state.items():
        *parents, leaf = name.split('.')
        module = root
        for part in parents:
            if not hasattr(module, part):
                module.add_module(part, _Holder())
            module = getattr(module, part)
        module.register_buffer(leaf, tensor)
    torch.jit.script(root).save(str(path))


def _openai_names() -> dict:
    """Names and shapes of the archive OpenAI's own clip/model.py wrote, the scalars aside."""
    store = TorchScriptStore(str(REF / 'openai_vit_b16_tiny.pt'))
    try:
        return {n: store.shape(n) for n in store.names() if n not in SCALARS}
    finally:
        store.close()


def _write(tmp_path: Path, form: str, suffix: str, model: CLIP, **scalars) -> Path:
    """``model`` in one of OpenAI's forms; its names and shapes are those of OpenAI's own archive."""
    state = dict(model.state_dict())
    assert {k: tuple(v.shape) for k, v in state.items()} == _openai_names()
    state.update({k: torch.tensor(v) for k, v in {**SCALARS, **scalars}.items()})
    path = tmp_path / f'openai_tiny{suffix}'
    if form == 'archive':
        _write_archive(path, state)
    else:
        torch.save(state, path)
    return path


def _outputs(model: CLIP, x: torch.Tensor):
    """open_clip's image tower: every token after ln_post, the pooled feature and the embedding (after proj)."""
    visual = model.visual
    with torch.no_grad():
        tokens = visual.ln_post(visual.transformer(visual._embeds(x)))
        return tokens, tokens[:, 0], model.encode_image(x, normalize=False)


def _compare(what: str, model: torch.nn.Module, x: torch.Tensor, theirs, max_delta) -> None:
    """The loaded folder against open_clip's (tokens, pooled, embedding): the head-free outputs, the stored head,
    then the embedding through it."""
    with torch.no_grad():
        features = model.forward_features(x)
        pooled = model.forward_head(features, pre_logits=True)
        embed = model(x)
    if theirs[0] is not None:
        max_delta(f'{what}: features', features, theirs[0], TOL)
    max_delta(f'{what}: pooled', pooled, theirs[1], TOL)
    # the stored 32-wide projection, not a fresh head of the row's width
    assert model.num_classes == 32 and tuple(model.head.weight.shape) == (32, 128), model.head
    max_delta(f'{what}: embedding', embed, theirs[2], TOL)


def _convert(tmp_path: Path, source: Path, name: str, *extra: str, capsys) -> tuple:
    out = tmp_path / name
    code = main(['convert', str(source), str(out), *extra])
    captured = capsys.readouterr()
    assert code == 0, captured.out + captured.err
    return out, captured.out + captured.err


def _pass_line(text: str) -> str:
    line = next(line for line in text.splitlines() if line.startswith('verification '))
    assert line.startswith('verification passed vs open_clip build_model_from_openai_state_dict'), text
    assert 'assumed' not in line, line  # the activation and head count are the format's, not assumptions
    return line


@pytest.mark.parametrize('form,suffix,fp16', [
    ('state_dict', '.pt', True), ('state_dict', '.pth', False), ('state_dict', '.bin', True),
    ('archive', '.pt', True), ('archive', '.pt', False)])
def test_openai_file_converts_verified_against_open_clips_openai_path(tmp_path, capsys, max_delta, form, suffix,
                                                                     fp16):
    source_model = _source_model(fp16)
    source = _write(tmp_path, form, suffix, source_model)
    out, text = _convert(tmp_path, source, 'out', capsys=capsys)
    _pass_line(text)
    assert 'QuickGELU: OpenAI format: always QuickGELU' in text and 'GELU assumed' not in text, text
    assert 'heads: OpenAI format: width // 64 = 2' in text, text
    model = load_like_user(out)
    assert all(type(block.mlp.act) is timm.layers.QuickGELU for block in model.blocks)
    if fp16:  # open_clip's OpenAI loader upcasts OpenAI's fp16 weights: float32 on both sides, exactly
        reference = open_clip.load_openai_model(str(source), precision='fp32', device='cpu').eval()
        what = f'OpenAI {form}{suffix} fp16 vs open_clip load_openai_model 6x6'
    else:  # its builder rounds a float32 file to fp16 before loading: the model the file was saved from instead
        reference = source_model.float()
        what = f'OpenAI {form}{suffix} fp32 vs the open_clip model it holds 6x6'
    x = torch.randn(2, 3, PATCH * GRID[0], PATCH * GRID[1], generator=torch.Generator().manual_seed(2))
    _compare(what, model, x, _outputs(reference, x), max_delta)


@pytest.mark.parametrize('form', ['state_dict', 'archive'])
def test_openai_file_at_a_resized_grid_against_open_clips_resize(tmp_path, capsys, max_delta, form):
    """--img-size 192 144 (12x9): against open_clip's force_image_size route, a CLIP built at that size whose
    table open_clip's resize_pos_embed fits, as its load_checkpoint does."""
    source_model = _source_model(fp16=True)
    source = _write(tmp_path, form, '.pt', source_model)
    size = (PATCH * RESIZED[0], PATCH * RESIZED[1])
    out, text = _convert(tmp_path, source, 'out', '--img-size', *map(str, size), capsys=capsys)
    line = _pass_line(text)
    assert f'target geometry ({size[0]}x{size[1]}, patch {PATCH}) passed' in line, line
    model = load_like_user(out)
    reference = _clip(size).eval()
    state = {k: v.float() for k, v in source_model.state_dict().items()}
    open_clip.model.resize_pos_embed(state, reference)
    reference.load_state_dict(state)
    x = torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(3))
    _compare(f'OpenAI {form} 12x9 vs open_clip resize_pos_embed', model, x, _outputs(reference, x), max_delta)


@pytest.mark.parametrize('grid', ['12x9', '4x5'])
def test_openais_own_archive_at_a_resized_grid(tmp_path, capsys, max_delta, grid):
    """The archive OpenAI's clip/model.py wrote, converted to another grid and verified there: against the outputs
    open_clip's create_model(force_image_size=...) wrote for it (tests/data/reference_clip/README.md)."""
    gh, gw = map(int, grid.split('x'))
    out, text = _convert(tmp_path, REF / 'openai_vit_b16_tiny.pt', 'out', '--img-size', str(gh * PATCH),
                         str(gw * PATCH), capsys=capsys)
    line = _pass_line(text)
    assert f'target geometry ({gh * PATCH}x{gw * PATCH}, patch {PATCH}) passed' in line, line
    data = np.load(REF / 'openai_vit_b16_tiny_io.npz', allow_pickle=False)
    pixels = data['pixels_uint8'][:, :, :gh * PATCH, :gw * PATCH].astype(np.float32) / np.float32(255)
    x = torch.from_numpy((pixels - data['mean'].reshape(3, 1, 1)) / data['std'].reshape(3, 1, 1))
    model = load_like_user(out)
    with torch.no_grad():
        tokens = model.forward_features(x)[:, 1:]
    max_delta(f"OpenAI's archive converted to {grid} vs open_clip force_image_size: tokens", tokens,
              data[f'tokens_{grid}'], TOL)
    _compare(f"OpenAI's archive converted to {grid} vs open_clip force_image_size", model, x,
             (None, data[f'pooled_{grid}'], data[f'embed_{grid}']), max_delta)


# -- bad input: one error line naming the file and the key -----------------------------------------------------------

def _refused(tmp_path: Path, capsys, source: Path, key: str, *extra: str) -> str:
    out = tmp_path / 'out'
    code = main(['convert', str(source), str(out), *extra])
    captured = capsys.readouterr()
    errors = [line for line in (captured.out + captured.err).splitlines() if line.startswith('error:')]
    assert code != 0 and len(errors) == 1, captured.out + captured.err
    assert str(source) in errors[0] and key in errors[0], errors[0]
    assert not out.exists()
    return errors[0]


@pytest.mark.parametrize('form', ['state_dict', 'archive'])
def test_input_resolution_that_disagrees_with_the_table(tmp_path, capsys, form):
    source = _write(tmp_path, form, '.pt', _source_model(fp16=True), input_resolution=224)
    assert '6x6 grid' in _refused(tmp_path, capsys, source, 'input_resolution')


def test_a_scalar_that_is_not_a_0d_integer(tmp_path, capsys):
    source = _write(tmp_path, 'state_dict', '.pt', _source_model(fp16=True))
    state = torch.load(source, weights_only=True)
    state['context_length'] = torch.ones(8)
    torch.save(state, source)
    assert '0-d integer' in _refused(tmp_path, capsys, source, 'context_length')


def test_a_file_without_its_text_tower(tmp_path, capsys):
    """Truncated to the image tower and the scalars: open_clip's OpenAI builder needs the text tower."""
    source = _write(tmp_path, 'state_dict', '.pt', _source_model(fp16=True))
    state = torch.load(source, weights_only=True)
    torch.save({k: v for k, v in state.items() if k.startswith('visual.') or k in SCALARS}, source)
    assert 'build_model_from_openai_state_dict' in _refused(tmp_path, capsys, source, 'text_projection')


@pytest.mark.parametrize('flag,value', [('--act-layer', 'gelu'), ('--num-heads', '4')])
def test_a_hint_that_contradicts_the_format(tmp_path, capsys, flag, value):
    shutil.copy(REF / 'openai_vit_b16_tiny.pt', tmp_path / 'openai.pt')
    assert 'contradicts the format' in _refused(tmp_path, capsys, tmp_path / 'openai.pt', 'visual.', flag, value)
