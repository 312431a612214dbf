"""Every train.py path on our models, replayed call for call.

timm's train.py is not shipped on PyPI (neither in the wheel nor in the 1.0.31 sdist), so these
tests cannot run it. ``replay_train_py`` makes the calls its ``main()`` makes, in the same order and
with the same arguments (read from train.py at github.com/huggingface/pytorch-image-models, main):
create_model -> set_grad_checkpointing -> resolve_data_config -> model.to -> autocast setup ->
create_dataset -> create_loader (scheduled sizes) -> loss -> ClassificationTask -> create_optimizer_v2
-> task.compile -> CheckpointSaver -> create_scheduler_v2 -> train_one_epoch steps -> validate.
Flags arrive as train.py's argparse would deliver them (``--model-kwargs`` through timm's ParseKwargs).
"""
import argparse
import shutil
from contextlib import suppress
from functools import partial
from pathlib import Path
from typing import Any, Dict, List

import pytest
import safetensors.torch
import timm
import torch
import torch.nn as nn
from timm import utils
from timm.data import create_dataset, create_loader, resolve_data_config
from timm.loss import LabelSmoothingCrossEntropy
from timm.models import create_model
from timm.optim import create_optimizer_v2, optimizer_kwargs
from timm.scheduler import create_scheduler_v2, scheduler_kwargs
from timm.task import ClassificationTask

import timm_vit_variants  # noqa: F401
from timm_vit_variants.geometry import pi_resize
from train_fixtures import TINY_MODEL_KWARGS, make_image_folder

# train.py's argparse defaults for every option the replayed calls read (train.py @ main).
TRAIN_PY_DEFAULTS: Dict[str, Any] = dict(
    model='resnet50', pretrained=False, pretrained_path=None, initial_checkpoint='', num_classes=None,
    gp=None, img_size=None, in_chans=None, input_size=None, crop_pct=None, mean=None, std=None,
    interpolation='', batch_size=128, validation_batch_size=None, grad_checkpointing=False, model_kwargs={},
    torchscript=False, torchcompile=None, torchcompile_mode=None, device='cuda', amp=False,
    amp_dtype='float16', model_dtype=None, opt='sgd', opt_eps=None, opt_betas=None, momentum=0.9,
    weight_decay=2e-5, clip_grad=None, clip_mode='norm', layer_decay=None, layer_decay_min_scale=0,
    layer_decay_no_opt_scale=None, opt_kwargs={}, sched='cosine', sched_on_updates=False, lr=None,
    lr_base=0.1, lr_base_size=256, lr_base_scale='', warmup_lr=1e-5, min_lr=0, epochs=300,
    warmup_epochs=5, warmup_prefix=False, cooldown_epochs=0, decay_epochs=90, decay_milestones=[90, 180, 270],
    patience_epochs=10, decay_rate=0.1, no_aug=False, train_crop_mode=None, scale=[0.08, 1.0],
    ratio=[3. / 4., 4. / 3.], hflip=0.5, vflip=0., color_jitter=0.4, color_jitter_prob=None,
    grayscale_prob=None, gaussian_blur_prob=None, aa=None, reprob=0., remode='pixel', recount=1,
    resplit=False, smoothing=0.1, train_interpolation='random', drop=0.0, drop_path=None, drop_block=None,
    bn_momentum=None, bn_eps=None, seed=42, worker_seeding='all', workers=4, pin_mem=False,
    no_prefetcher=False, dataset='', train_split='train', val_split='validation', eval_metric='top1',
    checkpoint_hist=10, train_img_sizes=None, train_batch_sizes=None, train_size_probs=None,
    train_size_schedule='constant', train_size_schedule_spread=0.65, train_size_random_mix=0.1,
    train_batches_per_epoch=None, variable_batch_loss_scale='none',
)


def train_py_args(data_dir: Path, *flags: str, **overrides: Any) -> argparse.Namespace:
    """train.py's args for a CPU run on ``data_dir``; ``flags`` are ``--model-kwargs`` strings."""
    kw_parser = argparse.ArgumentParser()
    kw_parser.add_argument('--model-kwargs', nargs='*', default={}, action=utils.ParseKwargs)
    model_kwargs = kw_parser.parse_args(['--model-kwargs', *flags]).model_kwargs if flags else {}
    args = argparse.Namespace(**dict(TRAIN_PY_DEFAULTS, model_kwargs=model_kwargs))
    run = dict(model='simple_vit_tiny', data_dir=str(data_dir), device='cpu', batch_size=4, workers=0, epochs=1,
               warmup_epochs=0, opt='adamw', lr=1e-3)
    for key, value in dict(run, **overrides).items():
        setattr(args, key, value)
    return args


