"""Training demo: train a plain ViT on real handwritten digits in a couple of CPU minutes.

    python examples/quickstart.py [--epochs N] [--out DIR [--overwrite]]

1. Data: scikit-learn's ``load_digits`` (1,797 real 8x8 digits, shipped inside the package),
   upsampled to 32x32 by timm's transforms; a fixed, stratified 80/20 train/validation split.
2. Model: ``simple_vit_tiny_patch4_32`` (width 192, 3 heads) cut to 4 blocks with patch 8 (4x4
   tokens at 32 px), one input channel and 10 classes, trained from scratch by
   ``timm_vit_variants.training.trainer`` (timm's loaders, optimizer and scheduler factories): AdamW,
   warmup + cosine, label smoothing, grad clipping, batches mixing 24/32/40 px images.
3. Report: validation top-1 at the training resolution (32) and at 24 and 48 pixels, with the
   trained patch size and with the patch kernel PI-resized to keep the token grid (FlexiViT).
4. Save a Hub-ready folder with the porting writer (model.safetensors, config.json, README.md),
   reload it with ``timm.create_model('local-dir:OUT', pretrained=True)`` and check the logits
   are identical.
"""
import argparse
import copy
import os
import sys
import tempfile
import time
from typing import Optional, Sequence, Tuple

import numpy as np
import timm
import torch
from PIL import Image
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from timm.data import create_loader

import timm_vit_variants  # noqa: F401  (registers simple_vit_* with timm)
from porting.output import check_output
from porting.hub_folder import save_pretrained_folder
from timm_vit_variants.errors import ViTVariantsError
from timm_vit_variants.training.trainer import evaluate, parse_args, train

TRAIN_SIZE = 32
PATCH = 8
EVAL_SIZES = (TRAIN_SIZE, 24, 48)


class DigitsDataset(torch.utils.data.Dataset):
    """8x8 digits as greyscale PIL images; timm's loader factory sets ``transform``."""

    def __init__(self, images: np.ndarray, labels: np.ndarray) -> None:
        # load_digits stores ink as 0..16; stretch it to 0..255 for PIL.
        self.images = np.clip(images * 16, 0, 255).astype(np.uint8)
        self.labels = labels.astype(np.int64)
        self.transform = None

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> Tuple[torch.Tensor, int]:
        img = Image.fromarray(self.images[index], mode='L')
        if self.transform is not None:
            img = self.transform(img)
        return img, int(self.labels[index])


def digits_split(seed: int = 0) -> Tuple[DigitsDataset, DigitsDataset]:
    """The fixed split: 1,437 training and 360 validation digits, stratified by class."""
    digits = load_digits()
    x_tr, x_va, y_tr, y_va = train_test_split(
        digits.images, digits.target, test_size=0.2, random_state=seed, stratify=digits.target)
    return DigitsDataset(x_tr, y_tr), DigitsDataset(x_va, y_va)


def recipe(epochs: int, extra: Sequence[str] = ()) -> argparse.Namespace:
    """Trainer flags for the digits fine-tune (the same flag names as timm's train.py)."""
    return parse_args([
        '--model', 'simple_vit_tiny_patch4_32', '--model-kwargs', 'depth=4', f'patch_size={PATCH}',
        '--in-chans', '1', '--num-classes', '10', '--mean', '0.5', '--std', '0.5',
        '--img-size', str(TRAIN_SIZE), '--batch-size', '64', '--validation-batch-size', '180',
        # Mixed-resolution batches (mostly 32px) teach the model to read other sizes too.
        '--train-img-sizes', '24', str(TRAIN_SIZE), '40', '--train-size-probs', '1', '2', '1',
        '--opt', 'adamw', '--lr', '5e-4', '--weight-decay', '0.05', '--clip-grad', '1.0',
        '--sched', 'cosine', '--epochs', str(epochs), '--warmup-epochs', '1', '--warmup-lr', '1e-5',
        '--min-lr', '1e-5', '--smoothing', '0.1',
        # Digits are not mirror-symmetric and have no colour: small crops and aspect jitter only.
        '--hflip', '0', '--color-jitter', '0', '--scale', '0.75', '1', '--ratio', '0.85', '1.18',
        '--device', 'cpu', '--seed', '0', '--progress', *extra,
    ])


