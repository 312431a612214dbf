"""Demo of the main job: convert a big_vision checkpoint, verify it, load it with timm, run it on a non-square image.

    python examples/first_run.py [SOURCE] [--out DIR]

SOURCE defaults to a small big_vision-format checkpoint that ships in this repository
(``tests/data/reference/bigvision_learn_tok.npz``: random weights written by big_vision's own code, width 32,
32 px, patch 8), so the demo runs anywhere in seconds. Any source ``vit-port convert`` takes works the same
way where the network allows, for example big_vision's published ViT-S/16::

    python examples/first_run.py https://storage.googleapis.com/big_vision/vit_s16_i1k_300ep.npz

1. ``vit_port.convert``: the checkpoint becomes a Hub folder (``model.safetensors``, ``config.json``,
   ``README.md``), checked against timm's own loader of the source on the same inputs;
2. ``timm.create_model('local-dir:OUT', pretrained=True)`` loads the folder (after ``import timm_vit_variants``);
3. the model runs on a non-square image of another size than it was trained at: the patch embedding pads
   and the position table follows the token grid.
"""
import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence, Tuple

import timm
import torch

import timm_vit_variants  # noqa: F401  (registers simple_vit_* with timm; before create_model)
import vit_port

DEFAULT_SOURCE = Path(__file__).resolve().parents[1] / 'tests' / 'data' / 'reference' / 'bigvision_learn_tok.npz'


def non_square(img_size: Tuple[int, int], patch: Tuple[int, int]) -> Tuple[int, int]:
    """A size unlike the training one: 3/4 of the height, and 3/2 of the width plus half a patch (which the patch
    does not divide, so the model pads it right)."""
    h, w = img_size
    return max(patch[0], h * 3 // 4 // patch[0] * patch[0]), w * 3 // 2 // patch[1] * patch[1] + patch[1] // 2


def test_image(size: Tuple[int, int], channels: int) -> torch.Tensor:
    """A deterministic picture (a diagonal gradient with rings), pixels in [0, 1]."""
    y = torch.linspace(0, 1, size[0])[:, None]
    x = torch.linspace(0, 1, size[1])[None, :]
    picture = 0.5 + 0.25 * (x - y) + 0.25 * torch.cos(12 * ((x - 0.5) ** 2 + (y - 0.5) ** 2).sqrt())
    return picture.expand(channels, *size).unsqueeze(0)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('source', nargs='?', default=str(DEFAULT_SOURCE),
                        help='checkpoint file or folder, Hub id or URL (default: the shipped big_vision fixture)')
    parser.add_argument('--out', default='out/first_run', help='Hub folder to write (default: out/first_run)')
    opts = parser.parse_args(argv)

    try:
        # overwrite=True replaces only an earlier vit-port output, never a folder holding other files.
        result = vit_port.convert(opts.source, opts.out, overwrite=True, progress=sys.stderr.isatty())
    except vit_port.ViTVariantsError as e:
        print(f'error: {e}', file=sys.stderr)
        return 1
    print(f'1. converted {Path(opts.source).name} -> {opts.out}')
    print(f'   {result.verification.summary()}')
    if result.assumed:
        print('   not recorded in the source, assumed: ' + ', '.join(f'{k}={v!r}' for k, (v, _) in result.assumed.items()))

    model = timm.create_model(f'local-dir:{result.out.resolve()}', pretrained=True).eval()
    config = model.config
    print(f'2. loaded local-dir:{opts.out} with timm: {type(model).__name__}, {config.embed_dim} wide, '
          f'{config.depth} blocks, trained at {config.img_size[0]}x{config.img_size[1]}, patch {config.patch_size[0]}')

    size = non_square(config.img_size, config.patch_size)
    data = timm.data.resolve_data_config({}, model=model)
    mean = torch.tensor(data['mean']).view(1, -1, 1, 1)
    std = torch.tensor(data['std']).view(1, -1, 1, 1)
    x = (test_image(size, config.in_chans) - mean) / std
    with torch.inference_mode():
        probs = model(x).softmax(-1)[0]
    grid = (-(-size[0] // config.patch_size[0]), -(-size[1] // config.patch_size[1]))
    top = probs.topk(min(3, probs.numel()))
    classes = ', '.join(f'{int(i)} ({float(p):.2f})' for p, i in zip(top.values, top.indices))
    print(f'3. ran it on a {size[0]}x{size[1]} image ({grid[0]}x{grid[1]} tokens, padded right to whole patches): '
          f'{probs.numel()} class probabilities, top {classes}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
