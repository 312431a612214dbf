"""NaFlex: one batch, every image at its own size. Each input form, mask, position and pooling option against each
image run alone; big_vision's naflex_vit through fixtures its own code wrote (tests/data/reference/README.md, §6);
transformers' Siglip2VisionModel; big_vision's resize_to_sequence sizes; timm's NaFlex loader driving our model."""
import json
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from timm.data import create_dataset, create_naflex_loader, resolve_data_config
from timm.data.naflex_dataset import NaFlexCollator
from timm.data.naflex_transforms import patchify_image
from timm.loss import LabelSmoothingCrossEntropy
from timm.optim import create_optimizer_v2
from timm.task import ClassificationTask

import timm_vit_variants  # noqa: F401
from model_probes import load_like_user
from porting.cli import main
from timm_vit_variants import SimpleVisionTransformer
from timm_vit_variants.checkpoints import open_checkpoint
from timm_vit_variants.errors import ViTVariantsError
from timm_vit_variants.naflex_transforms import ResizeToBudget, naflex_batch, size_for_budget
from train_fixtures import make_digits_folder, make_image_folder

REF = Path(__file__).resolve().parent / 'data' / 'reference'
TOL = 2e-5
ALONE_TOL = 1e-5
TINY = dict(embed_dim=32, depth=2, num_heads=2, mlp_dim=64, patch_size=8, img_size=32, num_classes=5)
# Sizes with different grids and aspect ratios, one not a patch multiple.
SIZES = [(24, 40), (48, 16), (32, 32), (20, 52), (8, 8)]

# (option, model kwargs): every position option and pooling option, and the per-patch embeddings.
OPTIONS = {
    'sincos-gap': dict(pos_embed='sincos', global_pool='avg'),
    'learn-token-cls-slot': dict(pos_embed='learn', class_token=True, global_pool='token', pos_embed_cls_slot=True),
    'cpe-gap': dict(pos_embed='cpe', global_pool='avg'),
    'learn+cpe-map-crop': dict(pos_embed='learn+cpe', global_pool='map', grid_mode='crop'),
    'sincos+cpe-token': dict(pos_embed='sincos+cpe', class_token=True, global_pool='token'),
    'learn-flexi-map-linear': dict(pos_embed='learn', global_pool='map', pos_embed_resample='flexi',
                                   patch_embed='linear', grid_mode='crop'),
    'sincos-mlp-embed': dict(pos_embed='sincos', patch_embed='mlp'),
    'sincos-dual-patch-norm': dict(pos_embed='sincos', patch_norm='dual'),
    'learn-bigvision-gap-pad': dict(pos_embed='learn', global_pool='avg', pos_embed_resample='bigvision'),
}


def _model(**kwargs) -> SimpleVisionTransformer:
    torch.manual_seed(0)
    model = SimpleVisionTransformer(**dict(TINY, **kwargs)).eval()
    with torch.no_grad():  # a zero-init head would make every output 0
        for p in model.parameters():
            if p.abs().sum() == 0:
                p.normal_(std=0.1)
    return model


def _images(sizes=SIZES, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(3, h, w, generator=generator) for h, w in sizes]


def _alone(model, images):
    with torch.no_grad():
        return [model(image[None])[0] for image in images], [model.forward_features(image[None])[0] for image in images]


@pytest.mark.parametrize('option', list(OPTIONS))
def test_a_list_equals_each_image_alone(option, max_delta):
    model = _model(**OPTIONS[option])
    images = _images()
    alone_out, alone_feats = _alone(model, images)
    with torch.no_grad():
        out = model(images)
        feats = model.forward_features(images)
    assert out.shape == (len(images), 5)
    for i, (expected, tokens) in enumerate(zip(alone_out, alone_feats)):
        max_delta(f'list vs alone, {option}, image {i}: output', out[i], expected, ALONE_TOL)
        n = tokens.shape[0]
        max_delta(f'list vs alone, {option}, image {i}: tokens', feats['patches'][i, :n], tokens, ALONE_TOL)
        assert int(feats['patch_valid'][i].sum()) == n - model.num_prefix_tokens


