"""What a conversion is asked to do, as one value: how to read the source, the target, the output, the checks.

``convert``, ``resize`` and ``export`` take a request built once, from parsed CLI arguments or from
Python keywords; each keyword is named as the CLI option that sets it (``img_size`` is ``--img-size``,
``source_img_size`` is ``--source-img-size``, ``from_`` is ``--from``: ``from`` is a Python keyword).
"""
from dataclasses import dataclass, field, fields, replace
from typing import Any, Dict, Iterable, Optional, Tuple, Type, TypeVar, Union

from timm_vit_variants.limits import DEFAULT_LIMITS, Limits

from .sizes import DEFAULT_MAX_SHARD_SIZE

__all__ = ['DEFAULT_TOL', 'DEFAULT_OPSET', 'SourceOptions', 'TargetOptions', 'OutputOptions', 'ConvertRequest',
           'ExportRequest', 'request_of', 'limits_from']

# Verification tolerance on max |delta| of logits and features, float32.
DEFAULT_TOL = 1e-4
# 18: the lowest opset the dynamo exporter writes, and the first with an antialiased Resize.
DEFAULT_OPSET = 18

Size = Optional[Tuple[int, ...]]


def _given(options: Dict[str, Any], known: Any, what: str) -> Dict[str, Any]:
    """The options that are set (None means "not given"), sizes as tuples; an unknown name raises TypeError."""
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise TypeError(f'unknown {what} option(s) {unknown}; expected some of {sorted(known)}')
    given = {k: v for k, v in options.items() if v is not None}
    for name in ('img_size', 'patch_size', 'source_img_size', 'static', 'mean', 'std'):
        if name in given:
            given[name] = _size(given[name])
    return given


# Keywords spelled as a CLI flag whose request field is named otherwise: flag -> field.
_FIELD_OF_FLAG = {'no_verify': 'verify', 'no_ema': 'use_ema', 'dataset': 'datasets', 'limit': 'limits'}


def _as_field(flag: str, value: Any) -> Tuple[str, Any]:
    """(field, value) for a keyword spelled as its flag; None as the value means "not given"."""
    if flag == 'no_verify':
        return 'verify', not value
    if flag == 'no_ema':
        return 'use_ema', False if value else None
    if flag == 'dataset':
        return 'datasets', (value,) if isinstance(value, str) else tuple(value)
    if flag == 'limit':
        return 'limits', limits_from(value)
    return flag, value


def limits_from(limit: Union[None, str, Iterable[str], Limits]) -> Limits:
    """The ``Limits`` a ``limit=`` keyword means: a ``Limits``, or ``--limit``'s ``'NAME=N'`` text (one or a list)."""
    if limit is None:
        return DEFAULT_LIMITS
    if isinstance(limit, Limits):
        return limit
    return DEFAULT_LIMITS.with_overrides([limit] if isinstance(limit, str) else limit)


def _size(value: Any) -> Size:
    """A number or a sequence of them as a tuple; None stays None."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (value,)
    return tuple(value)


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

    @classmethod
    def from_options(cls, **options: Any) -> 'SourceOptions':
        """Source options from keywords spelled as the CLI flags (``from_='timm'``, ``num_heads=12``,
        ``no_ema=True``); None means "not given", unknown keywords raise TypeError."""
        known = {f.name for f in fields(cls)} - {'use_ema'} | {'no_ema'}
        pairs = (_as_field(flag, value) for flag, value in _given(options, known, 'source').items())
        return cls(**{name: value for name, value in pairs if value is not None})

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
    def from_options(cls, **options: Any) -> 'ConvertRequest':
        """A request from flat keywords spelled as the CLI flags (``from_='timm'``, ``num_heads=12``,
        ``img_size=384``, ``no_verify=True``, ``dataset=['imagenet-1k']``, ``limit=['depth=512']``, ...).

        Unknown keywords raise TypeError; None means "not given".
        """
        parts: Dict[str, Dict[str, Any]] = {'source': {}, 'target': {}, 'output': {}, '': {}}
        owners = {f.name: part for part, kind in (('source', SourceOptions), ('target', TargetOptions),
                                                  ('output', OutputOptions)) for f in fields(kind)}
        owners.update({name: '' for name in ('verify', 'tol', 'limits', 'progress', 'memory_budget')})
        known = {name for name in owners if name not in _FIELD_OF_FLAG.values()} | set(_FIELD_OF_FLAG)
        for flag, value in _given(options, known, 'conversion').items():
            name, value = _as_field(flag, value)
            if value is not None:
                parts[owners[name]][name] = value
        return cls(SourceOptions(**parts['source']), TargetOptions(**parts['target']),
                   OutputOptions(**parts['output']), **parts[''])

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

    @classmethod
    def from_options(cls, **options: Any) -> 'ExportRequest':
        """A request from keywords spelled as the CLI flags (``static=384``, ``opset=18``, ``limit=[...]``);
        None means "not given"."""
        known = {f.name for f in fields(cls)} - {'limits'} | {'limit'}
        return cls(**dict(_as_field(flag, value) for flag, value in _given(options, known, 'export').items()))


_Request = TypeVar('_Request', ConvertRequest, ExportRequest)


def request_of(kind: Type[_Request], request: Optional[_Request], options: Dict[str, Any]) -> _Request:
    """``request`` itself, or one of ``kind`` built from keyword ``options`` spelled as the flags; never both."""
    if request is not None and options:
        raise TypeError(f'give either a {kind.__name__} or keyword options, not both')
    return request if request is not None else kind.from_options(**options)