def replay_train_py(args: argparse.Namespace, out_dir: Path, max_steps: int = 2, validate: bool = True) -> Dict[str, Any]:
    """train.py main() for one process, cut after ``max_steps`` updates; returns what the tests inspect."""
    args.prefetcher = not args.no_prefetcher
    args.distributed, args.world_size, args.rank = False, 1, 0
    device = torch.device(args.device)
    amp_dtype = torch.bfloat16 if args.amp and args.amp_dtype == 'bfloat16' else torch.float16
    utils.random_seed(args.seed, args.rank)
    in_chans = args.in_chans or (args.input_size[0] if args.input_size is not None else 3)

    factory_kwargs = {}
    if args.pretrained_path:
        factory_kwargs['pretrained_cfg_overlay'] = dict(file=args.pretrained_path, num_classes=-1)
    model = create_model(
        args.model, pretrained=args.pretrained, in_chans=in_chans, num_classes=args.num_classes,
        drop_rate=args.drop, drop_path_rate=args.drop_path, drop_block_rate=args.drop_block,
        global_pool=args.gp, bn_momentum=args.bn_momentum, bn_eps=args.bn_eps, scriptable=args.torchscript,
        checkpoint_path=args.initial_checkpoint, **factory_kwargs, **args.model_kwargs)
    if args.num_classes is None:
        args.num_classes = model.num_classes
    if args.grad_checkpointing:
        model.set_grad_checkpointing(enable=True)
    data_config = resolve_data_config(vars(args), model=model)
    model.to(device=device, dtype=None)
    amp_autocast = partial(torch.autocast, device_type=device.type, dtype=amp_dtype) if args.amp else suppress

    dataset_train = create_dataset(args.dataset, root=args.data_dir, split=args.train_split, is_training=True,
                                   batch_size=args.batch_size, seed=args.seed, input_img_mode='RGB')
    dataset_eval = create_dataset(args.dataset, root=args.data_dir, split=args.val_split, is_training=False,
                                  batch_size=args.batch_size, input_img_mode='RGB')
    common = dict(mean=data_config['mean'], std=data_config['std'], pin_memory=args.pin_mem,
                  img_dtype=torch.float32, device=device, distributed=False, use_prefetcher=args.prefetcher)
    loader_train = create_loader(
        dataset_train, input_size=data_config['input_size'], input_size_choices=args.train_img_sizes,
        batch_size_choices=args.train_batch_sizes, batch_choice_weights=args.train_size_probs,
        batch_choice_seed=args.seed, batch_choice_schedule=args.train_size_schedule,
        batch_schedule_spread=args.train_size_schedule_spread,
        batch_schedule_random_mix=args.train_size_random_mix, num_batches=args.train_batches_per_epoch,
        batch_size=args.batch_size, is_training=True, no_aug=args.no_aug, re_prob=args.reprob,
        re_mode=args.remode, re_count=args.recount, re_split=args.resplit, train_crop_mode=args.train_crop_mode,
        scale=args.scale, ratio=args.ratio, hflip=args.hflip, vflip=args.vflip, color_jitter=args.color_jitter,
        color_jitter_prob=args.color_jitter_prob, grayscale_prob=args.grayscale_prob,
        gaussian_blur_prob=args.gaussian_blur_prob, auto_augment=args.aa, num_aug_repeats=0, num_aug_splits=0,
        interpolation=args.train_interpolation, num_workers=args.workers, worker_seeding=args.worker_seeding,
        **common)
    loader_eval = create_loader(
        dataset_eval, input_size=data_config['input_size'], batch_size=args.validation_batch_size or args.batch_size,
        is_training=False, interpolation=data_config['interpolation'], num_workers=args.workers,
        crop_pct=data_config['crop_pct'], **common)

    task = ClassificationTask(model=model, criterion=LabelSmoothingCrossEntropy(smoothing=args.smoothing),
                              device=device, dtype=None, verbose=False)
    model = task.get_trainable_module()
    optimizer = create_optimizer_v2(model, **optimizer_kwargs(cfg=args), **args.opt_kwargs)
    if args.torchcompile:
        task.compile(backend=args.torchcompile, mode=args.torchcompile_mode)
        model = task.get_trainable_module()
    eval_model = task.get_eval_model()
    out_dir = Path(utils.get_outdir(str(out_dir)))
    saver = utils.CheckpointSaver(model=model, optimizer=optimizer, args=args, checkpoint_dir=str(out_dir),
                                  recovery_dir=str(out_dir), max_history=args.checkpoint_hist, task=task)
    updates_per_epoch = len(loader_train)
    lr_scheduler, _ = create_scheduler_v2(optimizer, **scheduler_kwargs(args, decreasing_metric=False),
                                          updates_per_epoch=updates_per_epoch)

    task.get_trainable_module().train()
    losses: List[float] = []
    input_shapes = []
    optimizer.zero_grad()
    for batch_idx, (input, target) in enumerate(loader_train):
        if batch_idx >= max_steps:
            break
        if not args.prefetcher:
            input, target = input.to(device=device), target.to(device=device)
        input_shapes.append(tuple(input.shape))
        with amp_autocast():
            loss = task(input, target)['loss']
        loss.backward()
        if args.clip_grad is not None:
            utils.dispatch_clip_grad(task.get_clip_parameters(), value=args.clip_grad, mode=args.clip_mode)
        optimizer.step()
        optimizer.zero_grad()
        lr_scheduler.step_update(num_updates=batch_idx + 1)
        losses.append(loss.item())

    eval_model.eval()
    correct = count = 0
    with torch.inference_mode():
        for input, target in loader_eval if validate else ():
            if not args.prefetcher:
                input, target = input.to(device), target.to(device)
            with amp_autocast():
                output = eval_model(input)
            correct += (output.argmax(-1) == target).sum().item()
            count += target.numel()
    top1 = 100. * correct / count if count else None
    saver.save_checkpoint(0, metric=top1)
    return dict(optimizer=optimizer,
                data_config=data_config, losses=losses, input_shapes=input_shapes, top1=top1,
                checkpoint=out_dir / 'last.pth.tar', task=task)


