"""What a conversion or an export is asked to do, as one value, built by one factory from keywords spelled as flags.

``convert``, ``resize`` and ``export`` take a request. ``build_request(kind, **flags)`` is the one place one is
made: the Python API passes its keywords, and the CLI passes its parsed arguments through one adapter
(``porting.commands.options.request_from_args``), so both spell every option the same way. Each keyword is named
as the CLI option that sets it (``img_size`` is ``--img-size``, ``from_`` is ``--from``: ``from`` is a Python
keyword, ``no_verify`` is ``--no-verify``, a repeatable ``--dataset``/``--limit`` takes a name or a list). None
means "not given"; an unknown keyword raises ``UnknownOptionError`` (a ``ViTVariantsError`` and a ``TypeError``),
and a value no option takes raises ``ViTVariantsError`` naming it. The defaults are ``porting.constants``'.
"""
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Dict, Iterable, Optional, Tuple, Type, TypeVar, Union

from timm_vit_variants.errors import UnknownOptionError, ViTVariantsError
from timm_vit_variants.limits import DEFAULT_LIMITS, Limits

from .constants import DEFAULT_OPSET, DEFAULT_TOL, fraction_problem, opset_problem
from .sizes import DEFAULT_MAX_SHARD_SIZE

__all__ = ['DEFAULT_TOL', 'DEFAULT_OPSET', 'SourceOptions', 'TargetOptions', 'OutputOptions', 'ConvertRequest',
           'ExportRequest', 'build_request', 'request_flags', 'request_of', 'limits_from']

Size = Optional[Tuple[int, ...]]


def limits_from(limit: Union[None, str, Iterable[str], Limits]) -> Limits:
    """The ``Limits`` a ``limit=`` keyword means: a ``Limits``, or ``--limit``'s ``'NAME=N'`` text (one or a list)."""
    if limit is None:
        return DEFAULT_LIMITS
    if isinstance(limit, Limits):
        return limit
    return DEFAULT_LIMITS.with_overrides([limit] if isinstance(limit, str) else limit)


