"""NaFlex preprocessing: resize each image to a token budget keeping its aspect ratio, patchify, and batch.

The size search is timm's ``get_image_size_for_seq``, which picks the sizes big_vision's
``ops_naflex.resize_to_sequence`` picks (binary search on the scale, sides rounded up to patch
multiples, at least one patch a side; checked on a table of sizes written by big_vision's own op).
big_vision resizes with ``tf.image.resize(bilinear, antialias=True)``; timm's ``ResizeToSequence``
is used with the same method. Patchifying is timm's ``patchify_image`` (P-P-C order, row-major),
and batches are timm's NaFlex dict, so timm's loader and our own inputs look the same.
"""
from typing import Optional, Sequence, Tuple, Union

import torch
from timm.data.naflex_transforms import ResizeToSequence, get_image_size_for_seq, patchify_image
from torchvision.transforms.functional import get_dimensions

from .capacity import check_fits
from .config import pair
from .errors import ViTVariantsError

__all__ = ['size_for_budget', 'ResizeToBudget', 'naflex_batch']


def size_for_budget(image_hw: Tuple[int, int], patch_size: Union[int, Tuple[int, int]],
                    max_seq_len: int) -> Tuple[int, int]:
    """The (H, W) big_vision's ``resize_to_sequence`` resizes an image to: at most ``max_seq_len`` patches."""
    if max_seq_len < 1:
        raise ViTVariantsError(f'a token budget must be at least 1 patch, got {max_seq_len}', key='max_seq_len')
    try:
        return tuple(get_image_size_for_seq(tuple(image_hw), pair(patch_size), max_seq_len)[1])
    except ValueError as e:  # the search's own bounds: a scale outside (1e-5, 100)
        raise ViTVariantsError(f'no size of {image_hw[0]}x{image_hw[1]} fits {max_seq_len} patches of '
                               f'{patch_size}: {e}', key='image size') from None


class ResizeToBudget(ResizeToSequence):
    """timm's ``ResizeToSequence`` as big_vision's ``resize_to_sequence``: bilinear, antialiased.

    A budget, and each output, must fit the memory there is (``capacity``): refused before resizing.
    """

    def __init__(self, patch_size: Union[int, Tuple[int, int]], max_seq_len: int) -> None:
        super().__init__(pair(patch_size), max_seq_len, interpolation='bilinear')
        size_for_budget((1, 1), patch_size, max_seq_len)  # a bad budget fails here, not on the first image
        (ph, pw) = self.patch_size
        check_fits(max_seq_len * ph * pw * 4, f'a token budget of {max_seq_len} patches of {ph}x{pw} (one float32 '
                   'channel)', key='max_seq_len')

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        chans, height, width = get_dimensions(img)
        if height < 1 or width < 1:
            raise ViTVariantsError(f'a {height}x{width} image has no pixels to resize', key='image size')
        out_h, out_w = size_for_budget((height, width), self.patch_size, self.max_seq_len)
        check_fits(chans * out_h * out_w * 4, f'resizing a {height}x{width} image to {out_h}x{out_w}',
                   key='image size')
        try:
            return super().forward(img)
        except ValueError as e:
            raise ViTVariantsError(f'no size fits {self.max_seq_len} patches: {e}', key='image size') from None


def naflex_batch(images: Sequence[torch.Tensor], patch_size: Union[int, Tuple[int, int]],
                 max_seq_len: Optional[int] = None) -> dict:
    """timm's NaFlex dict for CHW images at their own sizes (padded right/bottom to whole patches).

    Rows are padded to ``max_seq_len`` (default: the longest image); an image with more patches is refused
    rather than silently cut, which is what timm's collator would do.
    """
    if not images:
        raise ViTVariantsError('a NaFlex batch of no images', key='images')
    for i, image in enumerate(images):
        if not isinstance(image, torch.Tensor) or image.ndim != 3:
            raise ViTVariantsError(f'image {i} is not a CHW tensor: {getattr(image, "shape", type(image).__name__)}',
                                   key='images')
        if image.shape[0] != images[0].shape[0]:
            raise ViTVariantsError(f'image {i} has {image.shape[0]} channel(s) where image 0 has '
                                   f'{images[0].shape[0]}: one batch has one channel count', key='images')
        if image.shape[1] < 1 or image.shape[2] < 1:
            raise ViTVariantsError(f'image {i} is {image.shape[1]}x{image.shape[2]}: it has no patches', key='images')
    patch = pair(patch_size)
    pieces = [patchify_image(image, patch) for image in images]
    longest = max(len(p) for p, _, _ in pieces)
    length = longest if max_seq_len is None else max_seq_len
    if longest > length:
        raise ViTVariantsError(f'an image has {longest} patches, more than max_seq_len={length}: resize it to '
                               'the budget first (ResizeToBudget)', key='max_seq_len')
    batch = len(pieces)
    patches = torch.zeros(batch, length, pieces[0][0].shape[1], dtype=pieces[0][0].dtype)
    coords = torch.zeros(batch, length, 2, dtype=torch.long)
    valid = torch.zeros(batch, length, dtype=torch.bool)
    for i, (p, c, v) in enumerate(pieces):
        patches[i, :len(p)], coords[i, :len(p)], valid[i, :len(p)] = p, c, v
    return {'patches': patches, 'patch_coord': coords, 'patch_valid': valid}