@pytest.fixture(scope='module')
def data_dir(tmp_path_factory) -> Path:
    return make_image_folder(tmp_path_factory.mktemp('imagefolder'))


def _unwrapped(result) -> nn.Module:
    return timm.utils.unwrap_model(result['task'].get_trainable_module())


def test_model_kwargs_and_img_size(data_dir, tmp_path):
    # --model-kwargs reshapes the model; --img-size alone sets the data size, the patch embedding adapts.
    args = train_py_args(data_dir, *TINY_MODEL_KWARGS, img_size=24, num_classes=2)
    result = replay_train_py(args, tmp_path)
    model = _unwrapped(result)
    assert (len(model.blocks), model.embed_dim, model.patch_embed.patch_size) == (2, 32, (4, 4))
    assert model.patch_embed.img_size == (224, 224)  # nominal size untouched
    assert result['data_config']['input_size'] == (3, 24, 24)
    assert all(shape[-2:] == (24, 24) for shape in result['input_shapes'])
    assert all(torch.isfinite(torch.tensor(result['losses'])))
    assert result['checkpoint'].is_file()


def test_prefetcher_off_and_default_size(data_dir, tmp_path):
    # Without --img-size the model's pretrained_cfg input size is used (224 for simple_vit_tiny):
    # keep it cheap by taking the 32px model instead.
    args = train_py_args(data_dir, 'embed_dim=32', 'depth=1', 'num_heads=2', 'mlp_dim=64',
                         model='simple_vit_tiny_patch4_32', num_classes=2, no_prefetcher=True)
    result = replay_train_py(args, tmp_path, max_steps=1)
    assert result['data_config']['input_size'] == (3, 32, 32)
    assert result['input_shapes'][0] == (4, 3, 32, 32)


