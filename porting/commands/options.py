"""Options shared by several ``vit-port`` commands, and what they mean once parsed.

Imports nothing heavy: ``vit-port --help`` builds every parser without torch or timm, from the defaults
and choice lists of ``porting.constants``. Each option's ``dest`` is the keyword the Python API spells it
as, so a parsed command line becomes its request through one adapter, ``request_from_args``, in front of
the one factory, ``porting.request.build_request``.
"""
import argparse
import os
import shlex
import sys
from typing import Any, List

from ..constants import (
    ACT_LAYERS, CROP_MODES, DEFAULT_TOL, DTYPES, INTERPOLATIONS, LIMIT_NAMES, fraction_problem)
from ..families.registry import FORMATS, RESAMPLE_RULES
from ..redact import without_credentials
from ..sizes import DEFAULT_MAX_SHARD_SIZE

__all__ = [
    'say', 'UsageError', 'SOURCE_HELP', 'FORMATS', 'RESAMPLE_RULES', 'ACT_LAYERS', 'LIMIT_NAMES', 'DTYPES', 'size_arg',
    'count_arg', 'tolerance_arg', 'fraction_arg', 'limit_arg', 'byte_size_arg', 'seconds_arg', 'add_geometry_args',
    'add_source_args', 'add_download_args', 'add_output_args', 'add_safety_args', 'add_tol_arg', 'add_verify_args',
    'add_hub_args', 'add_push_options', 'add_push_to_option', 'check_sizes', 'check_folder_out', 'request_from_args',
    'recorded_command', 'report', 'remedy',
]

SOURCE_HELP = ('checkpoint file or folder, hf-hub:ORG/NAME[@REV] or ORG/NAME (a Hub repo), an https:// URL, or a '
               'registered tag such as simple_vit_small_patch16_224.bv_i1k_300ep (a local path wins)')
# What ``convert`` writes is a folder; an OUT named like one file is a mistake worth stopping at.
_FILE_OUTPUTS = {'.onnx': 'export', '.pt2': 'export', '.safetensors': None, '.npz': None, '.pth': None, '.bin': None}

# Options a model card may record: nothing that can carry a credential (--token, --endpoint) or free text.
_RECORDED = frozenset({
    'src', 'out', 'img_size', 'patch_size', 'resample_like', 'num_classes', 'from_', 'num_heads', 'source_img_size',
    'prefix', 'act_layer', 'norm_eps', 'pos_embed', 'no_ema', 'overwrite', 'max_shard_size', 'license', 'base_model',
    'assume_heads', 'mean', 'std', 'interpolation', 'crop_pct', 'crop_mode', 'in_chans',
    'dataset', 'tol', 'no_verify', 'dtype', 'allow_nonfinite', 'limit', 'push_to', 'private', 'revision', 'create_pr',
})


# How to give, on the command line, what a ``ViTVariantsError.needs`` names.
_FLAGS = {
    'source_img_size': 'give it with --source-img-size H [W]',
    'num_heads': 'give it with --num-heads N, or --assume-heads to assume 64-wide heads',
    'prefix': "give it with --prefix, e.g. --prefix 'params/img/'",
    'fmt': 'leave --from out to detect the format, or give the right one',
}


def remedy(needs: Any) -> str:
    """The command-line hint for an error's ``needs`` (empty when there is none)."""
    if not needs:
        return ''
    if needs.startswith('limit:'):
        return f' (lift it with --limit {needs[len("limit:"):]})'
    return f' ({_FLAGS[needs]})' if needs in _FLAGS else ''


def say(text: str, err: bool = False) -> None:
    """Print a line; characters the terminal cannot show (e.g. from a non-UTF-8 file name) are escaped."""
    stream = sys.stderr if err else sys.stdout
    encoding = getattr(stream, 'encoding', None) or 'utf-8'
    print(text.encode(encoding, 'backslashreplace').decode(encoding), file=stream)


class UsageError(Exception):
    """A bad combination of options found after parsing; reported like argparse's own errors (exit 2)."""


def size_arg(text: str) -> int:
    """A positive integer CLI value."""
    return _int_at_least(text, 1, 'a positive integer')


def count_arg(text: str) -> int:
    """A non-negative integer CLI value (0 is meaningful, e.g. ``--num-classes 0`` drops the head)."""
    return _int_at_least(text, 0, 'a non-negative integer')


