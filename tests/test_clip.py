"""CLIP image towers (OpenAI .pt, OpenCLIP folders: QuickGELU, GELU L/14, CLIPA, CoCa) against the outputs open_clip's
and OpenAI's own code wrote (tests/data/reference_clip/README.md), and against open_clip's own text tower."""
import contextlib
import json
import pickle
import re
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import timm_vit_variants  # noqa: F401
from model_probes import load_like_user
from porting.cli import main
from timm_vit_variants.checkpoints import open_checkpoint
from timm_vit_variants.checkpoints.openclip import _TABLE
from timm_vit_variants.checkpoints.torchscript_store import TorchScriptStore
from timm_vit_variants.clip_models import CLIP_ARCHS, CLIP_TAGS
from timm_vit_variants.model_table import MODELS
from timm_vit_variants.errors import ViTVariantsError
from timm_vit_variants.parts import Learned
from timm_vit_variants.vision_transformer import SimpleVisionTransformer

REF = Path(__file__).resolve().parent / 'data' / 'reference_clip'
TOL = 2e-5
# source -> (its _io file, patch size, detected format)
FIXTURES = {
    'openai_vit_b16_tiny.pt': ('openai_vit_b16_tiny_io', 16, 'openai'),
    'openclip_b16_quickgelu_tiny': ('openclip_b16_quickgelu_tiny_io', 16, 'openclip'),
    'openclip_l14_gelu_tiny': ('openclip_l14_gelu_tiny_io', 14, 'openclip'),
    'clipa_l14_tiny': ('clipa_l14_tiny_io', 14, 'openclip'),
    'coca_l14_tiny': ('coca_l14_tiny_io', 14, 'openclip'),
}
# the stored grid, a larger and a smaller non-square one, and 4x9: the target where open_clip skips its resize
GRIDS = ('6x6', '12x9', '4x5', '4x9')


def _inputs(data, grid: str, patch: int) -> torch.Tensor:
    """The README's model input at a grid: the top-left crop of the uint8 master, scaled and normalised in float32."""
    gh, gw = map(int, grid.split('x'))
    pixels = data['pixels_uint8'][:, :, :gh * patch, :gw * patch].astype(np.float32) / np.float32(255)
    return torch.from_numpy((pixels - data['mean'].reshape(3, 1, 1)) / data['std'].reshape(3, 1, 1))


def _ours(source: Path) -> SimpleVisionTransformer:
    with open_checkpoint(source, layout=SimpleVisionTransformer.state_layout) as src:
        model = SimpleVisionTransformer(src.config.replace(weight_init='skip'))
        model.load_state_dict(src.state_dict())
    return model.eval()


@pytest.mark.parametrize('name', FIXTURES)
def test_embedding_and_pooled_feature_at_every_grid(name, max_delta):
    io_name, patch, fmt = FIXTURES[name]
    with open_checkpoint(REF / name) as src:
        assert src.format == fmt
        assert any(n.startswith('detected: ') and 'QuickGELU: ' in n for n in src.notes), src.notes
        assert src.config.position(Learned).resample == 'openclip'
    model = _ours(REF / name)
    data = np.load(REF / f'{io_name}.npz', allow_pickle=False)
    for grid in GRIDS:
        x = _inputs(data, grid, patch)
        with torch.no_grad():
            embed = model(x)
            pooled = model.forward_head(model.forward_features(x), pre_logits=True)
        max_delta(f'{name} {grid}: embedding', embed, data[f'embed_{grid}'], TOL)
        max_delta(f'{name} {grid}: pooled', pooled, data[f'pooled_{grid}'], TOL)
    # 4x9 has the 6x6 table's token count: open_clip reads that table as a 4x9 raster; ours resizes it
    assert np.abs(embed.numpy() - data['quirk_embed_4x9']).max() > 1e-2


def test_openai_file_against_openai_own_outputs(max_delta):
    data = np.load(REF / 'openai_vit_b16_tiny_io.npz', allow_pickle=False)
    model = _ours(REF / 'openai_vit_b16_tiny.pt')
    x = _inputs(data, '6x6', 16)
    with torch.no_grad():
        features = model.forward_features(x)
        embed = model.forward_head(features)
        pooled = model.forward_head(features, pre_logits=True)
    assert model.config.block.act == 'quick_gelu' and model.config.num_heads == 2
    max_delta('OpenAI clip/model.py 6x6: embedding', embed, data['openai_embed_6x6'], TOL)
    max_delta('OpenAI clip/model.py 6x6: pooled', pooled, data['openai_pooled_6x6'], TOL)


def test_the_archive_is_read_as_data():
    """Every tensor of the TorchScript archive, read without running it, equals torch.jit.load's state dict."""
    store = TorchScriptStore(str(REF / 'openai_vit_b16_tiny.pt'))
    jit = torch.jit.load(str(REF / 'openai_vit_b16_tiny.pt'), map_location='cpu').state_dict()
    assert sorted(store.names()) == sorted(jit)
    for name, value in jit.items():
        assert store.tensor(name).dtype == value.dtype and torch.equal(store.tensor(name), value), name
    store.close()


