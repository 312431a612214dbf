"""``vit-port export FOLDER_OR_MODEL OUT``: a verified ONNX or ``torch.export`` file for any batch and H x W."""
import argparse

from ..constants import DEFAULT_OPSET, EXPORT_FORMATS, ONNX_OPSETS, opset_problem
from .options import UsageError, add_safety_args, add_tol_arg, check_sizes, report, request_from_args, size_arg

_DESCRIPTION = """\
Write a converted folder (or a registered simple_vit_* name, hf-hub:ORG/NAME or local-dir:PATH,
loaded with its weights) as one ONNX file, or as a torch.export program with --format pt2 (the
default when OUT ends in .pt2). Batch, height and width are dynamic: the right/bottom pad, the
sin-cos table and the learned-table resample are computed in the graph. --static H W fixes the
image size (the batch stays dynamic).

ONNX is written by PyTorch's dynamo exporter (opset 18 to 23): it is the one that translates the
antialiased resizes of the timm and flexi rules exactly (ONNX Resize, antialias=1, opset 18).
The file is checked with onnx.checker and run by ONNX Runtime (CPU) against PyTorch at several
sizes, non-square and not divisible by the patch among them; a .pt2 is loaded back and run the
same way. It fails above --tol and then leaves nothing behind. The file carries the input
mean/std, patch size and the source sha256 (from the folder's model card) as metadata.
"""


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        'export', help='export to ONNX or torch.export (.pt2) for any H x W, verified by running the file',
        description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('src', metavar='FOLDER_OR_MODEL',
                        help='converted folder, simple_vit_* name (with weights), hf-hub:ORG/NAME or local-dir:PATH')
    parser.add_argument('out', metavar='OUT', help='output file, e.g. model.onnx (must not exist unless --overwrite)')
    parser.add_argument('--format', dest='export_format', choices=EXPORT_FORMATS, default=None,
                        help='onnx or pt2 (default: pt2 when OUT ends in .pt2, else onnx)')
    parser.add_argument('--static', nargs='+', type=size_arg, metavar=('H', 'W'),
                        help='fix the image size to H x W, or one value for a square (default: dynamic height and '
                             'width)')
    parser.add_argument('--opset', type=opset_arg, default=None,
                        help=f'ONNX opset, {ONNX_OPSETS.start} to {ONNX_OPSETS.stop - 1} (default {DEFAULT_OPSET})')
    parser.add_argument('--overwrite', action='store_true',
                        help='replace OUT if it is a file (never a source, never a folder)')
    add_tol_arg(parser, 'logits')
    add_safety_args(parser)
    return parser


def opset_arg(text: str) -> int:
    """An ONNX opset the dynamo exporter writes."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f'expected an integer, got {text!r}') from None
    problem = opset_problem(value)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return value


def run(args: argparse.Namespace) -> int:
    check_sizes(args)
    fmt = args.export_format or ('pt2' if args.out.endswith('.pt2') else 'onnx')
    if fmt == 'pt2' and args.opset is not None:
        raise UsageError('--opset applies to --format onnx only')
    from ..export import export_onnx, export_pt2

    request = request_from_args('export', args)
    result = (export_onnx if fmt == 'onnx' else export_pt2)(args.src, args.out, request)
    report(result)
    return 0