def _int_at_least(text: str, minimum: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f'expected {what}, got {text!r}') from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f'expected {what}, got {text!r}')
    return value


def tolerance_arg(text: str) -> float:
    """A finite, non-negative float CLI value."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f'expected a number, got {text!r}') from None
    if not 0 <= value < float('inf'):
        raise argparse.ArgumentTypeError(f'expected a finite number >= 0, got {text!r}')
    return value


def fraction_arg(text: str) -> float:
    """A CLI value in (0, 1], such as a crop fraction."""
    value = tolerance_arg(text)
    problem = fraction_problem(value)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return value


def limit_arg(text: str) -> str:
    """``NAME=N`` for ``--limit``: a known limit and a positive integer, checked as the command line is parsed."""
    name, sep, value = text.partition('=')
    name = name.strip().replace('-', '_')
    if not sep or name not in LIMIT_NAMES:
        raise argparse.ArgumentTypeError(f'expected NAME=N with NAME one of {", ".join(LIMIT_NAMES)}, got {text!r}')
    if not value.strip().isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f'limit {name} needs a positive integer, got {value!r}')
    return f'{name}={int(value)}'


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
                        help='target patch size; the patchifier is PI-resized (default: the source patch)')
    parser.add_argument('--resample-like', choices=RESAMPLE_RULES,
                        help="rule for resizing a learned position table, as the named source ecosystem resizes "
                             "it (default: the source ecosystem's rule)")


def add_source_args(parser: argparse.ArgumentParser) -> None:
    """--from and the reader hints: how to read a source checkpoint."""
    parser.add_argument('--from', dest='from_', choices=FORMATS,
                        help='source format (default: detected from the file; for a file whose keys fit two '
                             'formats, this chooses, else its name or Hub id does)')
    parser.add_argument('--num-heads', type=size_arg,
                        help='attention heads, for sources that do not record them (e.g. a bare timm state dict)')
    parser.add_argument('--assume-heads', action='store_true',
                        help="a source that records no head count (e.g. a bare timm state dict) and has a "
                             "non-standard width: assume 64-wide heads (a check against the same count cannot catch "
                             'a wrong one)')
    parser.add_argument('--source-img-size', nargs='+', type=size_arg, metavar=('H', 'W'),
                        help='image size the source was trained at, for sources that do not record it: splits a '
                             'non-square learned table into its grid; sets the sin-cos source size (default 224)')
    parser.add_argument('--prefix', help="key prefix inside the source, e.g. 'params/img/' for a two-tower model")
    parser.add_argument('--act-layer', choices=ACT_LAYERS,
                        help="override the inferred MLP activation (e.g. 'gelu' to match timm's exact-GELU AugReg port)")
    parser.add_argument('--norm-eps', type=float, help='override the inferred LayerNorm epsilon')
    parser.add_argument('--in-chans', type=int, metavar='C',
                        help='input channels, for a linear (Dense) patch kernel (P*P*C, width), which does not '
                             'record them (default 3)')
    parser.add_argument('--pos-embed', choices=('sincos', 'none'),
                        help="for a checkpoint without a position table: big_vision sin-cos (default) or none")
    parser.add_argument('--no-ema', action='store_true',
                        help='timm training checkpoints: use state_dict rather than the EMA weights')
    g = parser.add_argument_group('preprocessing, for sources that do not record it (else assumed, and said so)')
    g.add_argument('--mean', nargs='+', type=float, metavar='M', help='input mean per channel, e.g. 0.485 0.456 0.406')
    g.add_argument('--std', nargs='+', type=float, metavar='S', help='input std per channel')
    g.add_argument('--interpolation', choices=INTERPOLATIONS, help='resize interpolation of the eval transform')
    g.add_argument('--crop-pct', type=fraction_arg, metavar='F', help='center-crop fraction of the eval transform, in (0, 1]')
    g.add_argument('--crop-mode', choices=CROP_MODES,
                   help="eval transform: resize the short side and center-crop, or 'squash' the whole image")
    add_safety_args(parser)
    add_download_args(parser)


def seconds_arg(text: str) -> float:
    """A positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        value = float('nan')
    if not 0 < value < float('inf'):
        raise argparse.ArgumentTypeError(f'expected a number of seconds > 0, got {text!r}')
    return value