def _open_clip_model(name: str):
    open_clip = pytest.importorskip('open_clip')
    if name.endswith('.pt'):
        store = TorchScriptStore(str(REF / name))
        state = {n: store.tensor(n).clone() for n in store.names()}
        store.close()
        return open_clip.model.build_model_from_openai_state_dict(state, quick_gelu=True).float().eval()
    return open_clip.create_model(f'local-dir:{REF / name}', device='cpu').float().eval()


@pytest.mark.parametrize('name', FIXTURES)
def test_zero_shot_logits_with_open_clips_own_text_tower(name, max_delta):
    """Our image tower in an open_clip pipeline: the same zero-shot logits as open_clip's CLIP."""
    io_name, patch, _ = FIXTURES[name]
    data = np.load(REF / f'{io_name}.npz', allow_pickle=False)
    clip = _open_clip_model(name)
    ours = _ours(REF / name)
    with torch.no_grad():
        image = ours(_inputs(data, '6x6', patch))
        text = clip.encode_text(torch.from_numpy(data['text_tokens']), normalize=True) if name.startswith('coca') \
            else clip.encode_text(torch.from_numpy(data['text_tokens']))
        image = image / image.norm(dim=-1, keepdim=True)
        text = text / text.norm(dim=-1, keepdim=True)
        logits = clip.logit_scale.exp() * image @ text.T
    max_delta(f'{name}: zero-shot logits with open_clip text tower', logits, data['logits_per_image'], TOL)


# -- bad input ------------------------------------------------------------------------------------------------------

def _one_line(error: ViTVariantsError, *parts: str) -> str:
    text = str(error)
    assert '\n' not in text, text
    for part in parts:
        assert part in text, text
    return text


def _archive(path: Path, payload: bytes) -> Path:
    with zipfile.ZipFile(path, 'w') as archive:
        archive.writestr('model/data.pkl', payload)
        archive.writestr('model/code/__torch__/model.py', 'def forward(self, x):\n  return x\n')
        archive.writestr('model/constants.pkl', pickle.dumps((), protocol=2))
        archive.writestr('model/version', '4\n')
    return path


def test_torchscript_archive_without_known_tensors(tmp_path):
    path = _archive(tmp_path / 'model.pt', pickle.dumps({'training': False}, protocol=2))
    with pytest.raises(ViTVariantsError) as e:
        open_checkpoint(path, layout=SimpleVisionTransformer.state_layout)
    _one_line(e.value, str(path), 'visual.conv1.weight')


class _Hostile:
    def __reduce__(self):
        return (print, ('ran',))


def test_torchscript_archive_with_a_foreign_global_is_refused(tmp_path, capsys):
    path = _archive(tmp_path / 'model.pt', pickle.dumps({'visual': _Hostile()}, protocol=2))
    with pytest.raises(ViTVariantsError) as e:
        open_checkpoint(path)
    _one_line(e.value, str(path), 'refused global', 'print')
    assert 'ran' not in capsys.readouterr().out


def _folder_copy(tmp_path: Path, name: str = 'openclip_b16_quickgelu_tiny') -> Path:
    folder = tmp_path / name
    shutil.copytree(REF / name, folder)
    return folder


def test_projection_of_the_wrong_shape(tmp_path):
    folder = _folder_copy(tmp_path)
    weights = folder / 'open_clip_model.safetensors'
    state = load_file(str(weights))
    state['visual.proj'] = torch.zeros(48, 32)
    save_file(state, str(weights))
    with pytest.raises(ViTVariantsError) as e:
        open_checkpoint(folder, layout=SimpleVisionTransformer.state_layout)
    _one_line(e.value, str(weights), 'visual.proj', '(48, 32)')


@pytest.mark.parametrize('field,value', [('width', 96), ('layers', 3), ('patch_size', 14), ('image_size', 128),
                                         ('no_ln_pre', True), ('ls_init_value', 1e-4)])
def test_vision_cfg_that_disagrees_with_the_tensors(tmp_path, field, value):
    folder = _folder_copy(tmp_path)
    config_path = folder / 'open_clip_config.json'
    config = json.loads(config_path.read_text())
    config['model_cfg']['vision_cfg'][field] = value
    config_path.write_text(json.dumps(config))
    with pytest.raises(ViTVariantsError) as e:
        open_checkpoint(folder, layout=SimpleVisionTransformer.state_layout)
    _one_line(e.value, str(config_path), f'model_cfg.vision_cfg.{field}')


# -- the command line -----------------------------------------------------------------------------------------------

