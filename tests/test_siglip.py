"""SigLIP / SigLIP 2 image towers: the MAP head, the VALID crop, and every source layout, against each source's own
implementation (big_vision's, through fixtures its code wrote: tests/data/reference/README.md; transformers; timm)."""
import json
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from timm.models import get_notrace_functions, get_notrace_modules

import timm_vit_variants  # noqa: F401
from model_probes import load_like_user
from porting.cli import main
from porting.hub_folder import save_pretrained_folder

REF = Path(__file__).resolve().parent / 'data' / 'reference'
TOL = 2e-5
TINY = dict(embed_dim=64, depth=2, num_heads=4, mlp_dim=239, patch_size=14, img_size=56)


def _nhwc(images: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(images).permute(0, 3, 1, 2).contiguous()


def _from_uint8(u8: np.ndarray) -> torch.Tensor:
    """big_vision's value_range(-1, 1), bit for bit (tests/data/reference/README.md)."""
    return _nhwc(np.float32(-1) + (u8.astype(np.float32) / np.float32(255)) * np.float32(2))


def _derived(tmp_path: Path, layout: str) -> Path:
    """The bare and old-probe layouts, rebuilt from siglip_tiny.npz by renaming its keys as the README says."""
    with np.load(REF / 'siglip_tiny.npz', allow_pickle=False) as src:
        arrays = {name: src[name] for name in src.files}
    if layout == 'bare':
        arrays = {name[len('params/'):]: value for name, value in arrays.items()}
    else:
        arrays = {name.replace('params/img/MAPHead_0/', 'params/img/'): value for name, value in arrays.items()}
    path = tmp_path / f'siglip_tiny_{layout}.npz'
    np.savez(path, **arrays)
    return path


def _convert(capsys, src, out, *extra):
    code = main(['convert', str(src), str(out), *extra])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert 'verification passed' in captured.out, captured.out
    return captured


@pytest.mark.parametrize('layout', ['unscanned', 'scanned', 'bare', 'old_probe'])
def test_big_vision_two_tower_layouts(tmp_path, capsys, layout, max_delta):
    src = {'unscanned': REF / 'siglip_tiny.npz', 'scanned': REF / 'siglip_tiny_scanned.npz'}.get(layout) or \
        _derived(tmp_path, layout)
    captured = _convert(capsys, src, tmp_path / 'out')
    assert 'max|dembedding|' in captured.out and 'the image tower under' in captured.err and 'skipped' in captured.err
    model = load_like_user(tmp_path / 'out')
    cfg = json.loads((tmp_path / 'out' / 'config.json').read_text())
    # a MAP-pooled tower, named as the registered SigLIP member nearest its shape (patch 14, as the source's)
    assert cfg['model_args']['global_pool'] == 'map'
    assert cfg['architecture'] in timm.list_models('simple_vit_*_patch14_siglip_*'), cfg['architecture']
    assert cfg['num_classes'] == 0 and cfg['model_args']['grid_mode'] == 'crop'
    io = np.load(REF / 'siglip_tiny_io.npz')
    with torch.no_grad():
        feats = model.forward_features(_nhwc(io['inputs_56x56']))
        out = model.forward_head(feats)
    max_delta(f'big_vision SigLIP {layout}, 56x56: embedding', out, io['pre_logits_56x56'], TOL)
    max_delta(f'big_vision SigLIP {layout}, 56x56: encoded tokens', feats, io['encoded_56x56'], TOL)
    card = (tmp_path / 'out' / 'README.md').read_text()
    assert 'image embedding' in card and 'text tower' in card and 'pipeline_tag: image-feature-extraction' in card


def test_the_valid_crop_at_384_patch_14(tmp_path, capsys, max_delta):
    _convert(capsys, REF / 'siglip_tiny384.npz', tmp_path / 'out', '--img-size', '384')
    model = load_like_user(tmp_path / 'out')
    assert model.patch_embed.grid_size == (27, 27)  # the last 6 pixel rows and columns play no role
    io = np.load(REF / 'siglip_tiny384_io.npz')
    x = _from_uint8(io['inputs_384x384_uint8'])
    with torch.no_grad():
        out = model(x).numpy()
        tokens = model.forward_features(x)[0, :27].numpy()
        padded = timm.create_model('simple_vit_base_patch16_siglip_224', **dict(
            model.config.to_dict(), img_size=378, grid_mode='pad'))  # padding: 384 -> a 28x28 grid, table resampled
        padded.load_state_dict(model.state_dict())
        off = np.abs(padded.eval()(x).numpy() - io['pre_logits_384x384']).max()
    max_delta('big_vision SigLIP 384/14 (VALID crop): embedding', out, io['pre_logits_384x384'], TOL)
    max_delta('big_vision SigLIP 384/14 (VALID crop): encoded row 0', tokens, io['encoded_384x384_img0_row0'], TOL)
    assert off > 1e-3


def test_a_resize_with_big_visions_rule(tmp_path, capsys, max_delta):
    captured = _convert(capsys, REF / 'siglip_tiny.npz', tmp_path / 'out', '--img-size', '84')
    assert 'target geometry (84x84, patch 14) passed' in captured.out and "big_vision's scipy zoom" in captured.out
    model = load_like_user(tmp_path / 'out')
    io = np.load(REF / 'siglip_tiny_io.npz')
    max_delta("big_vision SigLIP 56 -> 84 (big_vision's resize): position table", model.pos_embed,
              io['pos_embedding_84x84'], 1e-6)
    with torch.no_grad():
        out = model(_nhwc(io['inputs_84x84'])).numpy()
    max_delta("big_vision SigLIP 56 -> 84 (big_vision's resize): embedding", out, io['pre_logits_84x84'], TOL)


def test_a_registered_tag_loads_the_big_vision_file(tmp_path, max_delta):
    assert {'simple_vit_so400m_patch14_siglip_384.webli', 'simple_vit_base_patch16_siglip_224.v2_webli',
            'simple_vit_giantopt_patch16_siglip_384.v2_webli'} <= set(timm.list_pretrained('*siglip*'))
    cfg = timm.models.get_pretrained_cfg('simple_vit_so400m_patch14_siglip_384.webli')
    assert cfg.url.endswith('siglip/webli_en_so400m_384_58765454.npz') and cfg.num_classes == 0
    full = timm.create_model('simple_vit_so400m_patch14_siglip_384', device='meta')
    assert (full.embed_dim, len(full.blocks), full.blocks[0].mlp.fc1.out_features, full.attn_pool.num_heads,
            full.attn_pool.mlp.fc1.out_features, full.patch_embed.grid_size) == (1152, 27, 4304, 16, 4304, (27, 27))
    model = timm.create_model('simple_vit_base_patch16_siglip_224', pretrained=True, **TINY,
                              pretrained_cfg_overlay=dict(file=str(REF / 'siglip_tiny.npz')))
    io = np.load(REF / 'siglip_tiny_io.npz')
    with torch.no_grad():
        max_delta('big_vision SigLIP through a registered tag: embedding', model.eval()(_nhwc(io['inputs_56x56'])),
                  io['pre_logits_56x56'], TOL)



def test_a_folder_under_a_tower_name_keeps_its_own_class_count(tmp_path):
    """The towers default to no classifier through their pretrained_cfg, so timm's local-dir: still applies a
    folder's top-level num_classes (a re-headed tower, or any model whose nearest registered name is a tower)."""
    model = timm.create_model('simple_vit_base_patch16_siglip_224', **TINY, num_classes=10).eval()
    torch.nn.init.normal_(model.head.weight)
    save_pretrained_folder(model, tmp_path / 'tower10')
    config = tmp_path / 'tower10' / 'config.json'
    config.write_text(json.dumps(dict(json.loads(config.read_text()), architecture='simple_vit_base_patch16_siglip_224')))
    back = timm.create_model(f'local-dir:{tmp_path / "tower10"}', pretrained=True).eval()
    x = torch.randn(2, 3, 56, 56)
    with torch.no_grad():
        assert back.num_classes == 10 and torch.equal(back(x), model(x))
    assert timm.create_model('simple_vit_base_patch16_siglip_224', device='meta').num_classes == 0

# -- transformers ----------------------------------------------------------------------------------------------

def _hf_folder(tmp_path: Path, full: bool) -> Path:
    transformers = pytest.importorskip('transformers')
    vision = transformers.SiglipVisionConfig(hidden_size=64, intermediate_size=239, num_hidden_layers=2,
                                             num_attention_heads=4, image_size=56, patch_size=14)
    torch.manual_seed(3)
    if full:
        text = transformers.SiglipTextConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                             num_attention_heads=2, vocab_size=64, bos_token_id=0, eos_token_id=1,
                                             pad_token_id=2)
        model = transformers.SiglipModel(transformers.SiglipConfig(vision_config=vision.to_dict(),
                                                                   text_config=text.to_dict()))
    else:
        model = transformers.SiglipVisionModel(vision)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.1)
    folder = tmp_path / ('siglip_full' if full else 'siglip_vision')
    model.save_pretrained(str(folder))
    return folder, (model.vision_model if full else model).eval()


