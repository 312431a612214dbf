"""A small data-parallel trainer for the ``simple_vit_*`` family, built from timm's components.

Why it exists: timm's ``train.py`` wraps the model with
``ClassificationTask.prepare_distributed(device_ids=[device])``. torch's DistributedDataParallel
refuses ``device_ids`` for a CPU module (ValueError "device_ids and output_device arguments only
work with single-device/multiple-device GPU modules or CPU modules"), so train.py cannot run more
than one process on CPU. This entry point runs the same recipe (same flag names, same timm YAML
configs, parsed by ``recipe.py``) with ``device_ids=None`` on CPU (gloo) and ``[local_rank]`` on GPU (nccl).

    torchrun --nproc-per-node 2 -m timm_vit_variants.training.trainer --data-dir DIR \
        --model simple_vit_tiny_patch4_32 --device cpu --config configs/simple_vit_tiny_patch4_32.yaml
    vit-variants-train-ddp --data-dir DIR ...      # one process

Pieces used from timm: ``create_model``, ``resolve_data_config``, ``create_dataset``/``create_loader``
(transforms, DistributedSampler, scheduled multi-resolution batches), ``create_optimizer_v2``
(layer decay via ``group_matcher``), ``create_scheduler_v2``, ``LabelSmoothingCrossEntropy`` /
``SoftTargetCrossEntropy`` with ``Mixup``, ``ModelEmaV3``, ``CheckpointSaver``,
``dispatch_clip_grad`` and ``init_distributed_device_so``; with ``--naflex-loader``, timm's
``create_naflex_loader`` and ``NaFlexMixup`` (images at their own aspect ratio, sequence-length buckets).
"""
import argparse
import os
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Dict, List, Optional, Sequence

import torch
import torch.distributed as dist
import torch.nn as nn
from timm.data import Mixup, NaFlexMixup, create_dataset, resolve_data_config
from timm.loss import LabelSmoothingCrossEntropy, SoftTargetCrossEntropy
from timm.models import create_model
from timm.optim import create_optimizer_v2, optimizer_kwargs
from timm.scheduler import create_scheduler_v2, scheduler_kwargs
from timm.utils import CheckpointSaver, ModelEmaV3, dispatch_clip_grad, random_seed
from tqdm import tqdm

from ..errors import ViTVariantsError
from .distributed import DistEnv, setup_distributed, wrap_ddp
from .loaders import batch_size_of, loss_scale, naflex_loaders, set_epoch, standard_loaders, to_device
from .recipe import build_parser, parse_args, write_args_yaml

__all__ = [
    'DistEnv', 'EpochResult', 'TrainResult', 'Session', 'build_parser', 'parse_args', 'setup_distributed', 'wrap_ddp',
    'create_model_from_args', 'amp_context', 'evaluate', 'build', 'train_one_epoch', 'validate', 'save', 'train', 'main',
]


def create_model_from_args(args: argparse.Namespace) -> nn.Module:
    """``create_model`` with the keyword arguments train.py passes (pretrained path, initial checkpoint...)."""
    factory_kwargs: Dict[str, Any] = {}
    if args.pretrained_path:
        # As train.py: the file overrides url/hub, num_classes=-1 forces the head to be re-initialised.
        factory_kwargs['pretrained_cfg_overlay'] = dict(file=args.pretrained_path, num_classes=-1)
    in_chans = args.in_chans or (args.input_size[0] if args.input_size else 3)
    model = create_model(
        args.model,
        pretrained=args.pretrained,
        in_chans=in_chans,
        num_classes=args.num_classes,
        drop_rate=args.drop,
        drop_path_rate=args.drop_path,
        global_pool=args.gp,
        checkpoint_path=args.initial_checkpoint,
        **factory_kwargs,
        **args.model_kwargs,
    )
    if args.grad_checkpointing:
        model.set_grad_checkpointing(enable=True)
    return model


def amp_context(args: argparse.Namespace, device: torch.device) -> Callable[[], ContextManager]:
    """Autocast factory: bf16/fp16 autocast on the model's device type when ``--amp``, else a no-op."""
    if not args.amp:
        return nullcontext
    dtype = torch.bfloat16 if args.amp_dtype == 'bfloat16' else torch.float16
    return lambda: torch.autocast(device_type=device.type, dtype=dtype)


