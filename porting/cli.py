"""``vit-port``: convert, resize, inspect and verify ViT checkpoints for the ``simple_vit_*`` family.

Each subcommand lives in its own module that exposes ``add_parser(subparsers)``; the parser it
registers sets ``func`` to a callable ``(args) -> int``. Add a module to ``COMMANDS`` to add a
subcommand. Bad input exits 1 with ``error: <message>`` on stderr (no traceback), usage errors
exit 2; set ``VIT_PORT_DEBUG=1`` to see the traceback of an unexpected failure.
"""
import argparse
import importlib
import os
import sys
from typing import List, NoReturn, Optional, Sequence

COMMANDS = (
    'porting.commands.convert',
    'porting.commands.resize',
    'porting.commands.inspect',
    'porting.commands.verify',
)


class Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as ``error: <message>`` (exit 2)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f'error: {message}\n')


def size_arg(text: str) -> int:
    """A positive integer CLI value."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f'expected a positive integer, got {text!r}') from None
    if value < 1:
        raise argparse.ArgumentTypeError(f'expected a positive integer, got {text!r}')
    return value


def add_geometry_args(parser: argparse.ArgumentParser) -> None:
    """--img-size H [W], --patch-size P [P], --resample-like: shared by convert, resize and inspect."""
    parser.add_argument('--img-size', nargs='+', type=size_arg, metavar=('H', 'W'),
                        help='target image size: H W, or one value for a square (default: the source size)')
    parser.add_argument('--patch-size', nargs='+', type=size_arg, metavar=('P', 'P'),
                        help='target patch size; the patchifier is PI-resized (FlexiViT) (default: the source patch)')
    parser.add_argument('--resample-like', choices=('bigvision', 'timm', 'hf'),
                        help="rule for resizing a learned position table: big_vision bilinear (align_corners), "
                             "timm bicubic+antialias or HF bicubic (default: the source ecosystem's rule)")


def add_source_args(parser: argparse.ArgumentParser) -> None:
    """--from and the reader hints: how to read a source checkpoint."""
    parser.add_argument('--from', dest='fmt', choices=('bigvision', 'vitjax', 'timm', 'hf'),
                        help='source format (default: detected from the file)')
    parser.add_argument('--num-heads', type=size_arg,
                        help='attention heads, for sources that do not record them (e.g. a bare timm state dict)')
    parser.add_argument('--source-img-size', nargs='+', type=size_arg, metavar=('H', 'W'),
                        help='image size the source was trained at, for sources that do not record it: splits a '
                             'non-square learned table into its grid; sets the sin-cos source size (default 224)')
    parser.add_argument('--prefix', help="key prefix inside the source, e.g. 'params/img/' for a two-tower model")
    parser.add_argument('--act-layer', choices=('gelu', 'gelu_tanh', 'quick_gelu', 'silu', 'relu'),
                        help="override the inferred MLP activation (e.g. 'gelu' to match timm's exact-GELU AugReg port)")
    parser.add_argument('--norm-eps', type=float, help='override the inferred LayerNorm epsilon')
    parser.add_argument('--pos-embed', choices=('sincos', 'none'),
                        help="for a checkpoint without a position table: big_vision sin-cos (default) or none")
    parser.add_argument('--no-ema', dest='use_ema', action='store_false', default=None,
                        help='timm training checkpoints: use state_dict rather than the EMA weights')


def check_sizes(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Size options take one (square) or two (H W) values."""
    for name in ('img_size', 'patch_size', 'source_img_size'):
        value = getattr(args, name, None)
        if value is not None and len(value) > 2:
            parser.error(f'--{name.replace("_", "-")} takes one or two values, got {len(value)}')


def build_parser() -> Parser:
    parser = Parser(
        prog='vit-port',
        description='Convert official ViT weights (big_vision / vit_jax .npz, timm, transformers) into '
                    'timm-vit-variants simple_vit_* Hub folders, with numerical verification.')
    sub = parser.add_subparsers(dest='command', metavar='COMMAND', parser_class=Parser)
    sub.required = True
    for name in COMMANDS:
        importlib.import_module(name).add_parser(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run ``vit-port``; returns the exit status (0 ok, 1 failure, 2 usage)."""
    argv: List[str] = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    args.argv = argv
    from timm_vit_variants.errors import ViTVariantsError

    try:
        return int(args.func(args) or 0)
    except SystemExit as e:  # a usage error found after parsing (parser.error)
        return int(e.code or 0)
    except ViTVariantsError as e:
        print(f'error: {e}', file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print('error: interrupted; no output was written', file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001  (the CLI promises a message, not a traceback)
        if os.environ.get('VIT_PORT_DEBUG'):
            raise
        print(f'error: {type(e).__name__}: {e} (set VIT_PORT_DEBUG=1 for a traceback)', file=sys.stderr)
        return 1


def command_line(argv: Sequence[str]) -> str:
    """The exact command, as recorded in model cards."""
    import shlex

    return 'vit-port ' + shlex.join(argv)


def source_hints(args: argparse.Namespace) -> dict:
    """Reader hints (``timm_vit_variants.checkpoints.HINTS``) from the source options; unset ones are None."""
    size = getattr(args, 'source_img_size', None)
    hints = {name: getattr(args, name, None) for name in ('num_heads', 'prefix', 'act_layer', 'norm_eps',
                                                          'pos_embed', 'use_ema')}
    hints['img_size'] = None if size is None else (size[0], size[-1])
    return hints