def _size(value: Any) -> Size:
    """A number or a sequence of them as a tuple."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (value,)
    return tuple(value)


def _names(value: Union[str, Iterable[str]]) -> Tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def _refuse(problem: Optional[str], key: str) -> None:
    """Raise ViTVariantsError naming ``key`` when a ``porting.constants`` check found a ``problem``."""
    if problem:
        raise ViTVariantsError(problem, key=key)


# Flags whose field is named otherwise, or that take a value in another shape: flag -> (field, its value).
_FLAG_FIELDS: Dict[str, Tuple[str, Callable[[Any], Any]]] = {
    'no_verify': ('verify', lambda value: not value),
    'no_ema': ('use_ema', lambda value: False if value else None),
    'assume_heads': ('assume_heads', lambda value: value or None),  # unset: None, as the reader hints take it
    'dataset': ('datasets', _names),
    'limit': ('limits', limits_from),
    'command_line': ('command', lambda value: value),
}
# Fields taken as tuples: a size, per-channel values.
_TUPLES = ('img_size', 'patch_size', 'source_img_size', 'static', 'mean', 'std')


@dataclass(frozen=True)
class SourceOptions:
    """How to read the source, and facts about it that a checkpoint may not record.

    Attributes:
        from_: The source format (``--from``); detected when None.
        prefix: Key prefix inside the source (``--prefix``).
        num_heads: Attention heads (``--num-heads``), for sources that do not record them.
        source_img_size: The image size the source was trained at (``--source-img-size``).
        act_layer, norm_eps: Overrides of the inferred MLP activation and LayerNorm epsilon.
        pos_embed: For a checkpoint without a position table: 'sincos' or 'none'.
        use_ema: Prefer the EMA weights of a timm training checkpoint (default: yes, as timm).
        assume_heads: For a bare timm state dict of a non-standard width, assume timm's 64-wide heads.
        mean, std, interpolation, crop_pct, crop_mode: The preprocessing, for sources that do not record it.
        in_chans: Input channels, for a NaFlex Dense patch kernel (it records only P*P*C).
        endpoint, token: How to reach a source named by Hub id, for a private repo or another Hub
            (``--endpoint``, ``--token``; default ``HF_ENDPOINT`` and ``HF_TOKEN`` or the login cache).
            The token is never shown in the request's repr.
        download_timeout, stall_timeout: Seconds an https:// source's download may take in all, and may go
            with less than 1 KiB arriving (``--download-timeout``, ``--stall-timeout``; see ``porting.sources``).
    """
    from_: Optional[str] = None
    prefix: Optional[str] = None
    num_heads: Optional[int] = None
    assume_heads: Optional[bool] = None
    source_img_size: Size = None
    act_layer: Optional[str] = None
    norm_eps: Optional[float] = None
    pos_embed: Optional[str] = None
    use_ema: Optional[bool] = None
    mean: Optional[Tuple[float, ...]] = None
    std: Optional[Tuple[float, ...]] = None
    interpolation: Optional[str] = None
    crop_pct: Optional[float] = None
    crop_mode: Optional[str] = None
    in_chans: Optional[int] = None
    endpoint: Optional[str] = None
    token: Optional[str] = field(default=None, repr=False)
    download_timeout: Optional[float] = None
    stall_timeout: Optional[float] = None

    def __post_init__(self) -> None:
        if self.crop_pct is not None:
            _refuse(fraction_problem(self.crop_pct), 'crop_pct')

    @classmethod
    def from_options(cls, **flags: Any) -> 'SourceOptions':
        """``build_request(SourceOptions, **flags)``."""
        return build_request(cls, **flags)

    def hints(self) -> Dict[str, Any]:
        """The reader hints (``timm_vit_variants.checkpoints.HINTS``) these options set."""
        size = self.source_img_size
        hints = dict(prefix=self.prefix, num_heads=self.num_heads, act_layer=self.act_layer, norm_eps=self.norm_eps,
                     pos_embed=self.pos_embed, use_ema=self.use_ema, assume_heads=self.assume_heads or None,
                     img_size=None if size is None else (size[0], size[-1]), in_chans=self.in_chans)
        return {k: v for k, v in hints.items() if v is not None}


@dataclass(frozen=True)
class TargetOptions:
    """The model to write: its geometry and head (unset: the source's)."""
    img_size: Size = None
    patch_size: Size = None
    num_classes: Optional[int] = None
    resample_like: Optional[str] = None
    dtype: Optional[str] = None  # 'source' (None), 'float32', 'bfloat16' or 'float16'


@dataclass(frozen=True)
class OutputOptions:
    """Where and how the folder is written, and what its card records."""
    overwrite: bool = False
    max_shard_size: Union[str, int] = DEFAULT_MAX_SHARD_SIZE
    license: Optional[str] = None
    base_model: Optional[str] = None
    datasets: Tuple[str, ...] = ()
    allow_nonfinite: bool = False
    command: Optional[str] = None


@dataclass(frozen=True)
class ConvertRequest:
    """One conversion (or resize): source options, target, output, verification, limits."""
    source: SourceOptions = field(default_factory=SourceOptions)
    target: TargetOptions = field(default_factory=TargetOptions)
    output: OutputOptions = field(default_factory=OutputOptions)
    verify: bool = True
    tol: float = DEFAULT_TOL
    limits: Limits = DEFAULT_LIMITS
    progress: bool = False
    memory_budget: Union[None, str, int] = None  # bytes verification may hold (None: a share of available memory)

    @classmethod
    def from_options(cls, **flags: Any) -> 'ConvertRequest':
        """``build_request(ConvertRequest, **flags)``: ``from_='timm'``, ``img_size=384``, ``no_verify=True``,
        ``dataset=['imagenet-1k']``, ``limit=['depth=512']``, ..."""
        return build_request(cls, **flags)

    def with_source(self, **changes: Any) -> 'ConvertRequest':
        return replace(self, source=replace(self.source, **changes))


@dataclass(frozen=True)
class ExportRequest:
    """One export: a fixed image size or dynamic H x W, the ONNX opset, OUT handling, the check, the limits."""
    static: Size = None
    opset: int = DEFAULT_OPSET
    overwrite: bool = False
    tol: float = DEFAULT_TOL
    limits: Limits = DEFAULT_LIMITS
    progress: bool = False

    def __post_init__(self) -> None:
        _refuse(opset_problem(self.opset), 'opset')

    @classmethod
    def from_options(cls, **flags: Any) -> 'ExportRequest':
        """``build_request(ExportRequest, **flags)``: ``static=384``, ``opset=18``, ``limit=[...]``, ..."""
        return build_request(cls, **flags)


_Request = TypeVar('_Request', SourceOptions, ConvertRequest, ExportRequest)
# The parts a request is made of, each a dataclass of fields; '' is the request's own fields.
_PARTS: Dict[type, Dict[str, type]] = {
    SourceOptions: {'': SourceOptions},
    ConvertRequest: {'source': SourceOptions, 'target': TargetOptions, 'output': OutputOptions, '': ConvertRequest},
    ExportRequest: {'': ExportRequest},
}


def _owners(kind: type) -> Dict[str, str]:
    """{field: the part holding it} for a request kind."""
    return {f.name: part for part, holder in _PARTS[kind].items() for f in fields(holder) if f.name not in _PARTS[kind]}


def request_flags(kind: type) -> Tuple[str, ...]:
    """The keywords (spelled as the CLI flags) a ``kind`` of request is built from."""
    flag_of = {name: flag for flag, (name, _) in _FLAG_FIELDS.items()}
    return tuple(flag_of.get(name, name) for name in _owners(kind))


def build_request(kind: Type[_Request], **flags: Any) -> _Request:
    """The one request factory: a ``kind`` (``ConvertRequest``, ``ExportRequest``, ``SourceOptions``) from keywords
    spelled as the flags; None means "not given" (the default)."""
    known = request_flags(kind)
    unknown = sorted(set(flags) - set(known))
    if unknown:
        what = {ConvertRequest: 'conversion', ExportRequest: 'export', SourceOptions: 'source'}[kind]
        raise UnknownOptionError(f'unknown {what} option(s) {unknown}; expected some of {sorted(known)}')
    owners = _owners(kind)
    parts: Dict[str, Dict[str, Any]] = {part: {} for part in _PARTS[kind]}
    for flag, value in flags.items():
        if value is None:
            continue
        name = flag
        if flag in _FLAG_FIELDS:
            name, convert = _FLAG_FIELDS[flag]
            value = convert(value)
        if value is None:
            continue
        if name in _TUPLES:
            value = _size(value)
        parts[owners[name]][name] = value
    made = {part: holder(**parts[part]) for part, holder in _PARTS[kind].items() if part}
    return kind(**made, **parts[''])


def request_of(kind: Type[_Request], request: Optional[_Request], options: Dict[str, Any]) -> _Request:
    """``request`` itself, or one of ``kind`` built from keyword ``options`` spelled as the flags; never both."""
    if request is not None and options:
        raise UnknownOptionError(f'give either a {kind.__name__} or keyword options, not both')
    return request if request is not None else build_request(kind, **options)