def add_download_args(parser: argparse.ArgumentParser) -> None:
    """--download-timeout and --stall-timeout: bounds on downloading a source given by https:// URL (or a tag's
    url); the defaults are ``porting.sources``' ``DEFAULT_DOWNLOAD_TIMEOUT`` and ``DEFAULT_STALL_TIMEOUT``."""
    g = parser.add_argument_group('download of an https:// source (Hub ids use HF_HUB_DOWNLOAD_TIMEOUT)')
    g.add_argument('--download-timeout', type=seconds_arg, metavar='SECONDS',
                   help='give up on a download not finished after this long (default 7200)')
    g.add_argument('--stall-timeout', type=seconds_arg, metavar='SECONDS',
                   help='give up when less than 1 KiB arrives in this long (default 60)')


def add_safety_args(parser: argparse.ArgumentParser) -> None:
    """--limit: lift the sanity bounds on what a source may claim."""
    parser.add_argument('--limit', action='append', metavar='NAME=N', default=None, type=limit_arg,
                        help='lift a sanity limit on what the source may claim, e.g. --limit depth=512 (repeatable; '
                             'names: depth, width, mlp, heads, classes, img_size, tokens, tensor_bytes, '
                             'rel_pos_bytes, json_bytes, inflate_ratio; see docs/porting.md#safety)')


def add_output_args(parser: argparse.ArgumentParser) -> None:
    """Output options shared by ``convert`` and ``resize``."""
    parser.add_argument('--overwrite', action='store_true',
                        help='replace OUT if it is an empty folder or an earlier vit-port output (never a source, '
                             'never a folder holding other files)')
    parser.add_argument('--max-shard-size', default=DEFAULT_MAX_SHARD_SIZE, type=byte_size_arg,
                        help='split weights into Hub-convention shards above this size, e.g. 500MB (default 5GB); '
                             "note timm's local-dir:/hf-hub: loaders read only unsharded folders")
    parser.add_argument('--license', help='license recorded in the model card (default: the source\'s, if known)')
    parser.add_argument('--base-model', help='Hub id of the original weights, recorded in the model card')
    parser.add_argument('--dataset', action='append', metavar='NAME',
                        help='training dataset recorded in the model card (repeatable)')
    parser.add_argument('--allow-nonfinite', action='store_true',
                        help='write weights holding NaN or Inf (refused by default, even with --no-verify)')
    parser.add_argument('--dtype', choices=DTYPES, default=None,
                        help="dtype of the written weights (default 'source': the source's own); a cast that rounds "
                             'is verified against the uncast source within a bound for that dtype')


def add_tol_arg(parser: argparse.ArgumentParser, of: str = 'logits and features') -> None:
    """--tol: the verification bound on max |delta| (``porting.constants.DEFAULT_TOL`` unless given)."""
    parser.add_argument('--tol', type=tolerance_arg, default=DEFAULT_TOL,
                        help=f'verification tolerance on max |delta| of {of}, float32 (default {DEFAULT_TOL:g})')


def add_verify_args(parser: argparse.ArgumentParser) -> None:
    """--tol, --no-verify and --memory-budget, shared by ``convert`` and ``resize``."""
    add_tol_arg(parser)
    parser.add_argument('--no-verify', action='store_true', help='skip the numerical check against the source')
    parser.add_argument('--memory-budget', type=byte_size_arg, default=None, metavar='SIZE',
                        help='memory the check may hold, e.g. 8GB; above it the reference and the output run block by '
                             'block from the mapped weights (default: half the available memory)')


def add_hub_args(parser: argparse.ArgumentParser) -> None:
    """--token and --endpoint: how to reach the Hub, to download a named source or to push."""
    g = parser.add_argument_group('Hub access (a source named by Hub id, and uploads)')
    g.add_argument('--token', metavar='TOKEN', default=None, help='Hub token (default: HF_TOKEN, then login cache)')
    g.add_argument('--endpoint', metavar='URL', default=None, help='Hub URL (default: HF_ENDPOINT or huggingface.co)')


def add_push_options(parser: argparse.ArgumentParser, title: str = 'Hub upload') -> None:
    """Options shared by ``push`` and ``convert --push-to`` (the token and endpoint are ``add_hub_args``')."""
    g = parser.add_argument_group(title)
    g.add_argument('--private', action='store_true', help='create the repo as private (if it does not exist)')
    g.add_argument('--revision', metavar='BRANCH', default=None,
                   help='branch to commit to, created from main when missing, or refs/pr/N to add to an open '
                        'pull request (the PR target with --create-pr)')
    g.add_argument('--create-pr', action='store_true', help='open a pull request instead of committing')
    g.add_argument('--commit-message', metavar='MSG', default=None, help='commit title')
    g.add_argument('--dry-run', action='store_true',
                   help='print the files (path, size, sha256) that would be uploaded; send nothing')
    g.add_argument('--overwrite-card', action='store_true',
                   help='replace a README.md on the Hub that differs from the local card (kept otherwise)')