def test_pretrained_path_safetensors(data_dir, tmp_path):
    # --pretrained --pretrained-path FILE.safetensors: body loads (kernel PI-resized 8->4), head re-initialised.
    source = timm.create_model('simple_vit_tiny', embed_dim=32, depth=2, num_heads=2, mlp_dim=64, patch_size=8,
                               num_classes=7, weight_init='jax')
    with torch.no_grad():
        for p in source.parameters():
            p.normal_()
    weights = tmp_path / 'model.safetensors'
    safetensors.torch.save_file(source.state_dict(), str(weights))
    args = train_py_args(data_dir, *TINY_MODEL_KWARGS, img_size=16, num_classes=3, pretrained=True,
                         pretrained_path=str(weights))
    model = create_model(args.model, pretrained=True, num_classes=3, checkpoint_path='',
                         pretrained_cfg_overlay=dict(file=str(weights), num_classes=-1), **args.model_kwargs)
    sd, src = model.state_dict(), source.state_dict()
    assert torch.equal(sd['blocks.1.mlp.fc2.weight'], src['blocks.1.mlp.fc2.weight'])
    torch.testing.assert_close(sd['patch_embed.proj.weight'], pi_resize(src['patch_embed.proj.weight'], (4, 4)))
    assert sd['head.weight'].shape == (3, 32) and not sd['head.weight'].any()
    result = replay_train_py(args, tmp_path / 'run', max_steps=1)
    assert torch.isfinite(torch.tensor(result['losses'])).all()


def test_pretrained_path_hub_folder(tmp_path):
    # --pretrained-path DIR: a Hub folder is read through its model.safetensors.
    source = timm.create_model('simple_vit_tiny', embed_dim=32, depth=2, num_heads=2, mlp_dim=64, num_classes=3)
    with torch.no_grad():
        for p in source.parameters():
            p.normal_()
    safetensors.torch.save_file(source.state_dict(), str(tmp_path / 'model.safetensors'))
    model = create_model('simple_vit_tiny', pretrained=True, num_classes=3, embed_dim=32, depth=2, num_heads=2,
                         mlp_dim=64, pretrained_cfg_overlay=dict(file=str(tmp_path), num_classes=-1))
    assert torch.equal(model.blocks[1].mlp.fc2.weight, source.blocks[1].mlp.fc2.weight)


def test_pretrained_path_big_vision_npz(data_dir, tmp_path):
    # --pretrained --pretrained-path FILE.npz: a big_vision archive (gap pooling, sin-cos, no stored table)
    # goes through the plugin's reader; the body matches the timm model it was written from.
    from checkpoint_fixtures import jax_params, tiny_timm_vit, write_npz_at as write_npz
    ref = tiny_timm_vit(class_token=False, no_embed_class=True, global_pool='avg', fc_norm=False,
                        act_layer='gelu_tanh', num_heads=2)
    params = jax_params(ref, 'bigvision')
    del params['pos_embedding']  # sin-cos checkpoints store no table
    npz = write_npz(tmp_path / 'bv.npz', params, prefix='params/')
    args = train_py_args(data_dir, *TINY_MODEL_KWARGS, img_size=16, num_classes=2, pretrained=True,
                         pretrained_path=npz)
    result = replay_train_py(args, tmp_path / 'run', max_steps=0)
    model, src = _unwrapped(result).state_dict(), ref.state_dict()
    for key in ('patch_embed.proj.weight', 'blocks.1.attn.qkv.weight', 'blocks.0.mlp.fc1.bias', 'norm.weight'):
        assert torch.equal(model[key], src[key]), key
    assert not model['head.weight'].any()  # 5-class source head dropped: the model's own zero head stays
    assert torch.isfinite(torch.tensor(replay_train_py(args, tmp_path / 'run2', max_steps=1)['losses'])).all()


def test_initial_checkpoint_roundtrip(data_dir, tmp_path):
    # The checkpoint train.py's CheckpointSaver writes loads back through --initial-checkpoint.
    first = replay_train_py(train_py_args(data_dir, *TINY_MODEL_KWARGS, img_size=16, num_classes=2), tmp_path / 'a')
    trained = _unwrapped(first).state_dict()
    args = train_py_args(data_dir, *TINY_MODEL_KWARGS, img_size=16, num_classes=2,
                         initial_checkpoint=str(first['checkpoint']))
    model = create_model(args.model, num_classes=2, checkpoint_path=args.initial_checkpoint, **args.model_kwargs)
    for key, value in model.state_dict().items():
        assert torch.equal(value, trained[key]), key
    replay_train_py(args, tmp_path / 'b', max_steps=1)


