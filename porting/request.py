"""What a conversion is asked to do, as one value: how to read the source, the target, the output, the checks.

``convert``, ``resize`` and ``export`` take a request built once, from parsed CLI arguments or from
Python keywords; each keyword is named as the CLI option that sets it (``img_size`` is ``--img-size``,
``source_img_size`` is ``--source-img-size``, ``fmt`` is ``--from``).
"""
from dataclasses import dataclass, field, fields, replace
from typing import Any, Dict, Optional, Tuple, Union

from timm_vit_variants.limits import DEFAULT_LIMITS, Limits

__all__ = ['DEFAULT_TOL', 'DEFAULT_OPSET', 'SourceOptions', 'TargetOptions', 'OutputOptions', 'ConvertRequest',
           'ExportRequest']

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
        fmt: The source format (``--from``); detected when None.
        prefix: Key prefix inside the source (``--prefix``).
        num_heads: Attention heads (``--num-heads``), for sources that do not record them.
        source_img_size: The image size the source was trained at (``--source-img-size``).
        act_layer, norm_eps: Overrides of the inferred MLP activation and LayerNorm epsilon.
        pos_embed: For a checkpoint without a position table: 'sincos' or 'none'.
        use_ema: Prefer the EMA weights of a timm training checkpoint (default: yes, as timm).
        assume_heads: For a bare timm state dict of a non-standard width, assume timm's 64-wide heads.
        mean, std, interpolation, crop_pct, crop_mode: The preprocessing, for sources that do not record it.
        in_chans: Input channels, for a NaFlex Dense patch kernel (it records only P*P*C).
    """
    fmt: Optional[str] = None
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


@dataclass(frozen=True)
class OutputOptions:
    """Where and how the folder is written, and what its card records."""
    overwrite: bool = False
    max_shard_size: Union[str, int] = '5GB'
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

    @classmethod
    def from_options(cls, **options: Any) -> 'ConvertRequest':
        """A request from flat keywords named as the CLI options (``num_heads=12``, ``img_size=384``, ...).

        Unknown keywords raise TypeError; None means "not given".
        """
        parts: Dict[str, Dict[str, Any]] = {'source': {}, 'target': {}, 'output': {}, '': {}}
        owners = {f.name: part for part, kind in (('source', SourceOptions), ('target', TargetOptions),
                                                  ('output', OutputOptions)) for f in fields(kind)}
        owners.update({name: '' for name in ('verify', 'tol', 'limits', 'progress')})
        for name, value in _given(options, owners, 'conversion').items():
            parts[owners[name]][name] = tuple(value) if name == 'datasets' else value
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
        """A request from keywords named as the CLI options; None means "not given"."""
        return cls(**_given(options, {f.name for f in fields(cls)}, 'export'))
