"""I-JEPA: facebookresearch/ijepa's ``.pth.tar`` (tests/data/ijepa, made by its own code: see its README.md) and
transformers' ``IJepaModel`` folders, read by the I-JEPA readers, give the source's own outputs at the stored grid
and its libraries' own readings at two more (timm's ``checkpoint_filter_fn``, which resizes the table as it loads
these files, and transformers' ``interpolate_pos_encoding``)."""
import fractions
from pathlib import Path

import pytest
import timm
import torch

from porting.cli import main
from porting.families._ijepa_ref import ijepa_outputs
from porting.verification.result import Check
from timm_vit_variants import SimpleVisionTransformer
from timm_vit_variants.checkpoints import open_checkpoint
from timm_vit_variants.checkpoints.options import ReaderOptions
from timm_vit_variants.checkpoints.files import discover
from timm_vit_variants.checkpoints.stores import open_store
from timm_vit_variants.errors import ViTVariantsError
from timm_vit_variants.families.ijepa import IJEPA_CFGS, IJEPA_ROWS, IJepaCheckpoint, IJepaFolderCheckpoint

transformers = pytest.importorskip('transformers')

DATA = Path(__file__).parent / 'data' / 'ijepa'
CHECKPOINT = DATA / 'tiny-vit.p4-16px.pth.tar'
STORED = (16, 16)  # the fixture's 4x4 grid of 4-pixel patches
GRIDS = (STORED, (24, 24), (12, 20))  # the stored grid, a larger one, a non-square one
BOUND = 2e-5
ENTRIES = {True: 'target_encoder', False: 'encoder'}  # use_ema -> the entry read


def _outputs() -> dict:
    return torch.load(DATA / 'outputs.pt', weights_only=True)


def _input(size) -> torch.Tensor:
    if tuple(size) == STORED:
        return _outputs()['input']
    return torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(2))


def _ours(reader_cls, path: Path, store, config: dict, config_path, **hints):
    """Our model of the source, filled by ``reader_cls``; it runs any grid, resizing the table by the source's rule."""
    with reader_cls(str(path), store, config, config_path, ReaderOptions(**hints),
                    layout=SimpleVisionTransformer.state_layout) as src:
        model = timm.create_model('simple_vit_tiny', pretrained=False, **src.config.to_dict()).eval()
        state = model.state_dict()
        src.fill_into(state)
        return src, model


@pytest.mark.parametrize('use_ema', [True, False])
def test_checkpoint_entry_gives_the_sources_tokens(use_ema, max_delta):
    """The target encoder (EMA) by default, the context encoder without EMA: ours gives what the repo's own
    VisionTransformer gave for that entry, and pools the mean of those tokens."""
    src, model = _ours(IJepaCheckpoint, CHECKPOINT, open_store([str(CHECKPOINT)], use_ema=use_ema), {}, None,
                       num_heads=2)
    entry = ENTRIES[use_ema]
    assert (src.format, src.weights_key) == ('ijepa', entry) and any(f"'{entry}' entry" in n for n in src.notes)
    flat = src.config.to_flat()
    assert {k: flat[k] for k in ('class_token', 'pos_embed_cls_slot', 'global_pool', 'fc_norm', 'act_layer', 'norm_eps',
                                 'pos_embed_resample')} == dict(class_token=False, pos_embed_cls_slot=False,
                                                                global_pool='avg', fc_norm=False, act_layer='gelu',
                                                                norm_eps=1e-6, pos_embed_resample='timm')
    expected = _outputs()[entry]
    with torch.no_grad():
        tokens = model.forward_features(_outputs()['input'])
        pooled = model.forward_head(tokens)
    max_delta(f'{entry} tokens vs facebookresearch/ijepa', tokens, expected, BOUND)
    max_delta(f'{entry} pooled vs the mean of its tokens', pooled, expected.mean(1), BOUND)


def test_a_file_without_an_encoder_entry_is_no_ijepa_checkpoint(tmp_path):
    """A bare state dict (timm's layout, no I-JEPA entry) read as I-JEPA is refused, naming the entry it lacks."""
    bare = tmp_path / 'bare.pth'
    torch.save(torch.load(CHECKPOINT, weights_only=True)['target_encoder'], bare)
    with pytest.raises(ViTVariantsError, match='not a facebookresearch/ijepa training checkpoint') as caught:
        _ours(IJepaCheckpoint, bare, open_store([str(bare)]), {}, None, num_heads=2)
    assert (caught.value.path, caught.value.key) == (str(bare), 'target_encoder')


