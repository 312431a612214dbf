"""Options shared by several ``vit-port`` commands, and what they mean once parsed.

Imports nothing heavy: ``vit-port --help`` builds every parser without torch or timm. The
choice lists below mirror constants of ``timm_vit_variants``; a test keeps them equal.
"""
import argparse
import shlex
import sys
from typing import Any, Dict, List

__all__ = [
    'say', 'UsageError', 'FORMATS', 'RESAMPLE_RULES', 'size_arg', 'byte_size_arg', 'add_geometry_args', 'add_source_args',
    'add_output_args', 'add_safety_args', 'check_sizes', 'source_hints', 'limits_of', 'recorded_command',
]

FORMATS = ('bigvision', 'vitjax', 'timm', 'hf')
RESAMPLE_RULES = ('bigvision', 'timm', 'hf', 'flexi')
ACT_LAYERS = ('gelu', 'gelu_tanh', 'quick_gelu', 'silu', 'relu')

# Options a model card may record: nothing that can carry a credential (--token, --endpoint) or free text.
_RECORDED = frozenset({
    'src', 'out', 'img_size', 'patch_size', 'resample_like', 'num_classes', 'fmt', 'num_heads', 'source_img_size',
    'prefix', 'act_layer', 'norm_eps', 'pos_embed', 'use_ema', 'overwrite', 'max_shard_size', 'license', 'base_model',
    'datasets', 'tol', 'no_verify', 'allow_nonfinite', 'limits', 'push_to', 'private', 'revision', 'create_pr',
})


def say(text: str, err: bool = False) -> None:
    """Print a line; characters the terminal cannot show (e.g. from a non-UTF-8 file name) are escaped."""
    stream = sys.stderr if err else sys.stdout
    encoding = getattr(stream, 'encoding', None) or 'utf-8'
    print(text.encode(encoding, 'backslashreplace').decode(encoding), file=stream)


class UsageError(Exception):
    """A bad combination of options found after parsing; reported like argparse's own errors (exit 2)."""