@torch.inference_mode()
def evaluate(
        model: nn.Module,
        loader: Any,
        device: torch.device,
        autocast: Callable[[], ContextManager] = nullcontext,
) -> Dict[str, float]:
    """Mean cross-entropy and top-1 accuracy (%) of ``model`` over ``loader``."""
    was_training = model.training
    model.eval()
    loss_sum, correct, count = 0.0, 0, 0
    for images, target in loader:
        images, target = to_device(images, device), target.to(device)
        with autocast():
            logits = model(images)
        logits = logits.float()
        loss_sum += nn.functional.cross_entropy(logits, target, reduction='sum').item()
        correct += (logits.argmax(dim=-1) == target).sum().item()
        count += target.shape[0]
    model.train(was_training)
    return {'loss': loss_sum / max(count, 1), 'top1': 100. * correct / max(count, 1)}


@dataclass
class EpochResult:
    epoch: int
    train_loss: float
    lr: float
    eval: Optional[Dict[str, float]] = None


@dataclass
class TrainResult:
    """The trained (unwrapped, uncompiled) model, its EMA if any, and per-epoch figures."""
    model: nn.Module
    ema: Optional[nn.Module]
    data_config: Dict[str, Any]
    epochs: List[EpochResult] = field(default_factory=list)
    step_losses: List[float] = field(default_factory=list)


def _train_loss(args: argparse.Namespace, num_classes: int):
    """timm's losses, chosen as train.py chooses them (soft targets under mixup, else label smoothing)."""
    if args.mixup > 0 or args.cutmix > 0:
        mixup = Mixup(mixup_alpha=args.mixup, cutmix_alpha=args.cutmix, label_smoothing=args.smoothing,
                      num_classes=num_classes)
        return SoftTargetCrossEntropy(), mixup
    if args.smoothing:
        return LabelSmoothingCrossEntropy(smoothing=args.smoothing), None
    return nn.CrossEntropyLoss(), None


@dataclass
class Session:
    """Everything one training run holds, as :func:`build` sets it up."""
    args: argparse.Namespace
    env: DistEnv
    model: nn.Module
    train_module: nn.Module  # compiled and/or DDP-wrapped ``model``
    ema: Optional[ModelEmaV3]
    data_config: Dict[str, Any]
    loader_train: Any
    loader_eval: Any
    loss_fn: Callable
    mixup: Optional[Mixup]
    optimizer: torch.optim.Optimizer
    scheduler: Any
    num_epochs: int
    steps: int
    autocast: Callable[[], ContextManager]
    saver: Optional[CheckpointSaver] = None
    num_updates: int = 0

    @property
    def eval_model(self) -> nn.Module:
        """The weights validation and checkpoints use: the EMA when there is one."""
        return self.ema.module if self.ema is not None else self.model