@pytest.mark.parametrize('option', ['sincos-gap', 'learn-token-cls-slot', 'learn-flexi-map-linear', 'cpe-gap'])
def test_timms_dict_equals_the_list_and_padding_is_never_seen(option, max_delta):
    model = _model(**OPTIONS[option])
    images = [im[:, :im.shape[1] // 8 * 8, :im.shape[2] // 8 * 8] for im in _images()]  # whole patches
    pieces = [patchify_image(im, (8, 8)) for im in images]
    # timm's own collator (it adds 'seq_len'), padded beyond the longest image
    batch, _ = NaFlexCollator(max_seq_len=40)([({'patches': p, 'patch_coord': c, 'patch_valid': v}, 0)
                                                for p, c, v in pieces])
    with torch.no_grad():
        from_list = model(images)
        from_dict = model(batch)
        batch['patches'][~batch['patch_valid']] = 1e4  # garbage where the padding is
        batch['patch_coord'][~batch['patch_valid']] = 3
        garbage = model(batch)
    max_delta(f"timm's collated dict vs the list, {option}", from_dict, from_list, ALONE_TOL)
    assert torch.equal(garbage, from_dict)
    assert model.get_patch_size() == (8, 8)


def test_forward_intermediates_and_head_take_naflex_inputs(max_delta):
    model = _model(pos_embed='learn', class_token=True, global_pool='token')
    images = _images()[:3]
    with torch.no_grad():
        final, inter = model.forward_intermediates(images, indices=[0, 1], output_fmt='NLC')
        alone = [model.forward_intermediates(im[None], indices=[0, 1], output_fmt='NLC')[1] for im in images]
        out = model.forward_intermediates(images, indices=1, output_fmt='NLC', output_dict=True,
                                          return_prefix_tokens=True)
        head = model.forward_head(model.forward_features(images))
    for i, im in enumerate(images):
        n = alone[i][1].shape[1]
        max_delta(f'forward_intermediates list vs alone, image {i}', inter[1][i, :n], alone[i][1][0], ALONE_TOL)
    assert set(out) >= {'image_intermediates', 'image_features', 'patch_valid', 'image_intermediates_prefix'}
    assert torch.allclose(head, model(images), atol=1e-6)
    with pytest.raises(ValueError, match='NLC'):
        model.forward_intermediates(images)


def test_a_list_runs_what_a_batch_runs_past_the_file_limits(max_delta):
    """One 2048x2064 image is 128x129 = 16,512 tokens, past the default tokens limit on what a file may claim:
    the model runs what it is given, whatever the form."""
    torch.manual_seed(0)
    model = SimpleVisionTransformer(embed_dim=4, depth=1, num_heads=1, mlp_dim=8, patch_size=16, img_size=32,
                                    num_classes=3).eval()
    torch.nn.init.normal_(model.head.weight)
    image = torch.randn(3, 2048, 2064)
    with torch.no_grad():
        listed, batched = model([image]), model(image[None])
    max_delta('one 16,512-token image: a list vs an NCHW batch', listed, batched, ALONE_TOL)


def test_token_dropping_trains_on_fewer_tokens_and_evaluation_keeps_all():
    model = _model(patch_drop_rate=0.5)
    images = _images()[:3]
    counts = [-(-h // 8) * -(-w // 8) for _, h, w in (im.shape for im in images)]  # grid_mode 'pad'
    model.train()
    dropped = model.forward_features(images)['patch_valid'].sum(1).tolist()
    assert all(0 < d <= max(1, round(n * 0.5)) for d, n in zip(dropped, counts))
    model(images).sum().backward()  # a training step runs
    model.eval()
    assert model.forward_features(images)['patch_valid'].sum(1).tolist() == counts


def test_bad_naflex_inputs_raise_one_error_type():
    model = _model()
    good = naflex_batch(_images()[:2], 8)
    bad = {
        'patches': dict(good, patches=good['patches'][..., :10]),
        'patch_coord': dict(good, patch_coord=good['patch_coord'][:, :3]),
        'patch_valid': dict(good, patch_valid=torch.zeros_like(good['patch_valid'])),
    }
    for key, value in bad.items():
        with pytest.raises(ViTVariantsError, match=key):
            model(value)
    with pytest.raises(ViTVariantsError, match='CHW'):
        model([torch.randn(2, 3, 8, 8)])
    with pytest.raises(ViTVariantsError, match='pool'):
        _model(grid_mode='pool')(_images()[:2])
    with pytest.raises(ViTVariantsError, match='list of images'):
        _model(patch_embed='overlap')(good)
    assert _model(patch_embed='overlap')(_images()[:2]).shape == (2, 5)  # a list works for any embedding


# -- big_vision's NaFlex tower ------------------------------------------------------------------------------------

def _fixture_batch(io, pre=''):
    valid = torch.from_numpy(io[pre + 'ptype'] == 1)
    coords = torch.stack([torch.from_numpy(io[pre + 'yabs']), torch.from_numpy(io[pre + 'xabs'])], -1)
    return {'patches': torch.from_numpy(io[pre + 'patches']), 'patch_coord': coords, 'patch_valid': valid}, valid


def _posemb_rows(model, batch):
    """Each valid patch's row of the learned table resampled, by the model's resampler, to its image's grid."""
    rows = []
    for coords, valid in zip(batch['patch_coord'], batch['patch_valid']):
        coords = coords[valid]
        h, w = (int(v) + 1 for v in coords.max(0).values)
        table = model.abs_pos(model.pos_embed, h, w, *model.patch_embed.grid_size)[0]
        rows.append(table[coords[:, 0] * w + coords[:, 1]])
    return torch.cat(rows)


def test_big_visions_naflex_tower_converts_and_matches_its_own_outputs(tmp_path, capsys, max_delta):
    code = main(['convert', str(REF / 'naflex_tiny.npz'), str(tmp_path / 'out')])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert 'verification passed, but the channel count 3 was assumed' in captured.out  # (P*P*C, D) records no C
    assert 'vs timm NaFlexVit' in captured.out and 'grids 3x7, 6x4, 5x5' in captured.out
    assert 'NaFlex tower' in captured.err and 'in_chans=3' in captured.err  # the assumed channel count is said
    model = load_like_user(tmp_path / 'out')
    cfg = json.loads((tmp_path / 'out' / 'config.json').read_text())['model_args']
    assert (cfg['patch_embed'], cfg['pos_embed_resample'], cfg['global_pool'], cfg['img_size']) == \
        ('linear', 'flexi', 'map', 64)
    io = np.load(REF / 'naflex_tiny_io.npz')
    for pre in ('', 'small_'):  # 5 aspect ratios, then two grids below the table's in both directions
        batch, valid = _fixture_batch(io, pre)
        with torch.no_grad():
            feats = model.forward_features(batch)
            pooled = model.forward_head(feats)
            tokens = _posemb_rows(model, batch)
        which = 'two small grids' if pre else 'five aspect ratios'
        max_delta(f'big_vision NaFlex, {which}: embedding', pooled, io[pre + 'pre_logits'], TOL)
        max_delta(f'big_vision NaFlex, {which}: encoded tokens', feats['patches'][valid],
                  io[pre + 'encoded'][valid.numpy()], TOL)
        max_delta(f'big_vision NaFlex, {which}: position embeddings', tokens, io[pre + 'posemb'][valid.numpy()], 1e-6)
    # the raw images through our preprocessing, then the model, as a list: the same embeddings
    images = []
    for i in io['raw_index']:
        u8 = io[f'raw{i}_uint8']
        x = torch.from_numpy(np.float32(-1) + (u8.astype(np.float32) / np.float32(255)) * np.float32(2))
        images.append(ResizeToBudget(16, 32)(x.permute(2, 0, 1)))
    assert [tuple(im.shape[1:]) for im in images] == [tuple(hw) for hw in io['resized_hw']]
    with torch.no_grad():
        from_raw = model(images)
    # tf's and torch's antialiased resizes differ (pixels by up to 2.5e-5)
    max_delta('big_vision NaFlex from raw uint8 images through ResizeToBudget: embedding', from_raw, io['pre_logits'],
              5e-5)


def test_the_registered_naflex_tag_loads_the_big_vision_file(max_delta):
    assert {'simple_vit_base_patch16_siglip_naflex.v2_webli', 'simple_vit_so400m_patch16_siglip_naflex.v2_webli'} <= \
        set(timm.list_pretrained('*naflex*'))
    cfg = timm.models.get_pretrained_cfg('simple_vit_so400m_patch16_siglip_naflex.v2_webli')
    assert cfg.url.endswith('siglip2/siglip2_so400m16_naflex.npz') and cfg.num_classes == 0
    full = timm.create_model('simple_vit_so400m_patch16_siglip_naflex', device='meta')
    assert (full.embed_dim, len(full.blocks), full.pos_embed.shape[1], full.config.patch.kind) == \
        (1152, 27, 256, 'linear')
    model = timm.create_model('simple_vit_base_patch16_siglip_naflex', pretrained=True, embed_dim=64, depth=2,
                              num_heads=4, mlp_dim=239, img_size=64,
                              pretrained_cfg_overlay=dict(file=str(REF / 'naflex_tiny.npz'))).eval()
    io = np.load(REF / 'naflex_tiny_io.npz')
    batch, _ = _fixture_batch(io)
    with torch.no_grad():
        max_delta('big_vision NaFlex through a registered tag: embedding', model(batch), io['pre_logits'], TOL)


def test_preprocessing_sizes_are_big_visions():
    cases = json.loads((REF / 'naflex_resize_sizes.json').read_text())['cases']
    assert len(cases) == 42
    for case in cases:
        args = tuple(case['image_hw']), case['patch_size'], case['max_sequence_len']
        if 'error' in case:
            with pytest.raises(ViTVariantsError):
                size_for_budget(*args)
        else:
            assert list(size_for_budget(*args)) == case['resized_hw'], case
    with pytest.raises(ViTVariantsError, match='max_seq_len'):
        naflex_batch(_images()[:2], 8, max_seq_len=4)


# -- transformers' Siglip2VisionModel -----------------------------------------------------------------------------

def test_transformers_siglip2_naflex_tower(tmp_path, capsys, max_delta):
    transformers = pytest.importorskip('transformers')
    config = transformers.Siglip2VisionConfig(hidden_size=64, intermediate_size=239, num_hidden_layers=2,
                                              num_attention_heads=4, patch_size=16, num_patches=16)
    torch.manual_seed(3)
    reference = transformers.Siglip2VisionModel(config)
    for p in reference.parameters():
        torch.nn.init.normal_(p, std=0.1)
    reference.save_pretrained(str(tmp_path / 'hf'))
    reference.eval()
    for out, extra in (('out', []), ('wide', ['--img-size', '96', '160'])):
        code = main(['convert', str(tmp_path / 'hf'), str(tmp_path / out), *extra])
        captured = capsys.readouterr()
        assert code == 0 and 'verification passed vs transformers Siglip2VisionModel' in captured.out, captured
    assert 'target geometry (96x160, patch 16) passed' in captured.out
    model = load_like_user(tmp_path / 'out')
    images = [im for im in _images([(48, 112), (144, 48), (80, 80), (48, 160)], seed=2)]
    batch = naflex_batch(images, 16)
    grids = torch.tensor([[h // 16, w // 16] for _, h, w in (im.shape for im in images)])
    with torch.no_grad():
        expected = reference(pixel_values=batch['patches'], pixel_attention_mask=batch['patch_valid'].long(),
                             spatial_shapes=grids)
        ours = model.forward_features(images)
        pooled = model.forward_head(ours)
    valid = batch['patch_valid']
    max_delta('transformers Siglip2VisionModel, 4 aspect ratios: pooler_output', pooled, expected.pooler_output, TOL)
    max_delta('transformers Siglip2VisionModel, 4 aspect ratios: last_hidden_state', ours['patches'][valid],
              expected.last_hidden_state[valid], TOL)



# -- timm's NaFlexVit checkpoints ----------------------------------------------------------------------------------

@pytest.mark.parametrize('interp, rule', [('bilinear', 'flexi'), ('bicubic', 'timm')])
def test_timms_naflexvit_checkpoints(tmp_path, capsys, max_delta, interp, rule):
    """timm's naflexvit_* weights (the SigLIP 2 NaFlex towers timm hosts): a Hub folder records its table resize
    and activation; a bare state dict records neither, so they are assumed or given, and said so."""
    from timm.models import save_for_hf

    args = dict(embed_dim=64, depth=2, num_heads=4, mlp_ratio=239.5 / 64, pos_embed_grid_size=(4, 4),
                pos_embed_interp_mode=interp)
    reference = timm.create_model('naflexvit_base_patch16_siglip', **args).eval()
    torch.manual_seed(5)
    for p in reference.parameters():
        torch.nn.init.normal_(p, std=0.1)
    save_for_hf(reference, str(tmp_path / 'hub'), model_args=args)
    torch.save(reference.state_dict(), tmp_path / 'naflex.pth')
    images = _images([(48, 112), (144, 48), (80, 80), (48, 192)], seed=4)
    with torch.no_grad():
        expected = reference(naflex_batch(images, 16))

    code = main(['convert', str(tmp_path / 'hub'), str(tmp_path / 'out')])
    captured = capsys.readouterr()
    assert code == 0 and 'verification passed vs timm' in captured.out and 'grids 3x7, 6x4, 5x5' in captured.out
    cfg = json.loads((tmp_path / 'out' / 'config.json').read_text())['model_args']
    assert (cfg['patch_embed'], cfg['pos_embed_resample'], cfg['img_size'], cfg['act_layer']) == \
        ('linear', rule, 64, 'gelu_tanh')
    with torch.no_grad():
        max_delta(f'timm NaFlexVit folder ({interp} table resize), 4 aspect ratios: embedding',
                  load_like_user(tmp_path / 'out')(images), expected, TOL)

    code = main(['convert', str(tmp_path / 'naflex.pth'), str(tmp_path / 'bare'), '--num-heads', '4',
                 '--act-layer', 'gelu_tanh'])
    captured = capsys.readouterr()
    assert code == 0 and "table resize rule 'timm' were assumed" in captured.out, captured.out
    with torch.no_grad():
        bare = load_like_user(tmp_path / 'bare')(images)
    if rule == 'timm':  # NaFlexVitCfg's default, assumed: right here
        max_delta('timm NaFlexVit state dict (bicubic, assumed), 4 aspect ratios: embedding', bare, expected, TOL)
    else:  # the assumption is wrong for a bilinear tower, which is why it is stated
        assert (bare - expected).abs().max() > 1e-4

    torch.save(dict(reference.state_dict(), **{'embeds.pos_embed_y': torch.zeros(1, 8, 64)}), tmp_path / 'fac.pth')
    with pytest.raises(ViTVariantsError, match='factorised tables') as refused:
        open_checkpoint(tmp_path / 'fac.pth', num_heads=4)
    assert refused.value.key == 'embeds.pos_embed_y'

# -- timm's NaFlex loader and train.py --naflex-loader -------------------------------------------------------------

def test_timms_naflex_loader_drives_our_model(tmp_path):
    """train.py --naflex-loader, call for call (train.py @ main: get_patch_size -> create_naflex_loader for train
    and eval -> ClassificationTask -> steps with the linear loss scale -> validate with model(input))."""
    root = make_image_folder(tmp_path / 'train', size=24, splits=('train',))
    make_digits_folder(root, per_class=2, size=24)
    model = timm.create_model('simple_vit_tiny', embed_dim=32, depth=2, num_heads=2, mlp_dim=64, patch_size=4,
                              num_classes=10)
    patch_size = model.get_patch_size()
    data_config = resolve_data_config({}, model=model)
    dataset_train = create_dataset('', root=str(root), split='train', is_training=True, batch_size=4)
    dataset_eval = create_dataset('', root=str(root), split='validation', is_training=False, batch_size=4)
    common = dict(mean=data_config['mean'], std=data_config['std'], num_workers=0, device=torch.device('cpu'),
                  pin_memory=False, use_prefetcher=True)
    loader_train = create_naflex_loader(dataset_train, patch_size=patch_size, train_seq_lens=(16, 36), batch_size=4,
                                        is_training=True, **common)
    loader_eval = create_naflex_loader(dataset_eval, patch_size=patch_size, max_seq_len=40, batch_size=8, **common)
    task = ClassificationTask(model=model, criterion=LabelSmoothingCrossEntropy(0.1), device=torch.device('cpu'),
                              verbose=False)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer = create_optimizer_v2(task.get_trainable_module(), opt='adamw', lr=1e-3)
    task.get_trainable_module().train()
    seen_lengths = set()
    for step, (input, target) in enumerate(loader_train):
        assert isinstance(input, dict)
        seen_lengths.add(input['patches'].shape[1])
        loss = task(input, target)['loss'] * (input['patches'].shape[0] / 4)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        assert torch.isfinite(loss)
    assert seen_lengths
    changed = [k for k, v in model.state_dict().items() if not torch.equal(v, before[k])]
    assert 'patch_embed.proj.weight' in changed and 'blocks.1.mlp.fc2.weight' in changed  # the dict steps trained it
    model.eval()
    count = 0
    with torch.inference_mode():
        for input, target in loader_eval:
            output = model(input)
            assert not input['patch_valid'].all()  # 36 patches an image, rows of 40: padding to be left unseen
            for i, valid in enumerate(input['patch_valid']):  # each image as if alone
                alone = model({'patches': input['patches'][i:i + 1, valid],
                               'patch_coord': input['patch_coord'][i:i + 1, valid]})
                assert (output[i] - alone[0]).abs().max() < ALONE_TOL
            count += target.numel()
    assert count == 20 and output.shape[-1] == 10


def test_our_trainer_takes_the_naflex_loader(tmp_path, capsys, monkeypatch):
    from timm_vit_variants.training.trainer import main as train_main

    forward, inputs = SimpleVisionTransformer.forward, []
    monkeypatch.setattr(SimpleVisionTransformer, 'forward',
                        lambda self, x: inputs.append((self.training, type(x).__name__)) or forward(self, x))
    root = make_image_folder(tmp_path / 'data', size=24)
    code = train_main(['--data-dir', str(root), '--model', 'simple_vit_tiny', '--model-kwargs', 'embed_dim=32',
                       'depth=2', 'num_heads=2', 'mlp_dim=64', 'patch_size=4', '--num-classes', '2', '--naflex-loader',
                       '--naflex-train-seq-lens', '16', '36', '--naflex-max-seq-len', '36', '-b', '4', '--epochs', '1',
                       '--warmup-epochs', '0', '--device', 'cpu', '--mixup', '0.2'])
    out = capsys.readouterr().out
    assert code == 0 and 'val_top1' in out, out
    assert {kind for _, kind in inputs} == {'dict'} and {training for training, _ in inputs} == {True, False}
