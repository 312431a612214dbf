"""The tensor rules several source families share, and the small combinators readers build their tables from.

A reader's ``TENSOR_RULES`` is a tuple of ``RuleFn``: each is asked, in order, for the rule of one of our keys
(``pattern``, blocks as ``blocks.{i}.``) and answers a ``Rule`` of source name templates (filled in by the
reader's ``_fields``: ``{p}`` its prefix, ``{i}`` the block) or None (not its key). A key none answers falls to the
reader's ``RULES`` table, then to the same name under the prefix. The rules here are what no one family owns: renamed
keys, LayerScale's ``gamma_1``/``gamma_2`` names, a fused qkv bias from q and v biases alone (the k bias fixed at zero),
CLIP's (width,) [CLS] embedding, DINOv3's periods computed as its ports compute them, and the preprocessing a timm
``config.json`` or training checkpoint records.
"""
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, Mapping, Optional, Sequence, Tuple, Union

import torch

from ..config import DATA_CONFIG_KEYS, PREPROCESSING_KEYS
from ..errors import ViTVariantsError
from ..rope import dinov3_periods as rope_periods
from .fills import Fill, Misfit, _put, _rank, copy
from .preprocessing import checked_preprocessing

if TYPE_CHECKING:  # only for annotations: source.py imports this module
    from .source import SourceCheckpoint

__all__ = ['Rule', 'RuleFn', 'LAYER_SCALE', 'renamed', 'renamed_keys', 'named', 'for_key', 'qv_bias', 'q_none_v_bias',
           'as_token', 'dinov3_periods', 'timm_recorded_preprocessing', 'first_rule']


@dataclass(frozen=True)
class Rule:
    """Where one of our tensors comes from: source name templates and the fill that lays them out."""
    sources: Tuple[str, ...]
    fill: Fill = copy


# (reader, our key pattern, the reader's template fields for the block) -> a rule of source templates, or None.
RuleFn = Callable[['SourceCheckpoint', str, Dict[str, Any]], Optional[Rule]]
Condition = Callable[['SourceCheckpoint'], bool]
# Our LayerScale names -> those of DeiT-III's ``Layer_scale_init_Block``, BEiT and timm's Eva (``gamma_1``/``gamma_2``).
LAYER_SCALE = {'ls1.gamma': 'gamma_1', 'ls2.gamma': 'gamma_2'}


def renamed(key: str, names: Mapping[str, str]) -> str:
    """``key`` with each part ``names`` maps (ours -> theirs) replaced, in the mapping's order."""
    for ours, theirs in names.items():
        key = key.replace(ours, theirs)
    return key


def renamed_keys(names: Mapping[str, str], when: Optional[Condition] = None) -> RuleFn:
    """Our key with the parts ``names`` maps (ours -> theirs) replaced, under the prefix, for the keys one of them
    is part of, where ``when`` holds."""
    def rule(reader: 'SourceCheckpoint', pattern: str, fields: Dict[str, Any]) -> Optional[Rule]:
        if not any(ours in pattern for ours in names) or (when is not None and not when(reader)):
            return None
        return Rule(('{p}' + renamed(pattern, names),))
    return rule


def named(table: Mapping[str, Union[str, Tuple[str, ...]]], fill: Fill = copy,
          when: Optional[Condition] = None) -> RuleFn:
    """Our keys -> source name templates (one, or several for ``fill``), where ``when`` holds."""
    def rule(reader: 'SourceCheckpoint', pattern: str, fields: Dict[str, Any]) -> Optional[Rule]:
        if pattern not in table or (when is not None and not when(reader)):
            return None
        sources = table[pattern]
        return Rule((sources,) if isinstance(sources, str) else tuple(sources), fill)
    return rule


def for_key(pattern: str, make: Callable[['SourceCheckpoint'], Rule]) -> RuleFn:
    """Our key ``pattern``'s rule, made from what the reader has read (e.g. a count of tables, a computed fill)."""
    def rule(reader: 'SourceCheckpoint', key: str, fields: Dict[str, Any]) -> Optional[Rule]:
        return make(reader) if key == pattern else None
    return rule


def qv_bias(q: str, v: str, unless: Optional[str] = None) -> RuleFn:
    """Our fused ``qkv.bias`` from separate q and v bias templates (the k third zero), unless the source stores the
    tensor ``unless`` names (its own fused or k bias)."""
    def rule(reader: 'SourceCheckpoint', pattern: str, fields: Dict[str, Any]) -> Optional[Rule]:
        if pattern != 'blocks.{i}.attn.qkv.bias' or (unless is not None and unless.format(**fields) in reader._store):
            return None
        return Rule((q, v), q_none_v_bias)
    return rule


def q_none_v_bias(dst: torch.Tensor, q: torch.Tensor, v: torch.Tensor) -> None:
    """A fused qkv bias from q and v biases, the k third zero (transformers' ``key_bias=False``, BEiT's and EVA's
    ``q_bias``/``v_bias``)."""
    rows = dst.shape[0] // 3
    if tuple(q.shape) != (rows,) or tuple(v.shape) != (rows,):
        raise Misfit('shape does not fit', q.shape if tuple(q.shape) != (rows,) else v.shape, (rows,))
    dst[:rows].copy_(q)
    dst[rows:2 * rows].zero_()
    dst[2 * rows:].copy_(v)


def as_token(dst: Any, src: Any) -> None:
    """CLIP's (width,) ``class_embedding`` as our (1, 1, width) ``cls_token``."""
    _put(dst, _rank(src, 1).reshape(1, 1, -1))


def dinov3_periods(theta: float) -> Fill:
    """A fill computing DINOv3's periods ``theta ** (2k / (hd / 2))`` in fp32, as transformers and timm compute
    their frequencies (neither stores them)."""
    def fill(dst: torch.Tensor) -> None:
        dst.copy_(rope_periods(dst.shape[0], theta, torch.float32, dst.device))

    fill.__name__ = fill.__qualname__ = f'dinov3_periods_theta_{theta:g}'
    return fill


def timm_recorded_preprocessing(reader: 'SourceCheckpoint') -> Dict[str, Any]:
    """A timm source's recorded preprocessing: ``config.json``'s ``pretrained_cfg``, else what a timm training
    checkpoint's args record; each value checked."""
    if reader.source_config.get('pretrained_cfg'):
        timm_cfg, path, section = reader.source_config['pretrained_cfg'], reader._config_path, 'pretrained_cfg'
    else:
        timm_cfg, path, section = reader._store.training_args(), reader.path, 'args'
    if not isinstance(timm_cfg, dict):
        raise ViTVariantsError('expected a JSON object', path=path, key=section)
    recorded = checked_preprocessing({k: timm_cfg.get(k) for k in PREPROCESSING_KEYS}, reader.config.in_chans, path,
                                     {k: f'{section}.{k}' for k in PREPROCESSING_KEYS})
    extra = {k: timm_cfg[k] for k in DATA_CONFIG_KEYS if k not in PREPROCESSING_KEYS and timm_cfg.get(k) is not None}
    return {**recorded, **extra}


def first_rule(reader: 'SourceCheckpoint', rules: Sequence[RuleFn], pattern: str,
               fields: Dict[str, Any]) -> Optional[Rule]:
    """The first of ``rules`` that answers for ``pattern``, None when none does."""
    for rule_fn in rules:
        rule = rule_fn(reader, pattern, fields)
        if rule is not None:
            return rule
    return None