def build(
        args: argparse.Namespace,
        env: Optional[DistEnv] = None,
        model: Optional[nn.Module] = None,
        dataset_train: Optional[Any] = None,
        dataset_eval: Optional[Any] = None,
        max_steps: Optional[int] = None,
) -> Session:
    """Model, data, loss, optimizer, EMA, compile/DDP wrapping, scheduler and saver, as train.py sets them up."""
    env = env or setup_distributed(args.device)
    random_seed(args.seed, env.rank)
    model = model if model is not None else create_model_from_args(args)
    if args.num_classes is None:
        args.num_classes = model.num_classes
    data_config = resolve_data_config(vars(args), model=model, verbose=env.is_primary)
    model.to(env.device)

    img_mode = 'RGB' if data_config['input_size'][0] == 3 else 'L'
    if dataset_train is None:
        dataset_train = create_dataset(args.dataset, root=args.data_dir, split=args.train_split, is_training=True,
                                       input_img_mode=img_mode)
    if dataset_eval is None and args.val_split and args.data_dir:
        dataset_eval = create_dataset(args.dataset, root=args.data_dir, split=args.val_split, is_training=False,
                                      input_img_mode=img_mode)
    loss_fn, mixup = _train_loss(args, args.num_classes)
    if args.naflex_loader:  # mixup happens inside the NaFlex loader, on its padded dicts
        naflex_mixup = NaFlexMixup(num_classes=args.num_classes, mixup_alpha=args.mixup, cutmix_alpha=args.cutmix,
                                   label_smoothing=args.smoothing) if mixup is not None else None
        loader_train, loader_eval = naflex_loaders(args, model, data_config, env, dataset_train, dataset_eval,
                                                    naflex_mixup)
        mixup = None
    else:
        loader_train, loader_eval = standard_loaders(args, data_config, env, dataset_train, dataset_eval)
    optimizer = create_optimizer_v2(model, **optimizer_kwargs(cfg=args))
    ema = ModelEmaV3(model, decay=args.model_ema_decay, use_warmup=args.model_ema_warmup) \
        if args.model_ema else None
    # Compile before DDP wrapping, as train.py does; evaluation uses the eager module (any resolution).
    train_module = torch.compile(model, backend=args.torchcompile, mode=args.torchcompile_mode) \
        if args.torchcompile else model
    train_module = wrap_ddp(train_module, env)

    updates_per_epoch = len(loader_train)
    _refuse_no_steps(updates_per_epoch, max_steps, len(dataset_train), args, env)
    scheduler, num_epochs = create_scheduler_v2(optimizer, **scheduler_kwargs(args), updates_per_epoch=updates_per_epoch)
    total = num_epochs * updates_per_epoch
    session = Session(
        args=args, env=env, model=model, train_module=train_module, ema=ema, data_config=data_config,
        loader_train=loader_train, loader_eval=loader_eval, loss_fn=loss_fn, mixup=mixup, optimizer=optimizer,
        scheduler=scheduler, num_epochs=num_epochs, steps=total if max_steps is None else min(max_steps, total),
        autocast=amp_context(args, env.device))
    if args.output and env.is_primary:
        os.makedirs(args.output, exist_ok=True)
        session.saver = CheckpointSaver(
            model=model, optimizer=optimizer, args=args, model_ema=ema, checkpoint_dir=args.output,
            recovery_dir=args.output, decreasing=args.eval_metric == 'loss', max_history=args.checkpoint_hist)
        write_args_yaml(args, args.output)
    return session


def _refuse_no_steps(updates_per_epoch: int, max_steps: Optional[int], num_images: int, args: argparse.Namespace,
                     env: DistEnv) -> None:
    """A run that would take no optimizer step is refused with the reason, instead of reporting "done"."""
    if updates_per_epoch > 0 and args.epochs > 0 and (max_steps is None or max_steps > 0):
        return
    per_process = num_images // env.world_size
    if updates_per_epoch == 0:
        why = (f'--batch-size {args.batch_size} is larger than the {per_process} training images each of the '
               f'{env.world_size} process(es) gets, and the training loader drops the last incomplete batch; '
               'lower --batch-size')
    elif args.epochs < 1:
        why = f'--epochs is {args.epochs}'
    else:
        why = 'the step limit is 0'
    raise ViTVariantsError(f'this run would take 0 training steps: {why}')


def train_one_epoch(s: Session, epoch: int, on_step: Callable[[float], None]) -> float:
    """One pass over the training data (stopping at ``s.steps`` updates); returns the mean loss over all ranks."""
    set_epoch(s.loader_train, epoch)
    s.train_module.train()
    loss_sum, seen = 0.0, 0
    for images, target in s.loader_train:
        images, target = to_device(images, s.env.device), target.to(s.env.device)
        if s.mixup is not None:
            images, target = s.mixup(images, target)
        batch = batch_size_of(images)
        with s.autocast():
            loss = s.loss_fn(s.train_module(images), target)
        s.optimizer.zero_grad(set_to_none=True)
        (loss * loss_scale(s.args, batch)).backward()
        if s.args.clip_grad is not None:
            dispatch_clip_grad(s.model.parameters(), value=s.args.clip_grad, mode=s.args.clip_mode)
        s.optimizer.step()
        s.num_updates += 1
        s.scheduler.step_update(num_updates=s.num_updates)
        if s.ema is not None:
            s.ema.update(s.model, step=s.num_updates)
        loss_val = loss.item()
        on_step(loss_val)
        loss_sum += loss_val * batch
        seen += batch
        if s.num_updates >= s.steps:
            break
    train_loss = loss_sum / max(seen, 1)
    if s.env.distributed:  # every rank reports the mean over all ranks, as train.py does
        t = torch.tensor([train_loss], device=s.env.device)
        dist.all_reduce(t)
        train_loss = t.item() / s.env.world_size
    return train_loss