@pytest.mark.parametrize('full', [False, True])
def test_transformers_siglip_folders(tmp_path, capsys, full, max_delta):
    folder, reference = _hf_folder(tmp_path, full)
    captured = _convert(capsys, folder, tmp_path / 'out')
    assert ('the text tower' in captured.err) == full
    model = load_like_user(tmp_path / 'out')
    x = torch.randn(2, 3, 56, 56)
    with torch.no_grad():
        expected = reference(pixel_values=x)
        feats = model.forward_features(x)
        name = 'SiglipModel' if full else 'SiglipVisionModel'
        max_delta(f'transformers {name} 56x56: pooler_output', model.forward_head(feats), expected.pooler_output, TOL)
        max_delta(f'transformers {name} 56x56: last_hidden_state', feats, expected.last_hidden_state, TOL)
    captured = _convert(capsys, folder, tmp_path / 'big', '--img-size', '84')
    assert 'target geometry (84x84, patch 14) passed' in captured.out and 'interpolate_pos_encoding' in captured.out


# -- timm ------------------------------------------------------------------------------------------------------

def test_timm_siglip_checkpoints(tmp_path, capsys, max_delta):
    from timm.models import save_for_hf

    args = dict(embed_dim=64, depth=2, num_heads=4, img_size=56, patch_size=14, mlp_ratio=239.5 / 64)
    reference = timm.create_model('vit_base_patch16_siglip_224', **args).eval()
    torch.manual_seed(4)
    for p in reference.parameters():
        torch.nn.init.normal_(p, std=0.1)
    torch.save(reference.state_dict(), tmp_path / 'siglip.pth')
    save_for_hf(reference, str(tmp_path / 'hub'), model_args=args)
    x = torch.randn(2, 3, 56, 56)
    for src, extra in ((tmp_path / 'hub', []), (tmp_path / 'siglip.pth', ['--num-heads', '4'])):
        out = tmp_path / f'out_{src.stem}'
        _convert(capsys, src, out, *extra)
        with torch.no_grad():  # timm's siglip models use exact GELU, read off the architecture (or assumed)
            max_delta(f"timm vit_*_siglip (map) from {src.name}: embedding", load_like_user(out)(x), reference(x), TOL)



