"""The trainer's data: timm's loaders built as train.py builds them, standard (NCHW) or NaFlex, and what a
batch of either kind needs (its device, its size, NaFlex's loss scale, the per-epoch reshuffle)."""
import argparse
from typing import Any, Dict, Optional

import torch
import torch.nn as nn
from timm.data import NaFlexMixup, create_loader, create_naflex_loader

from .distributed import DistEnv

__all__ = ['to_device', 'batch_size_of', 'loss_scale', 'standard_loaders', 'naflex_loaders', 'set_epoch']


def to_device(images: Any, device: torch.device) -> Any:
    """An NCHW batch or a NaFlex dict on ``device``."""
    if isinstance(images, dict):
        return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in images.items()}
    return images.to(device)


def batch_size_of(images: Any) -> int:
    return images['patches'].shape[0] if isinstance(images, dict) else images.shape[0]


def loss_scale(args: argparse.Namespace, batch: int) -> float:
    """train.py's ``--naflex-loss-scale``: NaFlex batches vary in size, so each loss is weighted by it."""
    if not args.naflex_loader or args.naflex_loss_scale == 'none':
        return 1.0
    scale = batch / args.batch_size
    return scale ** 0.5 if args.naflex_loss_scale == 'sqrt' else scale


def standard_loaders(args: argparse.Namespace, data_config: Dict[str, Any], env: DistEnv, dataset_train: Any,
             dataset_eval: Any) -> Any:
    """timm's standard loaders: fixed-size NCHW batches (or scheduled sizes with --train-img-sizes)."""
    common = _loader_kwargs(args, data_config, env)
    train = create_loader(
        dataset_train, input_size=data_config['input_size'], batch_size=args.batch_size, is_training=True,
        no_aug=args.no_aug, re_prob=args.reprob, scale=args.scale, ratio=args.ratio, hflip=args.hflip,
        vflip=args.vflip, color_jitter=args.color_jitter, auto_augment=args.aa,
        interpolation=data_config['interpolation'] if args.no_aug or not args.train_interpolation
        else args.train_interpolation,
        input_size_choices=args.train_img_sizes, batch_size_choices=args.train_batch_sizes,
        batch_choice_weights=args.train_size_probs, batch_choice_seed=args.seed, **common)
    evaluation = None
    if dataset_eval is not None and env.is_primary:
        evaluation = create_loader(
            dataset_eval, input_size=data_config['input_size'],
            batch_size=args.validation_batch_size or args.batch_size, is_training=False,
            interpolation=data_config['interpolation'], crop_pct=data_config['crop_pct'],
            **dict(common, distributed=False))
    return train, evaluation


def naflex_loaders(args: argparse.Namespace, model: nn.Module, data_config: Dict[str, Any], env: DistEnv,
                    dataset_train: Any, dataset_eval: Any, mixup: Optional[NaFlexMixup]) -> Any:
    """timm's NaFlex loaders, called as train.py calls them (the model's own patch size)."""
    common = dict(mean=data_config['mean'], std=data_config['std'], num_workers=args.workers, use_prefetcher=False,
                  device=env.device, persistent_workers=False, pin_memory=False, patch_size=model.get_patch_size())
    train = create_naflex_loader(
        dataset_train, train_seq_lens=tuple(args.naflex_train_seq_lens), batch_size=args.batch_size,
        is_training=True, mixup_fn=mixup, no_aug=args.no_aug, re_prob=args.reprob, scale=args.scale,
        ratio=args.ratio, hflip=args.hflip, vflip=args.vflip, color_jitter=args.color_jitter, auto_augment=args.aa,
        interpolation=data_config['interpolation'] if args.no_aug or not args.train_interpolation
        else args.train_interpolation, distributed=env.distributed, rank=env.rank, world_size=env.world_size,
        seed=args.seed, **common)
    evaluation = None
    if dataset_eval is not None and env.is_primary:
        evaluation = create_naflex_loader(
            dataset_eval, max_seq_len=args.naflex_max_seq_len, batch_size=args.validation_batch_size or args.batch_size,
            is_training=False, interpolation=data_config['interpolation'], **common)
    return train, evaluation


def _loader_kwargs(args: argparse.Namespace, data_config: Dict[str, Any], env: DistEnv) -> Dict[str, Any]:
    return dict(
        mean=data_config['mean'], std=data_config['std'], num_workers=args.workers, distributed=env.distributed,
        use_prefetcher=False, device=env.device, persistent_workers=False)


def set_epoch(loader: Any, epoch: int) -> None:
    # The distributed / scheduled samplers (and NaFlex's dataset wrapper) reshuffle per epoch only when told the epoch.
    for obj in (loader.batch_sampler, loader.sampler, loader.dataset):
        if hasattr(obj, 'set_epoch'):
            obj.set_epoch(epoch)
            return