def size_arg(text: str) -> int:
    """A positive integer CLI value."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f'expected a positive integer, got {text!r}') from None
    if value < 1:
        raise argparse.ArgumentTypeError(f'expected a positive integer, got {text!r}')
    return value


def byte_size_arg(text: str) -> int:
    """A byte size CLI value such as 5GB or 500MB."""
    from ..sizes import parse_size

    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_geometry_args(parser: argparse.ArgumentParser) -> None:
    """--img-size H [W], --patch-size P [P], --resample-like: shared by convert, resize and inspect."""
    parser.add_argument('--img-size', nargs='+', type=size_arg, metavar=('H', 'W'),
                        help='target image size: H W, or one value for a square (default: the source size)')
    parser.add_argument('--patch-size', nargs='+', type=size_arg, metavar=('P', 'P'),
                        help='target patch size; the patchifier is PI-resized (FlexiViT) (default: the source patch)')
    parser.add_argument('--resample-like', choices=RESAMPLE_RULES,
                        help="rule for resizing a learned position table: big_vision bilinear (align_corners), "
                             "timm bicubic+antialias, HF bicubic or FlexiViT run-time bilinear+antialias (default: the source ecosystem's rule)")


def add_source_args(parser: argparse.ArgumentParser) -> None:
    """--from and the reader hints: how to read a source checkpoint."""
    parser.add_argument('--from', dest='fmt', choices=FORMATS,
                        help='source format (default: detected from the file)')
    parser.add_argument('--num-heads', type=size_arg,
                        help='attention heads, for sources that do not record them (e.g. a bare timm state dict)')
    parser.add_argument('--source-img-size', nargs='+', type=size_arg, metavar=('H', 'W'),
                        help='image size the source was trained at, for sources that do not record it: splits a '
                             'non-square learned table into its grid; sets the sin-cos source size (default 224)')
    parser.add_argument('--prefix', help="key prefix inside the source, e.g. 'params/img/' for a two-tower model")
    parser.add_argument('--act-layer', choices=ACT_LAYERS,
                        help="override the inferred MLP activation (e.g. 'gelu' to match timm's exact-GELU AugReg port)")
    parser.add_argument('--norm-eps', type=float, help='override the inferred LayerNorm epsilon')
    parser.add_argument('--pos-embed', choices=('sincos', 'none'),
                        help="for a checkpoint without a position table: big_vision sin-cos (default) or none")
    parser.add_argument('--no-ema', dest='use_ema', action='store_false', default=None,
                        help='timm training checkpoints: use state_dict rather than the EMA weights')
    add_safety_args(parser)


def add_safety_args(parser: argparse.ArgumentParser) -> None:
    """--limit: lift the sanity bounds on what a source may claim."""
    parser.add_argument('--limit', action='append', dest='limits', metavar='NAME=N', default=None,
                        help='lift a sanity limit on what the source may claim, e.g. --limit depth=512 (repeatable; '
                             'names: depth, width, mlp, heads, classes, img_size, tokens, tensor_bytes, json_bytes, '
                             'inflate_ratio; see docs/porting.md#safety)')


def add_output_args(parser: argparse.ArgumentParser) -> None:
    """Output options shared by ``convert`` and ``resize``."""
    parser.add_argument('--overwrite', action='store_true',
                        help='replace OUT if it is an empty folder or an earlier vit-port output (never a source, '
                             'never a folder holding other files)')
    parser.add_argument('--max-shard-size', default='5GB', type=byte_size_arg,
                        help='split weights into Hub-convention shards above this size, e.g. 500MB (default 5GB); '
                             "note timm's local-dir:/hf-hub: loaders read only unsharded folders")
    parser.add_argument('--license', help='license recorded in the model card (default: the source\'s, if known)')
    parser.add_argument('--base-model', help='Hub id of the original weights, recorded in the model card')
    parser.add_argument('--dataset', action='append', dest='datasets', metavar='NAME',
                        help='training dataset recorded in the model card (repeatable)')
    parser.add_argument('--allow-nonfinite', action='store_true',
                        help='write weights holding NaN or Inf (refused by default, even with --no-verify)')


def check_sizes(args: argparse.Namespace) -> None:
    """Size options take one (square) or two (H W) values."""
    for name in ('img_size', 'patch_size', 'source_img_size'):
        value = getattr(args, name, None)
        if value is not None and len(value) > 2:
            raise UsageError(f'--{name.replace("_", "-")} takes one or two values, got {len(value)}')


def source_hints(args: argparse.Namespace) -> Dict[str, Any]:
    """Reader hints (``timm_vit_variants.checkpoints.HINTS``) from the source options; unset ones are None."""
    size = getattr(args, 'source_img_size', None)
    hints = {name: getattr(args, name, None) for name in ('num_heads', 'prefix', 'act_layer', 'norm_eps',
                                                          'pos_embed', 'use_ema')}
    hints['img_size'] = None if size is None else (size[0], size[-1])
    hints['limits'] = limits_of(args)
    return hints


def limits_of(args: argparse.Namespace) -> Any:
    """The ``Limits`` the ``--limit`` options ask for (defaults otherwise)."""
    from timm_vit_variants.limits import DEFAULT_LIMITS

    return DEFAULT_LIMITS.with_overrides(getattr(args, 'limits', None) or [])


def recorded_command(parser: argparse.ArgumentParser, args: argparse.Namespace, prog: str) -> str:
    """The command line as a model card records it: positionals and allow-listed options, rebuilt from ``args``.

    Rebuilt rather than copied from argv, so an option that could carry a secret never reaches the card
    however it was spelled.
    """
    words: List[str] = prog.split()
    options: List[str] = []
    for action in parser._actions:
        if action.dest not in _RECORDED:
            continue
        value = getattr(args, action.dest, None)
        default = action.default
        if isinstance(default, str) and action.type is not None:
            default = action.type(default)  # argparse converts string defaults the same way
        if value is None or value == default:
            continue
        if not action.option_strings:
            words.append(str(value))
            continue
        flag = action.option_strings[-1] if action.option_strings[-1].startswith('--') else action.option_strings[0]
        if action.nargs == 0:
            options.append(flag)
        elif action.__class__.__name__ == '_AppendAction':
            for item in value:
                options += [flag, str(item)]
        elif isinstance(value, list):
            options += [flag, *map(str, value)]
        else:
            options += [flag, str(value)]
    return shlex.join(words + options)