@pytest.mark.parametrize('size', GRIDS)
def test_checkpoint_matches_timms_reading_at_three_grids(size, max_delta):
    """At each grid ours (its table resized by the 'timm' rule) gives what timm's VisionTransformer gives once its
    checkpoint_filter_fn has read the same file for that grid."""
    src, model = _ours(IJepaCheckpoint, CHECKPOINT, open_store([str(CHECKPOINT)]), {}, None, num_heads=2)
    target = None if tuple(size) == STORED else src.config.replace(img_size=size)
    x = _input(size)
    ref = ijepa_outputs(Check(str(CHECKPOINT), 'ijepa', src.config, target, None if target is None else 'timm',
                              weights_key=src.weights_key), x)
    assert 'checkpoint_filter_fn' in ref.name
    with torch.no_grad():
        tokens = model.forward_features(x)
        max_delta(f'tokens {size} vs timm', tokens, ref.features, BOUND)
        max_delta(f'pooled {size} vs timm', model.forward_head(tokens), ref.logits, BOUND)


def _transformers_folder(path: Path) -> 'transformers.IJepaModel':
    """A tiny random transformers IJepaModel (every weight moved off its init), saved to ``path``."""
    torch.manual_seed(0)
    config = transformers.IJepaConfig(image_size=16, patch_size=4, hidden_size=16, num_hidden_layers=2,
                                      num_attention_heads=2, intermediate_size=64, layer_norm_eps=1e-6)
    model = transformers.IJepaModel(config, add_pooling_layer=False).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(str(path))
    return model


@pytest.mark.parametrize('size', GRIDS)
def test_transformers_folder_matches_transformers_at_three_grids(size, tmp_path, max_delta):
    """At each grid ours (its table resized by the 'hf' rule) gives IJepaModel's tokens under its own
    interpolate_pos_encoding, and their mean."""
    source = _transformers_folder(tmp_path / 'src')
    files, config, config_path = discover(str(tmp_path / 'src'))
    src, model = _ours(IJepaFolderCheckpoint, tmp_path / 'src', open_store(files), config, config_path)
    flat = src.config.to_flat()
    assert flat['pos_embed_resample'] == 'hf' and not flat['class_token']
    x = _input(size)
    with torch.no_grad():
        expected = source(pixel_values=x, interpolate_pos_encoding=True).last_hidden_state
        tokens = model.forward_features(x)
        max_delta(f'tokens {size} vs transformers', tokens, expected, BOUND)
        max_delta(f'pooled {size} vs transformers', model.forward_head(tokens), expected.mean(1), BOUND)


def test_rows_and_tags_are_the_releases():
    """Each tag names a registered row; the rows are the released networks (no [CLS], mean of the normed tokens)."""
    for tag, cfg in IJEPA_CFGS.items():
        name = tag.split('.')[0]
        assert name in IJEPA_ROWS and cfg['url'].startswith('https://dl.fbaipublicfiles.com/ijepa/')
        assert cfg['url'].endswith('.pth.tar') and cfg['num_classes'] == 0
    shapes = {name: (args['patch_size'], args['img_size'], args.get('embed_dim', 1280))
              for name, (_, args, _) in IJEPA_ROWS.items()}
    assert shapes == {'simple_vit_huge_patch14_ijepa_224': (14, 224, 1280),
                      'simple_vit_huge_patch16_ijepa_448': (16, 448, 1280),
                      'simple_vit_giant_patch16_ijepa_224': (16, 224, 1408)}


def test_checkpoint_with_code_objects_is_refused(tmp_path, capsys):
    """A .pth.tar whose entries need more than tensors and plain data to unpickle is refused, naming the file."""
    checkpoint = torch.load(CHECKPOINT, weights_only=True)
    checkpoint['lr'] = fractions.Fraction(1, 3)  # a class torch's weights-only unpickler does not allow
    bad = tmp_path / 'IN1K-vit.h.14-300e.pth.tar'
    torch.save(checkpoint, bad)
    with pytest.raises(ViTVariantsError, match='refused to unpickle') as caught:
        open_checkpoint(bad, num_heads=2)
    assert caught.value.path == str(bad)
    assert main(['convert', str(bad), str(tmp_path / 'out'), '--num-heads', '2']) == 1
    err = capsys.readouterr().err
    assert err.count('error:') == 1 and 'refused to unpickle' in err and 'Traceback' not in err