def add_push_to_option(parser: argparse.ArgumentParser) -> None:
    """``--push-to REPO_ID`` plus the upload options, for ``vit-port convert``."""
    parser.add_argument('--push-to', metavar='REPO_ID', default=None,
                        help='after converting, push OUT_DIR to this Hub repo (see `vit-port push --help`)')
    add_push_options(parser, title='Hub upload (with --push-to)')


# The flags that set what a conversion had to assume.
_ASSUMED_FLAGS = {'num_heads': '--num-heads', 'img_size': '--source-img-size', 'mean': '--mean', 'std': '--std',
                  'interpolation': '--interpolation', 'crop_pct': '--crop-pct', 'crop_mode': '--crop-mode',
                  'act_layer': '--act-layer', 'norm_eps': '--norm-eps', 'in_chans': '--in-chans',
                  'architecture': '--from'}  # DeiT-III or RoPE-ViT, for the keys both have


def report(result: Any) -> None:
    """Quiet success: the output path, then one verification line (skips go to stderr); then, on stderr, what
    the source did not record and was assumed, and how the source was read where that matters."""
    say(result.summary())
    say(result.verification.summary(), err=result.verification.status == 'skipped')
    for note in getattr(result, 'notes', ()):
        say(f'note: {note}', err=True)
    assumed = getattr(result, 'assumed', None)
    if assumed:
        facts = ', '.join(f'{k}={v!r}' for k, (v, _) in assumed.items())
        flags = ', '.join(dict.fromkeys(_ASSUMED_FLAGS[k] for k in assumed if k in _ASSUMED_FLAGS))
        say(f'note: not recorded in the source, assumed: {facts}' + (f' (set with {flags})' if flags else ''),
            err=True)


def check_folder_out(out: str) -> None:
    """``convert``/``resize`` write a folder: an OUT named like one file (``m.onnx``) is refused, with what to run."""
    suffix = os.path.splitext(out.rstrip('/'))[1].lower()
    if suffix not in _FILE_OUTPUTS:
        return
    if _FILE_OUTPUTS[suffix] == 'export':
        raise UsageError(f'OUT {out!r} looks like a {suffix} file, but convert writes a folder (model.safetensors, '
                         f'config.json, README.md): convert into a folder, then `vit-port export FOLDER {out}`')
    raise UsageError(f'OUT {out!r} looks like a {suffix} file, but convert writes a folder holding model.safetensors, '
                     'config.json and README.md: name the folder (e.g. out/my_model)')


def check_sizes(args: argparse.Namespace) -> None:
    """Size options take one (square) or two (H W) values."""
    for name in ('img_size', 'patch_size', 'source_img_size', 'static'):
        value = getattr(args, name, None)
        if value is not None and len(value) > 2:
            raise UsageError(f'--{name.replace("_", "-")} takes one or two values, got {len(value)}')


def request_from_args(kind: str, args: argparse.Namespace) -> Any:
    """The request (``kind``: 'convert' for a ``ConvertRequest``, 'export' for an ``ExportRequest``) a parsed command
    line asks for: the parsed options under their ``dest``, which is each one's keyword, given to
    ``porting.request.build_request`` as the Python API gives them. Options the command lacks keep their
    defaults; progress is shown on a terminal."""
    from ..request import ConvertRequest, ExportRequest, build_request, request_flags

    request_kind = {'convert': ConvertRequest, 'export': ExportRequest}[kind]
    flags = {flag: getattr(args, flag) for flag in request_flags(request_kind) if hasattr(args, flag)}
    return build_request(request_kind, **flags, progress=sys.stderr.isatty())


def _recorded_path(value: str, dest: str) -> str:
    """A positional as a card records it: a source named by Hub id, URL (without credentials) or tag as typed; a
    local path by its name."""
    if value.startswith('local-dir:'):
        value = value[len('local-dir:'):]
    elif dest == 'src' and not os.path.lexists(value):
        return without_credentials(value)
    return os.path.basename(os.path.normpath(value)) or value


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
            words.append(_recorded_path(str(value), action.dest))
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