def test_layer_decay_uses_group_matcher(data_dir, tmp_path):
    # --layer-decay: create_optimizer_v2 groups parameters by group_matcher; lr scale grows with depth.
    args = train_py_args(data_dir, *TINY_MODEL_KWARGS, img_size=16, num_classes=2, layer_decay=0.5)
    result = replay_train_py(args, tmp_path, max_steps=1)
    model, optimizer = _unwrapped(result), result['optimizer']
    scale_of = {}
    names = {id(p): n for n, p in model.named_parameters()}
    for group in optimizer.param_groups:
        for p in group['params']:
            scale_of[names[id(p)]] = group['lr_scale']
    # layers: stem 0, blocks 1..2, final norm/head 3 -> scales 0.5**3, 0.5**2, 0.5, 1
    assert scale_of['patch_embed.proj.weight'] == pytest.approx(0.125)
    assert scale_of['blocks.0.attn.qkv.weight'] == pytest.approx(0.25)
    assert scale_of['blocks.1.mlp.fc1.weight'] == pytest.approx(0.5)
    assert scale_of['head.weight'] == pytest.approx(1.0)
    decay_of = {names[id(p)]: g['weight_decay'] for g in optimizer.param_groups for p in g['params']}
    assert decay_of['blocks.0.norm1.weight'] == 0 and decay_of['blocks.0.attn.qkv.weight'] > 0


def test_grad_checkpointing_same_gradients(data_dir, tmp_path):
    args = train_py_args(data_dir, *TINY_MODEL_KWARGS, img_size=16, num_classes=2, grad_checkpointing=True)
    result = replay_train_py(args, tmp_path, max_steps=1)
    assert _unwrapped(result).grad_checkpointing
    torch.manual_seed(0)
    plain = create_model('simple_vit_tiny', num_classes=2, embed_dim=32, depth=2, num_heads=2, mlp_dim=64,
                         patch_size=4)
    ckpt = create_model('simple_vit_tiny', num_classes=2, embed_dim=32, depth=2, num_heads=2, mlp_dim=64,
                        patch_size=4)
    ckpt.load_state_dict(plain.state_dict())
    ckpt.set_grad_checkpointing(True)
    x = torch.randn(2, 3, 16, 16)
    plain(x).square().sum().backward()
    ckpt(x).square().sum().backward()
    for (name, a), b in zip(plain.named_parameters(), ckpt.parameters()):
        torch.testing.assert_close(a.grad, b.grad, msg=name)


def test_amp_bfloat16_on_cpu(data_dir, tmp_path):
    args = train_py_args(data_dir, *TINY_MODEL_KWARGS, img_size=16, num_classes=2, amp=True,
                         amp_dtype='bfloat16', clip_grad=1.0)
    result = replay_train_py(args, tmp_path)
    assert torch.isfinite(torch.tensor(result['losses'])).all()
    model = _unwrapped(result)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        assert model(torch.randn(1, 3, 16, 16)).dtype == torch.bfloat16
    assert next(model.parameters()).dtype == torch.float32


def test_train_img_sizes_multi_resolution(data_dir, tmp_path):
    # --train-img-sizes: timm's scheduled batch sampler mixes resolutions batch by batch.
    args = train_py_args(data_dir, *TINY_MODEL_KWARGS, img_size=16, num_classes=2, train_img_sizes=[12, 16, 24],
                         train_size_probs=[1., 1., 1.])
    result = replay_train_py(args, tmp_path, max_steps=4)
    sizes = {shape[-1] for shape in result['input_shapes']}
    assert len(sizes) >= 2 and sizes <= {12, 16, 24}
    assert torch.isfinite(torch.tensor(result['losses'])).all()


@pytest.mark.slow
@pytest.mark.skipif(not (shutil.which('g++') or shutil.which('c++')), reason="inductor's CPU backend needs a C++ compiler")
def test_torchcompile_inductor(data_dir, tmp_path):
    # --torchcompile (inductor, train.py's default backend): one tiny model, one step, compiled eval.
    args = train_py_args(data_dir, 'embed_dim=16', 'depth=1', 'num_heads=1', 'mlp_dim=32', 'patch_size=8',
                         img_size=16, num_classes=2, torchcompile='inductor', batch_size=8)
    result = replay_train_py(args, tmp_path, max_steps=1, validate=False)
    assert isinstance(result['task'].get_trainable_module(), torch._dynamo.eval_frame.OptimizedModule)
    assert torch.isfinite(torch.tensor(result['losses'])).all()
