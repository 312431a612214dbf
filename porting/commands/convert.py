"""``vit-port convert SRC OUT``: checkpoint -> verified simple_vit Hub folder."""
import argparse
import sys

from ..cli import add_geometry_args, add_source_args, check_sizes, command_line, source_hints


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        'convert', help='convert a checkpoint into a simple_vit Hub folder',
        description='Convert SRC (big_vision / vit_jax .npz, timm .pth/.safetensors or Hub folder, transformers '
                    'ViT folder) into OUT: model.safetensors, config.json (timm Hub format) and README.md. '
                    'The result is checked against the source reference implementation at the source geometry.')
    parser.add_argument('src', metavar='SRC', help='checkpoint file or folder')
    parser.add_argument('out', metavar='OUT', help='output folder (must not exist unless --overwrite)')
    add_geometry_args(parser)
    parser.add_argument('--num-classes', type=int, metavar='N',
                        help='classifier width: 0 drops the head, any other count than the source gets a zero head')
    add_source_args(parser)
    add_output_args(parser)
    parser.add_argument('--tol', type=float, default=1e-4,
                        help='verification tolerance on max |delta| of logits and features, float32 (default 1e-4)')
    parser.add_argument('--no-verify', action='store_true', help='skip the numerical check against the source')
    parser.set_defaults(func=lambda args: run(parser, args))
    return parser


def add_output_args(parser: argparse.ArgumentParser) -> None:
    """Output options shared with ``resize``."""
    parser.add_argument('--overwrite', action='store_true', help='replace OUT if it exists')
    parser.add_argument('--max-shard-size', default='5GB',
                        help='split weights into Hub-convention shards above this size, e.g. 500MB (default 5GB); '
                             "note timm's local-dir:/hf-hub: loaders read only unsharded folders")
    parser.add_argument('--license', help='license recorded in the model card (default: the source\'s, if known)')
    parser.add_argument('--base-model', help='Hub id of the original weights, recorded in the model card')
    parser.add_argument('--dataset', action='append', dest='datasets', metavar='NAME',
                        help='training dataset recorded in the model card (repeatable)')


def run(parser: argparse.ArgumentParser, args: argparse.Namespace, fmt: str = None) -> int:
    from ..convert import convert

    check_sizes(parser, args)
    result = convert(
        args.src, args.out, fmt=fmt or getattr(args, 'fmt', None), img_size=args.img_size, patch_size=args.patch_size,
        num_classes=getattr(args, 'num_classes', None), resample_like=args.resample_like,
        hints=source_hints(args), overwrite=args.overwrite, tol=args.tol,
        verify=not args.no_verify, max_shard_size=args.max_shard_size, license=args.license,
        base_model=args.base_model, datasets=args.datasets, command=command_line(args.argv),
        progress=sys.stderr.isatty())
    report(result)
    return 0


def report(result) -> None:
    """Quiet success: the output path, then one verification line (skips go to stderr)."""
    print(result.summary())
    line = result.verification.summary()
    print(line, file=sys.stderr if result.verification.status == 'skipped' else sys.stdout)