def validate(s: Session) -> Optional[Dict[str, float]]:
    """Loss and top-1 of the EMA (or the model) on the validation split; None without one (or off the primary)."""
    if s.loader_eval is None:
        return None
    return evaluate(s.eval_model, s.loader_eval, s.env.device, s.autocast)


def save(s: Session, epoch: int, metrics: Optional[Dict[str, float]]) -> None:
    """A checkpoint through timm's CheckpointSaver (keeps the best by ``--eval-metric``), when ``--output`` is set."""
    if s.saver is not None:
        s.saver.save_checkpoint(epoch, metric=metrics[s.args.eval_metric] if metrics else None)


def train(
        args: argparse.Namespace,
        env: Optional[DistEnv] = None,
        model: Optional[nn.Module] = None,
        dataset_train: Optional[Any] = None,
        dataset_eval: Optional[Any] = None,
        max_steps: Optional[int] = None,
        on_epoch: Optional[Callable[[EpochResult], None]] = None,
) -> TrainResult:
    """Train as configured by ``args`` (from :func:`parse_args`): build, then per epoch train, validate, save.

    ``dataset_train``/``dataset_eval`` override ``--data-dir``: any map-style dataset whose
    ``transform`` attribute timm may set (returns ``(PIL image, label)``). Validation and
    checkpointing run on the primary process only, on the EMA weights when ``--model-ema`` is set.
    ``max_steps`` stops early (for smoke tests); ``on_epoch`` is called with each epoch's figures.
    """
    s = build(args, env, model, dataset_train, dataset_eval, max_steps)
    result = TrainResult(model=s.model, ema=s.ema.module if s.ema is not None else None, data_config=s.data_config)
    bar = tqdm(total=s.steps, desc='train', unit='step', disable=not (args.progress and s.env.is_primary),
               dynamic_ncols=True)

    def on_step(loss: float) -> None:
        result.step_losses.append(loss)
        bar.update(1)
        bar.set_postfix(loss=f'{loss:.3f}')

    for epoch in range(s.num_epochs):
        if s.num_updates >= s.steps:
            break
        train_loss = train_one_epoch(s, epoch, on_step)
        metrics = validate(s)
        lr = sum(g['lr'] for g in s.optimizer.param_groups) / len(s.optimizer.param_groups)  # mean, as train.py logs
        result.epochs.append(EpochResult(epoch=epoch, train_loss=train_loss, lr=lr, eval=metrics))
        if on_epoch is not None:
            on_epoch(result.epochs[-1])
        save(s, epoch, metrics)
        s.scheduler.step(epoch + 1, metrics[args.eval_metric] if metrics else None)
    bar.close()
    return result


def _print_epoch(e: EpochResult) -> None:
    val = f' val_loss {e.eval["loss"]:.4f} val_top1 {e.eval["top1"]:.2f}' if e.eval else ''
    tqdm.write(f'epoch {e.epoch} train_loss {e.train_loss:.4f} lr {e.lr:.3e}{val}')


def main(argv: Optional[Sequence[str]] = None) -> int:
    """CLI: train, print one line per epoch on the primary process, exit non-zero with a message on failure."""
    args = parse_args(argv)
    if not args.data_dir:
        print('trainer: error: --data-dir is required', file=sys.stderr)
        return 2
    if not args.dataset and not os.path.isdir(args.data_dir):
        print(f'trainer: error: --data-dir {args.data_dir}: not a folder', file=sys.stderr)
        return 2
    args.progress = args.progress or sys.stderr.isatty()
    env = setup_distributed(args.device)
    try:
        start = time.time()
        train(args, env, on_epoch=_print_epoch if env.is_primary else None)
        if env.is_primary:
            print(f'done in {time.time() - start:.1f}s on {env.world_size} process(es), device {env.device}')
    except (OSError, RuntimeError, ValueError) as e:
        print(f'trainer: error: {e}', file=sys.stderr)
        return 1
    finally:
        if env.distributed:
            dist.destroy_process_group()
    return 0


if __name__ == '__main__':
    sys.exit(main())
