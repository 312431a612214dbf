"""``SourceCheckpoint``: the skeleton every reader shares.

A reader says two things: which ``SimpleViTConfig`` the source describes (``_infer``), and, for
each of our state-dict keys, which source tensors it is made of and how (its ``TENSOR_RULES``, combinators of
``tensor_rules.py``, then its ``RULES`` table: source name templates plus a fill from ``fills.py``, the names filled
in by ``_fields``). The skeleton does the
rest once for all formats. It is given the model's layout as
data (a function from a config to its (key, shape, dtype) list, ``SimpleVisionTransformer.state_layout``),
as big_vision's ``vit.load`` is given ``init_params``, so no reader builds or imports the model. It
checks that every source tensor exists, is floating point and fits (by running each fill on meta
tensors), refuses unknown source tensors, and then fills real tensors one plan item at a time,
straight into whatever destination the caller owns (a model parameter, a slice of an output file),
with one copy per byte.
"""
import abc
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Pattern, Sequence, Set, Tuple

import torch

from ..config import SimpleViTConfig, TensorSpec
from ..errors import ViTVariantsError
from ..geometry import Geometry, infer_grid
from ..limits import DEFAULT_LIMITS, Limits
from .fills import Fill, Misfit, copy
from .options import ReaderOptions
from .stores import TensorStore
from .tensor_rules import Rule, RuleFn, first_rule

__all__ = ['SourceCheckpoint', 'PlanItem', 'Rule', 'Inventory', 'LayoutFn']

Inventory = List[Tuple[str, Tuple[int, ...], str]]
# The model's state-dict layout for a config: ``SimpleVisionTransformer.state_layout``.
LayoutFn = Callable[[SimpleViTConfig], Sequence[TensorSpec]]
_BLOCK = re.compile(r'^blocks\.(\d+)\.')


# -- the plan -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PlanItem:
    """One of our tensors: ``fill(dst, *sources)``, each source sliced at ``index`` when scanned."""
    key: str
    shape: Tuple[int, ...]
    sources: Tuple[str, ...]
    fill: Fill
    index: Optional[int] = None


