"""The values a verification passes along: what is checked (``Check``), what each side produced (``Outputs``) and
what the comparison found (``Verification``, in the shape the terminal line, the model card and ``config.json``
record)."""
from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Optional

import torch

from timm_vit_variants.config import SimpleViTConfig
from timm_vit_variants.limits import DEFAULT_LIMITS, Limits

from ..constants import DEFAULT_TOL

__all__ = ['DEFAULT_TOL', 'Check', 'Verification', 'Outputs', 'NoReference', 'ReferenceFailed']


@dataclass(frozen=True)
class Check:
    """One comparison's question: the source (its file, format and config) against ours, at the source geometry or,
    with ``target``, at the target one, its learned table resized by ``rule``; ``compare_logits=False`` leaves the
    logits out (a new, zero head); ``tag`` is the registered tag the source was fetched as, if it was. Every reference
    takes this one value (``references.REFERENCES``); ``limits`` are the ones the source was opened under;
    ``weights_key`` is the entry of a training checkpoint the converter read (``SourceCheckpoint.weights_key``: EMA
    or not), which a reference reads too, so both sides run the same weights."""
    path: str
    format: str
    source: SimpleViTConfig
    target: Optional[SimpleViTConfig] = None
    rule: Optional[str] = None
    compare_logits: bool = True
    tag: Optional[str] = None  # the registered tag the source was fetched as (a CLIP tag names its open_clip model)
    limits: Limits = DEFAULT_LIMITS  # what the source was opened under (--limit): a reference rebuilding it keeps them
    weights_key: Optional[str] = None  # the training checkpoint's entry the weights were read from (None: bare)

    @property
    def runs_at(self) -> SimpleViTConfig:
        """The geometry both networks run at: the target's, else the source's."""
        return self.source if self.target is None else self.target

    def require_own_resize(self, framework: str, own_rule: Optional[str], owner: Optional[str] = None) -> None:
        """At a target geometry, refuse what ``framework``'s own code cannot stand for (``NoReference``): a patch-size
        change, or a table resized by another rule than ``own_rule`` (None: no table, so nothing was resized);
        ``owner`` is the possessive the refusal names (default ``"<framework>'s"``)."""
        if self.target is None:
            return
        if self.target.patch_size != self.source.patch_size:
            raise NoReference(f'{framework} has no rule for a patch-size change')
        if own_rule is not None and self.rule != own_rule:
            owner = owner or f"{framework}'s"
            raise NoReference(f'the table was resized with the {self.rule!r} rule, not {owner} own')


@dataclass
class Verification:
    """Outcome of one check: 'passed', 'failed' or 'skipped', with the figures and the reasons."""
    status: str
    reference: Optional[str] = None
    max_abs_logits: Optional[float] = None
    max_abs_features: Optional[float] = None
    tolerance: Optional[float] = None
    reason: Optional[str] = None
    notes: List[str] = field(default_factory=list)
    caveats: List[str] = field(default_factory=list)  # what the check could not catch (a shared assumption)
    output: str = 'logits'  # what max_abs_logits measures: 'logits', or 'embedding' for a model without a head
    deltas: Dict[str, float] = field(default_factory=dict)  # every max |delta| measured, by output name

    def as_card_dict(self) -> Dict[str, Any]:
        reason = '; '.join([r for r in [self.reason, *self.notes] if r]) or None
        return dict(status=self.status, reference=self.reference, max_abs_logits=self.max_abs_logits,
                    max_abs_features=self.max_abs_features, tolerance=self.tolerance, reason=reason,
                    caveats=list(self.caveats) or None, output=self.output, deltas=dict(self.deltas) or None)

    def summary(self) -> str:
        """One line for the terminal."""
        if self.status == 'skipped' or self.reference is None:
            return f'verification {self.status}: {self.reason}' + ''.join(f'; {n}' for n in self.notes)
        figures = []
        if self.max_abs_logits is not None:
            figures.append(f'max|d{self.output}|={self.max_abs_logits:.2e}')
        if self.max_abs_features is not None:
            figures.append(f'max|dfeatures|={self.max_abs_features:.2e}')
        tol = f' (tol {self.tolerance:g})' if self.tolerance is not None else ''
        but = f', but {"; ".join(self.caveats)},' if self.caveats and self.status == 'passed' else ''
        text = f'verification {self.status}{but} vs {self.reference}: ' + ', '.join(figures) + tol
        if self.reason:
            text += f'; {self.reason}'
        return text + ''.join(f'; {n}' for n in self.notes)


@dataclass
class Outputs:
    """What a network produced on the verification inputs."""
    features: Optional[torch.Tensor]  # final-norm tokens (B, T, D)
    logits: Optional[torch.Tensor]  # the classifier's logits, or without one the pooled embedding
    name: str
    note: Optional[str] = None
    pre_logits: Optional[torch.Tensor] = None  # a pooled pre-logits output (transformers ViTModel's pooler)
    # On the mixed-size NaFlex batch, where the reference takes one: valid patch tokens (T, D), pooled (B, D).
    mixed_features: Optional[torch.Tensor] = None
    mixed_pooled: Optional[torch.Tensor] = None

    def named(self) -> Dict[str, torch.Tensor]:
        """Every output this side produced, by name."""
        return {f.name: getattr(self, f.name) for f in fields(self) if isinstance(getattr(self, f.name), torch.Tensor)}


class NoReference(Exception):
    """No reference implementation can run this check; the message says why."""


class ReferenceFailed(Exception):
    """The reference implementation refused or could not run the source: the check fails, naming why."""