@pytest.mark.parametrize('arch', ['vit_so400m_patch14_siglip_384', 'vit_so400m_patch14_siglip_gap_384'])
def test_timm_folders_of_a_size_the_patch_does_not_divide(tmp_path, capsys, arch, max_delta):
    """timm's SigLIP towers declare 384 at patch 14 and crop it to 27x27 (a VALID conv): the check feeds both sides
    the declared size (62 here: 4x4 patches of 14 and 6 pixels cropped), not the 378 (56) the grid covers."""
    from timm.models import save_for_hf

    args = dict(embed_dim=64, depth=1, num_heads=4, img_size=62)
    reference = timm.create_model(arch, **args).eval()
    torch.manual_seed(4)
    for p in reference.parameters():
        torch.nn.init.normal_(p, std=0.1)
    save_for_hf(reference, str(tmp_path / 'hub'), model_args=args)
    _convert(capsys, tmp_path / 'hub', tmp_path / 'out')
    model = load_like_user(tmp_path / 'out')
    assert model.config.img_size == (62, 62) and model.config.grid_mode == 'crop'
    x = torch.randn(2, 3, 62, 62)
    with torch.no_grad():
        max_delta(f'timm {arch} (62 px, patch 14) folder: embedding', model(x), reference(x), TOL)