class SourceCheckpoint(abc.ABC):
    """An opened source checkpoint: the config it describes, plus its tensors in our layout.

    Attributes:
        path: The file or folder that was opened.
        format: One of ``FORMATS``.
        config: The ``SimpleViTConfig`` that reproduces the source network.
        grid: Source grid (rows, cols) of a learned table, None otherwise.
        label_names: Class names when the source has them.
        source_config: The ``config.json`` found next to the weights, if any.
        assumed: Facts of ``config`` the source does not record, as {field: (value, why)}: the value was
            assumed (a standard variant's head count, an ecosystem's default, a nominal image size).
        given: Facts of ``config`` the source does not record but the caller gave as options, {field: value}.
        options: The caller's ``ReaderOptions``.
        notes: Lines worth telling the user about how the source was read (e.g. a resize rule chosen).
        weights_key: The key of a training checkpoint its weights were read from (EMA or not, chosen once by
            ``pickle_store.chosen_weights``; a verification reference reads the same one), None for a bare one.
    """

    format: str = ''
    _prefix: str = ''  # where the network's tensors sit in the store, set by ``_infer``
    # Rules asked first, in order, for each of our keys (``tensor_rules``' combinators); a key none answers is
    # looked up in ``RULES``: our key (blocks as ``blocks.{i}.``) -> source name templates and their fill. The
    # templates' fields come from ``_fields``. A key neither names is the same name under the prefix, copied.
    TENSOR_RULES: Tuple[RuleFn, ...] = ()
    RULES: Mapping[str, Rule] = {}
    PATCH_EMBED = 'conv'  # the patch embedding the reader's config uses
    SKIPPED: Tuple[str, ...] = ()  # source names read for nothing (training-only state), left out of the plan
    # Preprocessing this ecosystem uses when the source records none: {field: (value, why)}.
    PREPROCESSING_DEFAULTS: Dict[str, Tuple[Any, str]] = {}

    def __init__(
            self,
            path: str,
            store: TensorStore,
            source_config: Dict[str, Any],
            config_path: Optional[str],
            options: ReaderOptions,
            layout: Optional[LayoutFn] = None,
            limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        self.path = str(path)
        self.source_config = source_config or {}
        self.limits = limits
        self.options = options
        self.grid: Optional[Tuple[int, int]] = None
        self.label_names: Optional[List[str]] = None
        self.assumed: Dict[str, Tuple[Any, str]] = {}
        self.given: Dict[str, Any] = {}
        self.notes: List[str] = []
        self._store = store
        self.weights_key = store.wrapped_in()
        self._config_path = config_path
        self._used: Set[str] = set()
        self.config = self._inferred().check_limits(self.limits, self.path)
        self._data_config = self._recorded_preprocessing()  # checked as the source is opened, before any work
        self._plan = self._build_plan(layout) if layout is not None else None

    def _inferred(self) -> SimpleViTConfig:
        """``_infer``, with this file named in a refusal that does not name one (a config part refusing a value the
        tensors imply, say)."""
        try:
            return self._infer()
        except ViTVariantsError as e:
            if e.path is not None:
                raise
            raise type(e)(e.reason, path=self.path, key=e.key, shapes=e.shapes, needs=e.needs) from None

    # -- provided by each format ---------------------------------------------------------------------
    @abc.abstractmethod
    def _infer(self) -> SimpleViTConfig:
        """The config the source describes, from names, shapes and config files only (no tensor data)."""

    def _rule(self, pattern: str, block: Optional[int]) -> Tuple[Rule, Optional[int]]:
        """The rule for our key ``pattern`` (blocks as ``blocks.{i}.``), with full source names filled in
        for ``block``, and the index to slice scanned sources at (or None)."""
        fields = self._fields(block)
        rule = first_rule(self, self.TENSOR_RULES, pattern, fields) or self.RULES.get(pattern) or \
            Rule(('{p}' + pattern,))
        return Rule(tuple(t.format(**fields) for t in rule.sources), rule.fill), self._scan_index(block)

    def _fields(self, block: Optional[int]) -> Dict[str, Any]:
        """The template fields of ``RULES`` for ``block``: ``{p}`` the prefix, ``{i}`` the block."""
        return dict(p=self._prefix, i=block)

    def _scan_index(self, block: Optional[int]) -> Optional[int]:
        """Where ``block`` sits along a scanned source's leading axis; None when each block has its own tensors."""
        return None

    def _candidates(self) -> Set[str]:
        """Source names the plan must account for: those under the reader's prefix but ``SKIPPED`` (the rest of a
        store, e.g. another tower, is ignored)."""
        return {n for n in self._store.names() if n.startswith(self._prefix) and n not in self.SKIPPED}

    def data_config(self) -> Dict[str, Any]:
        """The preprocessing the source records for these weights, as timm ``pretrained_cfg`` fields."""
        return dict(self._data_config)

    def _recorded_preprocessing(self) -> Dict[str, Any]:
        """What ``data_config`` returns, read (and each value checked) once, when the source is opened."""
        return {}

    def preprocessing_assumed(self, recorded: Optional[Dict[str, Any]] = None) -> Dict[str, Tuple[Any, str]]:
        """The ``PREPROCESSING_KEYS`` fields the source does not record: {field: (assumed value, why)}.

        ``recorded`` is ``data_config()`` when the caller has it already.
        """
        recorded = self.data_config() if recorded is None else recorded
        return {k: v for k, v in self._preprocessing_defaults().items() if k not in recorded}

    def _preprocessing_defaults(self) -> Dict[str, Tuple[Any, str]]:
        return self.PREPROCESSING_DEFAULTS

    # -- shared ----------------------------------------------------------------------------------------
    @property
    def model_args(self) -> Dict[str, Any]:
        """``SimpleVisionTransformer`` kwargs that reproduce the source network (``config.to_flat()``, release
        0.2.0's flat names; ``config.to_dict()`` is the composed form)."""
        return self.config.to_flat()

    @property
    def geometry(self) -> Geometry:
        """The input-side layout of the source weights (grid, patch, cls slot, resample rule, channels)."""
        return Geometry.of(self.config, self.grid)

    @property
    def plan(self) -> List[PlanItem]:
        """Every one of our tensors and where it comes from (needs the layout given to ``open_checkpoint``)."""
        if self._plan is None:
            raise ViTVariantsError('the checkpoint was opened for its config only (no model layout was given), so '
                                   'it has no tensor plan; open it with layout=SimpleVisionTransformer.state_layout',
                                   path=self.path)
        return self._plan

    @property
    def tensor_shapes(self) -> Dict[str, Tuple[int, ...]]:
        """Our state-dict keys and the shapes the plan yields, known before any data is read."""
        return {item.key: item.shape for item in self.plan}

    def inventory(self) -> Inventory:
        """Raw source tensor names, shapes and dtypes, read without loading data."""
        return list(self._store.items())

    def _build_plan(self, layout: LayoutFn) -> List[PlanItem]:
        plan = []
        for key, shape, _ in layout(self.config):
            match = _BLOCK.match(key)
            block = int(match.group(1)) if match else None
            pattern = _BLOCK.sub('blocks.{i}.', key) if match else key
            rule, index = self._rule(pattern, block)
            for name in rule.sources:
                if name not in self._store:
                    raise self._error('missing key', key=name)
                if not self._store.is_float(name):
                    raise self._error(f'expected a floating-point tensor, got {self._store.dtype(name)}', key=name)
            try:
                rule.fill(torch.empty(shape, device='meta'), *(self._meta(name, index) for name in rule.sources))
            except Misfit as e:
                raise self._error(f'{e}: cannot become {key} {shape}', key=rule.sources[0], shapes=e.shapes) from None
            except (RuntimeError, IndexError) as e:  # e.g. a reshape the source's size does not allow
                raise self._error(f'cannot become {key} {shape}: {e}', key=rule.sources[0]) from None
            plan.append(PlanItem(key, tuple(shape), rule.sources, rule.fill, index))
            self._used.update(rule.sources)
        unknown = sorted(self._candidates() - self._used)
        if unknown:
            raise self._error(f'unknown key for a {self.format} ViT ({len(unknown)} unexpected)', key=unknown[0])
        return plan

    def _meta(self, name: str, index: Optional[int]) -> torch.Tensor:
        shape = self._store.shape(name)
        if index is not None and (not shape or index >= shape[0]):
            raise Misfit(f'scanned tensor {shape} has no layer {index}')
        tensor = torch.empty(shape, device='meta')
        return tensor if index is None else tensor[index]

    def walk(self) -> Iterator[Tuple[PlanItem, Tuple[str, ...]]]:
        """(plan item, source names the next item needs) in plan order, for ``fill(item, dst, keep)``."""
        plan = self.plan
        self._store.read_ahead([name for item in plan for name in item.sources])
        for i, item in enumerate(plan):
            yield item, plan[i + 1].sources if i + 1 < len(plan) else ()

    def fill(self, item: PlanItem, dst: torch.Tensor, keep: Sequence[str] = ()) -> torch.Tensor:
        """Write ``item`` into ``dst`` (any float dtype and device) with one copy; returns ``dst``.

        The source pages are handed back afterwards, except those of the names in ``keep``.
        """
        parts = [self._store.tensor(n) for n in item.sources]
        if item.index is not None:
            parts = [p[item.index] for p in parts]
        try:
            with torch.no_grad():
                item.fill(dst, *parts)
        except Misfit as e:  # only a store whose data contradicts its own header gets here
            raise self._error(f'tensor data does not match its header: {e}', key=item.sources[0]) from None
        del parts
        self.release(item, keep)
        return dst

    def direct(self, item: PlanItem) -> Optional[torch.Tensor]:
        """The stored tensor itself when ``item`` is a plain copy of one source of the same shape.

        It is a view of the mapped file where the store allows, so it can be written out without any
        copy of ours; call ``release(item, keep)`` when done with it. None when the item needs a fill.
        """
        if item.fill is not copy or len(item.sources) != 1:
            return None
        tensor = self._store.tensor(item.sources[0])
        if item.index is not None:
            tensor = tensor[item.index]
        return tensor if tuple(tensor.shape) == item.shape else None

    def stored_extremes(self, name: str) -> Tuple[float, float]:
        """The least and greatest value of the stored tensor ``name`` (a raw source name), read in place with no
        tensor-sized temporary and its pages handed back: a pre-pass over the values costs about no memory."""
        tensor = self._store.tensor(name)
        try:
            if not tensor.is_floating_point() or not tensor.numel():
                return 0.0, 0.0
            low, high = tensor.aminmax()
            return float(low), float(high)
        finally:
            del tensor
            self._store.release(name)

    def release(self, item: PlanItem, keep: Sequence[str] = ()) -> None:
        """Hand the pages behind ``item``'s sources back to the OS, except those of the names in ``keep``."""
        for name in item.sources:
            if name not in keep:
                self._store.release(name)

    def iter_tensors(self) -> Iterator[Tuple[str, torch.Tensor]]:
        """Yield (our key, new float32 tensor), one plan item at a time."""
        for item, keep in self.walk():
            yield item.key, self.fill(item, torch.empty(item.shape, dtype=torch.float32), keep)

    def fill_into(self, targets: Dict[str, torch.Tensor], keys: Optional[Sequence[str]] = None) -> None:
        """Fill ``targets[key]`` (e.g. a model's state dict) in place for every planned key (or ``keys``)."""
        wanted = None if keys is None else set(keys)
        for item, keep in self.walk():
            if wanted is None or item.key in wanted:
                self.fill(item, targets[item.key], keep)

    def state_dict(self) -> Dict[str, torch.Tensor]:
        """All converted tensors at once (small checkpoints and tests; prefer ``iter_tensors``)."""
        return dict(self.iter_tensors())

    def close(self) -> None:
        """Release open files and mappings."""
        self._store.close()

    def __enter__(self) -> 'SourceCheckpoint':
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f'{type(self).__name__}({self.path!r}, format={self.format!r}, config={self.config})'

    # -- helpers for readers ------------------------------------------------------------------------------
    def _error(self, reason: str, key: Optional[str] = None, shapes: Optional[Sequence] = None,
               needs: Optional[str] = None) -> ViTVariantsError:
        path = self._store.file_of(key) if key is not None and key in self._store else self.path
        return ViTVariantsError(reason, path=path, key=key, shapes=shapes, needs=needs)

    def _unrecorded(self, field: str, given: Any, default: Any, why: str) -> Any:
        """A fact the source does not record: ``given`` by the caller (an option, None when not given), else
        ``default`` (``assumed``)."""
        if given is not None:
            self.given[field] = given
            return given
        self.assumed[field] = (default, why)
        return default

    def _check_dims(self, key: Optional[str] = None, **dims: Optional[int]) -> None:
        """Refuse claimed dimensions above ``self.limits`` before anything is planned or read."""
        self.limits.check_dims(path=self.path, key=key, **dims)

    def _shape(self, name: str) -> Tuple[int, ...]:
        if name not in self._store:
            raise self._error('missing key', key=name)
        return self._store.shape(name)

    def _check_token_table(self, key: str, width: int, patch: Tuple[int, int], *, class_token: bool,
                           slot: Optional[bool], img_size: Any, dist_token: bool = False, registers: int = 0,
                           reg_slots: Optional[bool] = None) -> int:
        """Check a learned table laid out as a row of tokens, (1, tokens, width), within the limits; sets
        ``self.grid`` (split by ``infer_grid``), returns its prefix slots ([CLS], DeiT's distillation token, and
        the ``registers`` where the table has rows for them)."""
        shape = self._shape(key)
        if len(shape) != 3 or shape[0] != 1 or shape[2] != width:
            raise self._error('position table must be (1, tokens, width)', key=key, shapes=(shape, (1, -1, width)))
        self._check_dims(key, tokens=shape[1])
        self.grid, prefix = infer_grid(shape[1], patch, img_size=img_size, class_token=class_token, slot=slot,
                                       path=self.path, key=key, dist_token=dist_token, registers=registers,
                                       reg_slots=reg_slots)
        return prefix

    def _conv_patch_kernel(self, key: str = 'patch_embed.proj.weight') -> Tuple[int, int, int, int]:
        """The patch conv kernel ``key`` as (width, in_chans, patch_h, patch_w), a 4-D shape within the limits."""
        kernel = self._shape(key)
        if len(kernel) != 4:
            raise self._error('patch embedding must be a (D, C, P, P) convolution', key=key, shapes=(kernel,))
        dim, in_chans, patch_h, patch_w = kernel
        self._check_dims(key, width=dim, img_size=max(patch_h, patch_w))
        return dim, in_chans, patch_h, patch_w

    def _token_count(self, key: str, width: int, what: str = 'register tokens') -> int:
        """The count of stored prefix tokens ``key`` (1, count, width), within the limits; 0 when not stored."""
        if key not in self._store:
            return 0
        shape = self._shape(key)
        if len(shape) != 3 or shape[0] != 1 or shape[2] != width:
            raise self._error(f'{what} must be (1, count, width)', key=key, shapes=(shape, (1, 'count', width)))
        self._check_dims(key, tokens=shape[1])
        return shape[1]

    def _depth(self, names: Iterable[str], pattern: Pattern = _BLOCK,
               key_of: Callable[[int], str] = lambda i: f'blocks.{i}',
               first: str = 'blocks.0.attn.qkv.weight') -> int:
        """The depth of the blocks ``pattern`` numbers (its group 1) among ``names``, by ``_block_count``; refuses
        none at all, naming ``first``."""
        depth = self._block_count([int(m.group(1)) for m in map(pattern.match, names) if m], key_of)
        if not depth:
            raise self._error('no transformer blocks found', key=first)
        return depth

    def _head_count(self, dim: int, assumed: Sequence[Tuple[Optional[int], str]],
                    refusal: str, key: str = 'blocks.0.attn.qkv.weight') -> int:
        """A head count the source does not record: the caller's ``num_heads``, else the first known count of
        ``assumed`` ((count or None, why), in order), else 64-wide heads where ``assume_heads`` asks for them, else
        refused with ``refusal``; it must divide ``dim``."""
        if self.options.num_heads:
            heads = self._unrecorded('num_heads', self.options.num_heads, None, '')
        else:
            asked = (dim // 64 if self.options.assume_heads and dim % 64 == 0 else None,
                     '64-wide heads (asked for with assume_heads)')
            known = [(count, why) for count, why in (*assumed, asked) if count is not None]
            if not known:
                raise self._error(refusal, key=key, needs='num_heads')
            heads = self._unrecorded('num_heads', None, *known[0])
        if dim % int(heads):
            raise self._error(f'width {dim} is not divisible by {heads} heads', key=key)
        return int(heads)

    def _block_count(self, indices: Sequence[int], key_of: Callable[[int], str]) -> int:
        """The depth of numbered blocks ``indices`` (``key_of(i)`` names block i), within the limits and without gaps."""
        indices = sorted(set(indices))
        if indices:
            self._check_dims(key_of(indices[-1]), depth=indices[-1] + 1)
        if indices != list(range(len(indices))):
            missing = sorted(set(range(indices[-1] + 1)) - set(indices))
            raise self._error(f'inconsistent depth: blocks {indices} present, {missing} missing', key=key_of(missing[0]))
        return len(indices)
