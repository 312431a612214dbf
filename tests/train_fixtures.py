"""Shared helpers for the training and timm-script tests: tiny ImageFolders (synthetic, digits) and model flags."""
import socket
from pathlib import Path
from typing import Sequence

import numpy as np
from PIL import Image

# A simple_vit_tiny shrunk to test size, spelt as train.py's --model-kwargs strings.
TINY_MODEL_KWARGS = ['embed_dim=32', 'depth=2', 'num_heads=2', 'mlp_dim=64', 'patch_size=4']


def make_image_folder(root: Path, num_classes: int = 2, per_class: int = 8, size: int = 16,
                      splits: Sequence[str] = ('train', 'validation'), seed: int = 0) -> Path:
    """Write ``root/<split>/class_<k>/<i>.png`` RGB images whose colour and stripes depend on the class.

    The classes are separable, so a few optimisation steps visibly lower the loss.
    """
    rng = np.random.default_rng(seed)
    for split in splits:
        for k in range(num_classes):
            folder = root / split / f'class_{k}'
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(per_class):
                img = rng.integers(0, 64, size=(size, size, 3), dtype=np.uint8)
                img[..., k % 3] += 160
                img[k % size::num_classes + 1, :, :] = 255 if k % 2 else 0
                Image.fromarray(img).save(folder / f'{i}.png')
    return root


def make_digits_folder(root: Path, per_class: int = 4, size: int = 16) -> Path:
    """Write ``root/validation/<digit>/<i>.png``: the last ``per_class`` of each class of scikit-learn's 8x8
    ``load_digits``, upscaled to ``size`` px RGB (timm's scripts assume three channels)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    for k in range(10):
        folder = root / 'validation' / str(k)
        folder.mkdir(parents=True, exist_ok=True)
        for i, img in enumerate(digits.images[digits.target == k][-per_class:]):
            ink = np.clip(img * 16, 0, 255).astype(np.uint8)  # load_digits stores ink as 0..16
            Image.fromarray(ink, mode='L').resize((size, size), Image.BILINEAR).convert('RGB').save(folder / f'{i}.png')
    return root


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for the gloo rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]