# -- the MAP head everywhere the family goes ----------------------------------------------------------------------

def test_the_map_head_under_timms_interface(tmp_path, capsys):
    from torchvision.models.feature_extraction import create_feature_extractor, get_graph_node_names

    _convert(capsys, REF / 'siglip_tiny.npz', tmp_path / 'out')
    model = timm.create_model(f'local-dir:{tmp_path / "out"}', pretrained=True).eval()
    x = torch.randn(2, 3, 70, 56)  # non-square: a 5x4 grid, the table resampled with big_vision's rule
    with torch.no_grad():
        final, inter = model.forward_intermediates(x)
        torch.testing.assert_close(final, model.forward_features(x))
        assert [t.shape for t in inter] == [(2, 64, 5, 4)] * 2
        embedding = model(x)
        torch.testing.assert_close(model.forward_head(final, pre_logits=True), embedding)
        torch.testing.assert_close(torch.jit.script(load_like_user(tmp_path / 'out'))(x), embedding)
        tracer = dict(leaf_modules=get_notrace_modules(), autowrap_functions=get_notrace_functions())
        _, nodes = get_graph_node_names(model, tracer_kwargs=tracer)
        fx = create_feature_extractor(model, return_nodes=[nodes[-1]], tracer_kwargs=tracer)
        torch.testing.assert_close(fx(x)[nodes[-1]], embedding)
    features = timm.create_model(f'local-dir:{tmp_path / "out"}', pretrained=True, features_only=True, out_indices=2)
    assert [f.shape for f in features(x)] == [(2, 64, 5, 4), (2, 64, 5, 4)]
    model.reset_classifier(7)
    assert model(x).shape == (2, 7) and model.attn_pool is not None
    model.reset_classifier(0, global_pool='avg')
    assert model.attn_pool is None and 'attn_pool.latent' not in model.state_dict()
    with pytest.raises(ValueError, match="global_pool='map' needs"):
        model.reset_classifier(0, global_pool='map')


def test_the_map_head_exports_for_any_size(tmp_path, capsys):
    _convert(capsys, REF / 'siglip_tiny.npz', tmp_path / 'out')
    for name in ('tower.onnx', 'tower.pt2'):
        code = main(['export', str(tmp_path / 'out'), str(tmp_path / name)])
        out = capsys.readouterr()
        assert code == 0 and 'dynamic batch, height and width' in out.out, out.err
        assert 'verification passed' in out.out and 'cropped to whole patches' not in out.err


def test_transformers_timm_wrapper_and_torch_hub_serve_the_tower(tmp_path, capsys):
    transformers = pytest.importorskip('transformers')
    _convert(capsys, REF / 'siglip_tiny.npz', tmp_path / 'out')
    ours = load_like_user(tmp_path / 'out')
    wrapped = transformers.AutoModel.from_pretrained(str(tmp_path / 'out')).eval()
    assert type(wrapped).__name__ == 'TimmWrapperModel'
    x = torch.randn(1, 3, 56, 56)
    with torch.no_grad():
        out = wrapped(pixel_values=x)
        torch.testing.assert_close(out.pooler_output, ours(x), atol=1e-6, rtol=0)
        torch.testing.assert_close(out.last_hidden_state, ours.forward_features(x), atol=1e-6, rtol=0)
    repo = Path(__file__).resolve().parents[1]
    hub = torch.hub.load(str(repo), 'simple_vit_so400m_patch14_siglip_384', source='local', depth=1)
    assert hub.attn_pool is not None and hub.patch_embed.grid_size == (27, 27) and hub.num_classes == 0