def accuracy_at(model: torch.nn.Module, dataset: DigitsDataset, size: int) -> float:
    """Validation top-1 (%) with the images resized to ``size`` x ``size``."""
    loader = create_loader(
        dataset, input_size=(1, size, size), batch_size=180, is_training=False, interpolation='bilinear',
        crop_pct=1.0, mean=(0.5,), std=(0.5,), num_workers=0, use_prefetcher=False, device=torch.device('cpu'))
    return evaluate(model, loader, torch.device('cpu'))['top1']


def with_patch_for(model: torch.nn.Module, size: int) -> torch.nn.Module:
    """A copy whose patch size scales with the image (FlexiViT PI-resize), so the token grid stays put."""
    flexi = copy.deepcopy(model)
    flexi.set_input_size(img_size=size, patch_size=PATCH * size // TRAIN_SIZE)
    return flexi


def save_hub_folder(model: torch.nn.Module, out_dir: str, overwrite: bool = False) -> None:
    """Write a Hub folder (model.safetensors, config.json, README.md) with the porting writer, atomically."""
    save_pretrained_folder(
        model, out_dir, overwrite=overwrite, label_names=[str(d) for d in range(10)],
        pretrained_cfg=dict(mean=(0.5,), std=(0.5,), crop_pct=1.0, interpolation='bilinear'))


def reload_matches(model: torch.nn.Module, out_dir: str, dataset: DigitsDataset) -> float:
    """Reload through ``local-dir:`` and return max |logit difference| on validation images."""
    reloaded = timm.create_model(f'local-dir:{os.path.abspath(out_dir)}', pretrained=True).eval()
    batch = torch.stack([
        torch.from_numpy(dataset.images[i]).float().div(255).sub(0.5).div(0.5) for i in range(32)])
    batch = torch.nn.functional.interpolate(batch[:, None], size=(TRAIN_SIZE, TRAIN_SIZE), mode='bilinear')
    model.eval()
    with torch.inference_mode():
        return (model(batch) - reloaded(batch)).abs().max().item()


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--epochs', type=int, default=30, help='training epochs (default: 30)')
    parser.add_argument('--out', default='', help='Hub folder to write (default: a temporary folder)')
    parser.add_argument('--overwrite', action='store_true', help='replace an existing --out folder')
    opts = parser.parse_args(argv)
    if opts.out:
        try:
            check_output(opts.out, opts.overwrite)  # refuse before training, not after
        except ViTVariantsError as e:
            print(f'error: {e}', file=sys.stderr)
            return 1
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))

    ds_train, ds_val = digits_split()
    print(f'digits: {len(ds_train)} train / {len(ds_val)} validation images, 10 classes, {TRAIN_SIZE}x{TRAIN_SIZE}')
    start = time.time()
    result = train(recipe(opts.epochs), dataset_train=ds_train, dataset_eval=ds_val)
    minutes = (time.time() - start) / 60
    model = result.model.eval()

    print(f'trained {opts.epochs} epochs in {minutes:.1f} min')
    for size in EVAL_SIZES:
        line = f'validation top-1 at {size}x{size}: {accuracy_at(model, ds_val, size):.2f}%'
        if size == TRAIN_SIZE:
            line += f' (training resolution, patch {PATCH})'
        else:
            grid = -(-size // PATCH)
            flexi = accuracy_at(with_patch_for(model, size), ds_val, size)
            line += (f' (patch {PATCH}, {grid}x{grid} tokens); {flexi:.2f}% with the patch PI-resized to '
                     f'{PATCH * size // TRAIN_SIZE} ({TRAIN_SIZE // PATCH}x{TRAIN_SIZE // PATCH} tokens)')
        print(line)

    with tempfile.TemporaryDirectory() as tmp:
        out_dir = opts.out or os.path.join(tmp, 'simple_vit_digits')
        try:
            save_hub_folder(model, out_dir, overwrite=opts.overwrite)
        except ViTVariantsError as e:
            print(f'error: {e}', file=sys.stderr)
            return 1
        diff = reload_matches(model, out_dir, ds_val)
        print(f'saved {out_dir} ({", ".join(sorted(os.listdir(out_dir)))}); '
              f'reloaded via local-dir:, max |logit diff| = {diff:.2e}')
        if diff != 0.0:
            print('error: reloaded model logits differ', file=sys.stderr)
            return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