def test_convert_end_to_end_verified_against_open_clip(tmp_path, capsys, max_delta):
    pytest.importorskip('open_clip')
    out = tmp_path / 'out'
    code = main(['convert', str(REF / 'openai_vit_b16_tiny.pt'), str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = captured.out.splitlines()
    # OpenAI's fp16 weights beside fp32 norms and tables: written losslessly as float32
    assert summary[0] == f'{out} (float16+float32 source, written as float32)', captured.out
    assert 'verification passed' in summary[1] and 'vs open_clip' in summary[1], captured.out
    notes = captured.out + captured.err
    assert 'detected: an OpenAI CLIP TorchScript archive' in notes and 'QuickGELU: ' in notes, notes
    record = json.loads((out / 'config.json').read_text())
    assert record['model_args']['act_layer'] == 'quick_gelu' and record['model_args']['head_bias'] is False
    model = load_like_user(out)
    data = np.load(REF / 'openai_vit_b16_tiny_io.npz', allow_pickle=False)
    with torch.no_grad():
        embed = model(_inputs(data, '12x9', 16))
    max_delta('converted OpenAI folder 12x9: embedding', embed, data['embed_12x9'], TOL)


# -- transformers CLIP folders ---------------------------------------------------------------------------------------

HF_TINY = dict(hidden_size=32, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2, image_size=48,
               patch_size=8, layer_norm_eps=1e-5, projection_dim=16)


def _perturbed(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Seeded noise on every parameter, so no LayerNorm is the identity and no bias is zero."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.1 * torch.randn(param.shape, generator=generator))
    return model.eval()


@pytest.mark.parametrize('kind,act', [('CLIPVisionModelWithProjection', 'quick_gelu'), ('CLIPModel', 'gelu'),
                                      ('CLIPVisionModel', 'quick_gelu')])
def test_transformers_clip_folders_at_three_grids(tmp_path, kind, act, max_delta):
    transformers = pytest.importorskip('transformers')
    vision = transformers.CLIPVisionConfig(hidden_act=act, **HF_TINY)
    if kind == 'CLIPModel':
        text = transformers.CLIPTextConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                           num_attention_heads=2, vocab_size=64, max_position_embeddings=8)
        config = transformers.CLIPConfig(text_config=text.to_dict(), vision_config=vision.to_dict(), projection_dim=16)
        model = _perturbed(transformers.CLIPModel(config), 7)
    else:
        model = _perturbed(getattr(transformers, kind)(vision), 7)
    model.save_pretrained(tmp_path / 'src')
    with open_checkpoint(tmp_path / 'src') as src:
        skipped = [n for n in src.notes if n.startswith('read the vision tower')]
    # CLIPModel: the text tower's tensors, text_projection and logit_scale lie outside vision_model.
    text = len(model.text_model.state_dict()) + 2 if kind == 'CLIPModel' else 0
    assert skipped == ([f"read the vision tower under 'vision_model.'; skipped {text} other tensors (the text tower, "
                        'its projection and logit_scale), which the image model does not use'] if text else [])
    ours = _ours(tmp_path / 'src')
    assert ours.config.block.act == act and ours.config.position(Learned).resample == 'hf'
    generator = torch.Generator().manual_seed(3)
    for gh, gw in ((6, 6), (12, 9), (4, 5)):
        x = torch.randn(2, 3, gh * 8, gw * 8, generator=generator)
        with torch.no_grad():
            pooled = ours.forward_head(ours.forward_features(x), pre_logits=True)
            if kind == 'CLIPModel':
                expected = model.get_image_features(pixel_values=x, interpolate_pos_encoding=True)
                expected = getattr(expected, 'pooler_output', expected)
                reference_pooled = model.vision_model(pixel_values=x, interpolate_pos_encoding=True).pooler_output
            elif kind == 'CLIPVisionModelWithProjection':
                expected = model(pixel_values=x, interpolate_pos_encoding=True).image_embeds
                reference_pooled = model.vision_model(pixel_values=x, interpolate_pos_encoding=True).pooler_output
            else:
                expected = reference_pooled = model(pixel_values=x, interpolate_pos_encoding=True).pooler_output
            embed = ours(x)
        max_delta(f'transformers {kind} {gh}x{gw}: image_embeds', embed, expected, TOL)
        max_delta(f'transformers {kind} {gh}x{gw}: pooled', pooled, reference_pooled, TOL)


def test_transformers_clip_folder_converts_verified(tmp_path, capsys):
    transformers = pytest.importorskip('transformers')
    model = _perturbed(transformers.CLIPVisionModelWithProjection(
        transformers.CLIPVisionConfig(hidden_act='quick_gelu', **HF_TINY)), 11)
    model.save_pretrained(tmp_path / 'src')
    code = main(['convert', str(tmp_path / 'src'), str(tmp_path / 'out'), '--img-size', '96', '72'])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert 'verification passed vs transformers CLIPVisionModelWithProjection' in captured.out, captured.out
    assert 'target geometry (96x72, patch 8) passed' in captured.out, captured.out


# -- timm CLIP towers ------------------------------------------------------------------------------------------------

TIMM_TINY = dict(embed_dim=64, depth=2, num_heads=2, patch_size=8, num_classes=16)


@pytest.mark.parametrize('arch,kwargs,act', [
    ('vit_base_patch16_clip_quickgelu_224', {}, 'quick_gelu'),
    ('vit_base_patch16_clip_224', {}, 'gelu'),
    # CLIPA's layout in timm: no norm_pre, mean pooling, the final norm after the pool
    ('vit_base_patch16_clip_224', dict(pre_norm=False, global_pool='avg', fc_norm=True), 'gelu'),
])
def test_timm_clip_folders_at_three_grids(tmp_path, arch, kwargs, act, max_delta):
    import timm
    from timm.models import _hub
    from timm.models.vision_transformer import checkpoint_filter_fn
    args = dict(TIMM_TINY, img_size=48, **kwargs)
    ref = _perturbed(timm.create_model(arch, pretrained=False, **args), 5)
    _hub.save_for_hf(ref, str(tmp_path / 'src'), model_args=args, safe_serialization=True)
    with open_checkpoint(tmp_path / 'src') as src:
        assert src.config.block.act == act and src.config.tokens.pre_norm == (not kwargs)
        assert any(n.startswith(f'detected: a timm CLIP image tower ({arch}); QuickGELU: {act}') for n in src.notes)
    ours = _ours(tmp_path / 'src')
    generator = torch.Generator().manual_seed(4)
    for gh, gw in ((6, 6), (12, 9), (4, 5)):
        at_grid = timm.create_model(arch, pretrained=False, **dict(args, img_size=(gh * 8, gw * 8))).eval()
        at_grid.load_state_dict(checkpoint_filter_fn(ref.state_dict(), at_grid))
        x = torch.randn(2, 3, gh * 8, gw * 8, generator=generator)
        with torch.no_grad():
            features = at_grid.forward_features(x)
            expected, expected_pooled = at_grid.forward_head(features), at_grid.forward_head(features, pre_logits=True)
            embed, pooled = ours(x), ours.forward_head(ours.forward_features(x), pre_logits=True)
        max_delta(f'timm {arch} {kwargs or ""} {gh}x{gw}: embedding', embed, expected, TOL)
        max_delta(f'timm {arch} {kwargs or ""} {gh}x{gw}: pooled', pooled, expected_pooled, TOL)


@pytest.mark.parametrize('prefix', ['', 'trunk.'])
def test_bare_timm_clip_state_dict(tmp_path, prefix, max_delta):
    """A state dict records neither QuickGELU nor eps: eps is timm's for a norm_pre tower (1e-5), also under a
    prefix given by hand, the activation assumed GELU and said so, and given as a hint it gives timm's output."""
    import timm
    ref = _perturbed(timm.create_model('vit_base_patch16_clip_quickgelu_224', img_size=48, **TIMM_TINY), 6)
    torch.save({prefix + k: v for k, v in ref.state_dict().items()}, tmp_path / 'clip.pth')
    hints = dict(num_heads=2, prefix=prefix or None)
    with open_checkpoint(tmp_path / 'clip.pth', **hints) as src:
        assert src.config.block.norm_eps == 1e-5 and src.config.block.act == 'gelu' and 'act_layer' in src.assumed
    with open_checkpoint(tmp_path / 'clip.pth', layout=SimpleVisionTransformer.state_layout, act_layer='quick_gelu',
                         **hints) as src:
        ours = SimpleVisionTransformer(src.config.replace(weight_init='skip'))
        ours.load_state_dict(src.state_dict())
    x = torch.randn(2, 3, 48, 48, generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        max_delta('bare timm CLIP state dict, act_layer=quick_gelu: embedding', ours.eval()(x), ref(x), TOL)


def test_timm_gelu_architecture_of_quickgelu_weights_is_named(tmp_path):
    import timm
    from timm.models import _hub
    ref = timm.create_model('vit_base_patch16_clip_224', pretrained=False, img_size=48, **TIMM_TINY)
    ref.pretrained_cfg = dict(ref.pretrained_cfg, tag='openai')
    _hub.save_for_hf(ref, str(tmp_path / 'src'), model_args=dict(TIMM_TINY, img_size=48), safe_serialization=True)
    with open_checkpoint(tmp_path / 'src') as src:
        note = next(n for n in src.notes if n.startswith('detected: a timm CLIP'))
    assert 'trained with QuickGELU' in note and '--act-layer quick_gelu' in note, note


# -- the model options and timm's interface --------------------------------------------------------------------------

@pytest.mark.parametrize('name', ['openai_vit_b16_tiny.pt', 'clipa_l14_tiny', 'coca_l14_tiny'])
def test_clip_towers_keep_timms_interface(tmp_path, name):
    import timm
    io_name, patch, _ = FIXTURES[name]
    model = _ours(REF / name)
    config = model.config
    assert type(config).from_dict(json.loads(json.dumps(config.to_dict()))) == config.replace(weight_init='jax')
    assert type(model.blocks[0].mlp.act) is (timm.layers.QuickGELU if name.endswith('.pt') else timm.layers.GELU)
    x = _inputs(np.load(REF / f'{io_name}.npz', allow_pickle=False), '4x5', patch)
    with torch.no_grad():
        embed = model(x)
        final, taken = model.forward_intermediates(x, indices=[0, 1])
        assert [t.shape for t in taken] == [(2, config.embed_dim, 4, 5)] * 2
        assert torch.equal(model.forward_head(final), embed)
        model.set_input_size(img_size=(8 * patch, 6 * patch))
        assert model(_inputs(np.load(REF / f'{io_name}.npz'), '8x6', patch)).shape == embed.shape
    features = timm.create_model('simple_vit_base', pretrained=False, features_only=True, out_indices=(1,),
                                 **dict(config.to_dict(), weight_init='skip', num_classes=0,
                                        head_bias=True))
    assert features(x)[0].shape == (2, config.embed_dim, 4, 5)
    if config.head.pool.kind != 'coca':
        model.reset_classifier(10)
        assert model(x).shape == (2, 10) and model.config.head.bias
    else:
        with pytest.raises(ValueError, match='coca'):
            model.reset_classifier(10, 'avg')


def test_timm_clip_folder_converts_verified_at_the_target(tmp_path, capsys):
    import timm
    from timm.models import _hub
    args = dict(TIMM_TINY, img_size=48)
    ref = _perturbed(timm.create_model('vit_base_patch16_clip_quickgelu_224', pretrained=False, **args), 9)
    _hub.save_for_hf(ref, str(tmp_path / 'src'), model_args=args, safe_serialization=True)
    code = main(['convert', str(tmp_path / 'src'), str(tmp_path / 'out'), '--img-size', '96', '72'])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert 'target geometry (96x72, patch 8) passed' in captured.out, captured.out


def test_the_clip_extra_is_named_when_open_clip_is_missing(monkeypatch):
    import importlib.util

    from porting.verification.references import require_reference
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, 'find_spec', lambda name, *a: None if name == 'open_clip' else real(name, *a))
    for fmt in ('openclip', 'openai'):
        with pytest.raises(ViTVariantsError, match=r"pip install 'timm-vit-variants\[clip\]'.*--no-verify"):
            require_reference(fmt)


# -- the registered towers and their published tags -------------------------------------------------------------------

def _open_clip_tower(arch):
    """open_clip's own image tower for ``arch`` (its model_configs JSON), built on the meta device."""
    open_clip = pytest.importorskip('open_clip')
    cfg = open_clip.get_model_config(arch.open_clip)
    with torch.device('meta'):
        return open_clip.model._build_vision_tower(cfg['embed_dim'], cfg['vision_cfg'])


def _source_shape(key: str, visual, rules) -> tuple:
    """The shape our ``key`` takes in open_clip's ``visual`` state dict, through the reader's own key table."""
    block = re.match(r'^blocks\.(\d+)\.', key)
    pattern = re.sub(r'^blocks\.\d+\.', 'blocks.{i}.', key)
    source = rules[pattern].sources[0].format(i=block.group(1) if block else None)
    shape = tuple(visual[source[len('visual.'):]].shape)
    return {'head.weight': shape[::-1], 'pos_embed': (1, *shape), 'cls_token': (1, 1, *shape)}.get(key, shape)


@pytest.mark.parametrize('name', sorted(CLIP_ARCHS))
def test_each_clip_architecture_has_open_clips_layout(name):
    """Every tensor of our layout is one of open_clip's tower's, with its shape; none of open_clip's is left over."""
    arch = CLIP_ARCHS[name]
    tower = _open_clip_tower(arch)
    visual = tower.state_dict()
    config = MODELS[name].config()
    ours = {key: shape for key, shape, _ in SimpleVisionTransformer.state_layout(config)}
    for key, shape in ours.items():
        assert shape == _source_shape(key, visual, _TABLE), key
    used = {_TABLE[re.sub(r'^blocks\.\d+\.', 'blocks.{i}.', k)].sources[0].format(
        i=k.split('.')[1] if k.startswith('blocks.') else None)[len('visual.'):] for k in ours}
    assert used == set(visual)
    assert config.num_heads == tower.transformer.resblocks[0].attn.num_heads
    assert config.img_size == tuple(tower.image_size) and config.patch_size == tuple(tower.patch_size)
    assert (config.head.pool.kind, config.head.fc_norm) == ({'tok': 'token', 'avg': 'avg'}[tower.pool_type],
                                                    tower.final_ln_after_pool)


@pytest.mark.parametrize('name,tag', sorted(CLIP_TAGS))
def test_each_clip_tag_builds_the_network_and_names_open_clips_weights(name, tag):
    """A tag builds with open_clip's quick_gelu for those weights, and names open_clip's Hub repo, URL and
    preprocessing (open_clip's pretrained.py)."""
    import timm
    open_clip = pytest.importorskip('open_clip')
    theirs = open_clip.get_pretrained_cfg(CLIP_ARCHS[name].open_clip, tag)
    assert theirs, (name, tag)
    model = timm.create_model(f'{name}.{tag}', pretrained=False, device='meta')
    act = type(model.blocks[0].mlp.act)
    assert act is (timm.layers.QuickGELU if theirs.get('quick_gelu', False) else timm.layers.GELU)
    cfg = model.pretrained_cfg
    assert (cfg['hf_hub_id'], cfg['hf_hub_filename']) == (theirs['hf_hub'].rstrip('/'), 'open_clip_pytorch_model.bin')
    assert (cfg.get('url') or '') == theirs['url']
    assert (cfg['mean'], cfg['std'], cfg['interpolation']) == (theirs['mean'], theirs['std'], theirs['interpolation'])
    assert cfg['crop_mode'] == {'shortest': 'center', 'squash': 'squash'}[theirs['resize_mode']]
    assert cfg['crop_pct'] == 1.0 and cfg['num_classes'] == model.num_classes and cfg['custom_load'] == 'hf'
    if name == 'simple_vit_base_patch16_clip_224':  # an explicit act_layer wins over the tag's (one arch: cheap)
        assert timm.create_model(f'{name}.{tag}', device='meta', act_layer='relu').config.block.act == 'relu'


TINY_OPENAI = dict(embed_dim=128, depth=2, num_heads=2, mlp_dim=512, num_classes=32)
TINY_OPENCLIP = dict(embed_dim=64, depth=2, num_heads=2, mlp_dim=256, num_classes=32)


@pytest.mark.parametrize('name,file,kwargs,patch,lone', [
    # the OpenAI .pt at another grid than its own: resized at load with open_clip's rule
    ('simple_vit_base_patch16_clip_224.openai', 'openai_vit_b16_tiny.pt', TINY_OPENAI, 16, False),
    # the folder's weight file, open_clip_config.json beside it
    ('simple_vit_base_patch16_clip_224.dfn2b', 'openclip_b16_quickgelu_tiny/open_clip_model.safetensors',
     TINY_OPENCLIP, 16, False),
    # a lone file, as timm downloads it: QuickGELU and CLIPA's pooling are not recorded, the tag's model decides
    ('simple_vit_base_patch16_clip_224.metaclip_400m', 'openclip_b16_quickgelu_tiny/open_clip_model.safetensors',
     TINY_OPENCLIP, 16, True),
    ('simple_vit_large_patch14_clipa_224.datacomp1b', 'clipa_l14_tiny/open_clip_pytorch_model.bin', TINY_OPENCLIP,
     14, True),
])
def test_a_tag_loads_an_open_clip_file_through_timms_pretrained_path(tmp_path, name, file, kwargs, patch, lone,
                                                                     max_delta):
    """timm's own pretrained=True route with a file= override (no network): the tag's cfg hands the file to
    load_pretrained, whose reader is chosen by the file's content; no false 'trained with' warning."""
    import warnings

    import timm
    source = REF / file
    if lone:
        source = tmp_path / Path(file).name
        shutil.copy(REF / file, source)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        model = timm.create_model(name, pretrained=True, pretrained_cfg_overlay=dict(file=str(source)),
                                  img_size=(12 * patch, 9 * patch), **kwargs).eval()
    data = np.load(REF / f"{FIXTURES[file.split('/')[0]][0]}.npz", allow_pickle=False)
    with torch.no_grad():
        embed = model(_inputs(data, '12x9', patch))
    max_delta(f'{name} from {Path(file).name} via pretrained_cfg, 12x9: embedding', embed, data['embed_12x9'], TOL)




def test_an_open_clip_state_dict_in_timms_generic_path_is_named():
    """A visual.* state dict handed to the state-dict filter (timm's generic loader, a non-CLIP model) is one
    error naming the key and the way to load it, not a list of missing keys."""
    import timm
    from timm_vit_variants.simple_vit import checkpoint_filter_fn
    model = timm.create_model('simple_vit_tiny', device='meta')
    with pytest.raises(ViTVariantsError) as e:
        checkpoint_filter_fn({'visual.conv1.weight': torch.zeros(8, 3, 16, 16)}, model)
    _one_line(e.value, 'visual.conv1.weight', 'custom_load=True')


# Runs in a fresh interpreter (huggingface_hub reads HF_ENDPOINT at import): a CLIP tag with pretrained=True.
_HUB_LOAD = """
import sys, numpy as np, torch
import timm_vit_variants
import timm
name, kwargs, x_path, out_path = sys.argv[1], eval(sys.argv[2]), sys.argv[3], sys.argv[4]
model = timm.create_model(name, pretrained=True, **kwargs).eval()
with torch.no_grad():
    np.save(out_path, model(torch.from_numpy(np.load(x_path))).numpy())
"""


def test_a_tags_pretrained_true_downloads_open_clips_file_from_its_hub_repo(tmp_path, max_delta):
    """pretrained=True on a CLIP tag: timm fetches the cfg's hf_hub_filename from its hf_hub_id (a loopback Hub
    holding the CLIPA fixture's file under the CLIPA tag's repo id) and hands it to our reader."""
    import os
    import subprocess
    import sys

    import timm

    from hub_server import FakeHub, keep_client_local
    name = 'simple_vit_large_patch14_clipa_224.datacomp1b'
    cfg = timm.models.get_pretrained_cfg(name)
    data = np.load(REF / 'clipa_l14_tiny_io.npz', allow_pickle=False)
    np.save(tmp_path / 'x.npy', _inputs(data, '12x9', 14).numpy())
    kwargs = dict(TINY_OPENCLIP, img_size=(12 * 14, 9 * 14))
    with FakeHub() as hub, pytest.MonkeyPatch.context() as mp:
        keep_client_local(mp, tmp_path)
        hub.add_repo(cfg.hf_hub_id, {cfg.hf_hub_filename: (REF / 'clipa_l14_tiny' / cfg.hf_hub_filename).read_bytes()})
        env = {k: v for k, v in os.environ.items() if not k.startswith(('HF_', 'HUGGING'))}
        env.update(PYTHONPATH=str(REF.parents[2]), OMP_NUM_THREADS='1', HF_HOME=str(tmp_path / 'home'),
                   HF_ENDPOINT=hub.url, HF_HUB_DISABLE_TELEMETRY='1')
        proc = subprocess.run([sys.executable, '-c', _HUB_LOAD, name, repr(kwargs), str(tmp_path / 'x.npy'),
                               str(tmp_path / 'embed.npy')], capture_output=True, text=True, env=env,
                              cwd=REF.parents[2], timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert any(cfg.hf_hub_filename in route for route in hub.routes_called()), hub.routes_called()
    embed = np.load(tmp_path / 'embed.npy', allow_pickle=False)
    max_delta(f'{name} downloaded by timm from the Hub, 12x9: embedding', embed, data['embed_12x9'], TOL)


_TAG = 'simple_vit_base_patch16_clip_224.dfn2b'


@contextlib.contextmanager
def _tag_hub(tmp_path, monkeypatch):
    """A loopback Hub whose repo of the DFN B/16 tag (QuickGELU) holds the QuickGELU fixture's full model as a lone
    open_clip_pytorch_model.bin (no open_clip_config.json beside it)."""
    import io

    from huggingface_hub import constants

    from hub_server import FakeHub, keep_client_local
    keep_client_local(monkeypatch, tmp_path)
    monkeypatch.setattr(constants, 'HF_HUB_CACHE', str(tmp_path / 'hub-cache'))
    monkeypatch.setattr(constants, 'HF_HUB_OFFLINE', False)
    monkeypatch.delenv('HF_HUB_OFFLINE', raising=False)
    weights = io.BytesIO()
    torch.save(load_file(str(REF / 'openclip_b16_quickgelu_tiny' / 'open_clip_model.safetensors')), weights)
    with FakeHub() as hub:
        hub.add_repo('apple/DFN2B-CLIP-ViT-B-16', {'open_clip_pytorch_model.bin': weights.getvalue()})
        yield hub


def _convert_tag(tmp_path, monkeypatch, out: str, **options):
    """`vit-port convert TAG` of the DFN B/16 tag from ``_tag_hub``; the tiny tower has 2 heads, not ViT-B/16's 12:
    given, they win over the tag's."""
    import vit_port
    with _tag_hub(tmp_path, monkeypatch) as hub:
        return vit_port.convert(_TAG, tmp_path / out, endpoint=hub.url, num_heads=2, tol=TOL, **options)


def _tiny_as_packaged(tmp_path, monkeypatch, name: str = 'ViT-B-16', **vision) -> None:
    """The QuickGELU fixture's model_cfg registered in open_clip as its packaged config ``name`` (through its own
    add_model_config, undone after the test), ``vision`` overriding vision_cfg entries."""
    import open_clip
    from open_clip import factory
    cfg = json.loads((REF / 'openclip_b16_quickgelu_tiny' / 'open_clip_config.json').read_text())['model_cfg']
    cfg['vision_cfg'].update(vision)
    cfg.pop('quick_gelu')  # as open_clip's ViT-B-16.json: the tag's quick_gelu decides (force_quick_gelu)
    path = tmp_path / 'model_configs' / f'{name}.json'
    path.parent.mkdir()
    path.write_text(json.dumps(cfg))
    monkeypatch.setattr(factory, '_MODEL_CONFIG_PATHS', list(factory._MODEL_CONFIG_PATHS))
    monkeypatch.setattr(factory, '_MODEL_CONFIGS', dict(factory._MODEL_CONFIGS))
    open_clip.add_model_config(path)


@pytest.mark.parametrize('grid', ['6x6', '12x9'])
def test_convert_a_clip_tag_verifies_its_lone_file_against_open_clip(grid, tmp_path, monkeypatch, max_delta):
    """A tag's lone open_clip_pytorch_model.bin records neither QuickGELU nor its architecture: the tag names both
    (open_clip's ViT-B-16, QuickGELU), and open_clip builds its reference from its own config of that model (here the
    tiny fixture's, registered under that name), loading every tensor strictly, at the stored grid and at 12x9."""
    _tiny_as_packaged(tmp_path, monkeypatch)
    rows, cols = map(int, grid.split('x'))
    result = _convert_tag(tmp_path, monkeypatch, 'out', **({} if grid == '6x6' else {'img_size': (rows * 16,
                                                                                                    cols * 16)}))
    verification = result.verification
    summary = verification.summary()
    assert verification.status == 'passed', summary
    assert "create_model('ViT-B-16', force_quick_gelu)" in summary and 'taken from the tag' in summary and \
        'a shared assumption' in summary and 'loaded strictly by open_clip' in summary, summary
    if grid == '6x6':
        assert verification.max_abs_logits <= TOL and verification.max_abs_features <= TOL, summary
    else:  # checked at the source grid, then at 12x9 through open_clip's own resize (force_image_size)
        assert re.search(r'target geometry \(192x144, patch 16\) passed vs open_clip create_model', summary), summary
        assert all(value <= TOL for value in verification.deltas.values()), verification.deltas
    record = json.loads((tmp_path / 'out' / 'config.json').read_text())
    assert record['model_args']['act_layer'] == 'quick_gelu' and record['conversion']['given']['act_layer'] == \
        'quick_gelu'
    data = np.load(REF / 'openclip_b16_quickgelu_tiny_io.npz', allow_pickle=False)
    with torch.no_grad():
        embed = load_like_user(tmp_path / 'out')(_inputs(data, grid, 16))
    max_delta(f'vit-port convert of the dfn2b tag (lone file), {grid}: embedding', embed, data[f'embed_{grid}'], TOL)


def test_verify_a_clip_tags_folder_against_open_clip(tmp_path, monkeypatch):
    """`vit-port verify TAG FOLDER` checks a tag's conversion the same way: open_clip's packaged config of the tag's
    model, the folder at its own (resized) grid."""
    import vit_port
    _tiny_as_packaged(tmp_path, monkeypatch)
    with _tag_hub(tmp_path, monkeypatch) as hub:
        vit_port.convert(_TAG, tmp_path / 'out', endpoint=hub.url, num_heads=2, img_size=(144, 192), no_verify=True)
        result = vit_port.verify(_TAG, tmp_path / 'out', endpoint=hub.url, num_heads=2, tol=TOL)
    assert result.status == 'passed' and 'taken from the tag' in result.summary() and \
        'with force_image_size' in result.summary(), result.summary()


@pytest.mark.parametrize('packaged', ['real', 'deeper'])
def test_convert_a_clip_tag_whose_architecture_does_not_fit_its_file(packaged, tmp_path, monkeypatch):
    """open_clip's own ViT-B-16 (768 wide), or a config one layer deeper than the file: open_clip's strict load
    refuses the tag's file, in one error line naming the file and the first key torch names."""
    if packaged == 'deeper':
        _tiny_as_packaged(tmp_path, monkeypatch, layers=3)
    with pytest.raises(ViTVariantsError) as e:
        _convert_tag(tmp_path, monkeypatch, 'out')
    message = str(e.value)
    assert len(message.splitlines()) == 1 and 'open_clip_pytorch_model.bin' in message, message
    assert "open_clip's packaged ViT-B-16 config" in message and 'simple_vit_base_patch16_clip_224.dfn2b' in message
    if packaged == 'deeper':
        assert e.value.key == 'visual.transformer.resblocks.2.ln_1.weight' and 'missing from the file' in message, \
            message
    else:
        assert e.value.key == 'visual.class_embedding' and 'the file holds (64,), the model needs (768,)' in message, \
            message
    assert not (tmp_path / 'out').exists()


def test_a_lone_clip_file_without_a_tag_skips_with_the_reason(tmp_path):
    """The same lone file given by path: nothing but our own inference would name its architecture, so the check
    skips, saying why."""
    import vit_port
    lone = tmp_path / 'open_clip_pytorch_model.bin'
    torch.save(load_file(str(REF / 'openclip_b16_quickgelu_tiny' / 'open_clip_model.safetensors')), lone)
    result = vit_port.convert(lone, tmp_path / 'out', num_heads=2)
    summary = result.verification.summary()
    assert result.verification.status == 'skipped' and 'open_clip_config.json' in summary and \
        'not fetched as one' in summary, summary

def test_convert_an_openclip_hub_repo_brings_its_config(tmp_path, monkeypatch):
    """`vit-port convert hf-hub:ORG/NAME` of an OpenCLIP repo downloads open_clip_config.json with the weights, so
    QuickGELU is read from it and the conversion is verified against open_clip."""
    pytest.importorskip('open_clip')
    import vit_port
    from huggingface_hub import constants

    from hub_server import FakeHub, keep_client_local
    keep_client_local(monkeypatch, tmp_path)
    monkeypatch.setattr(constants, 'HF_HUB_CACHE', str(tmp_path / 'hub-cache'))
    monkeypatch.setattr(constants, 'HF_HUB_OFFLINE', False)
    monkeypatch.delenv('HF_HUB_OFFLINE', raising=False)
    folder = REF / 'openclip_b16_quickgelu_tiny'
    with FakeHub() as hub:
        hub.add_repo('org/tiny-openclip', {p.name: p.read_bytes() for p in folder.iterdir()})
        result = vit_port.convert('hf-hub:org/tiny-openclip', tmp_path / 'out', endpoint=hub.url)
    assert result.verification.status == 'passed' and 'open_clip' in result.verification.summary()
    record = json.loads((tmp_path / 'out' / 'config.json').read_text())
    assert record['model_args']['act_layer'] == 'quick_gelu' and 'act_layer' not in record['conversion']['assumed']
