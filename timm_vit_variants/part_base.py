"""The base of every ``SimpleViTConfig`` part (``parts.py``): a frozen dataclass that validates itself, naming the
release-0.2.0 flat key in its refusal, and round-trips through plain JSON; and the prefix tokens, which the position
schemes read."""
from dataclasses import dataclass, fields
from typing import Any, Callable, ClassVar, Dict, Mapping, Tuple, Type, TypeVar

from .choices import _is_int
from .errors import ViTVariantsError

__all__ = ['Part', 'TokensPart']

P = TypeVar('P', bound='Part')


class Part:
    """A frozen dataclass part: ``FLAT`` maps each field to its release-0.2.0 flat name (the error key);
    ``WRITTEN_IF_SET`` names the fields newer than the composed form, written only when they differ from their
    default, so a config without them is written as before they existed."""
    FLAT: ClassVar[Mapping[str, str]] = {}
    NAME: ClassVar[str] = 'part'
    WRITTEN_IF_SET: ClassVar[Tuple[str, ...]] = ()

    def _bad(self, name: str, why: str) -> ViTVariantsError:
        key = self.FLAT.get(name, name)
        return ViTVariantsError(f'{key}={getattr(self, name)!r}: {why}', key=key)

    def _check(self, name: str, test: Callable[[Any], bool], why: str) -> None:
        if not test(getattr(self, name)):
            raise self._bad(name, why)

    def _bools(self, *names: str) -> None:
        for name in names:
            self._check(name, lambda v: isinstance(v, bool), 'expected True or False')

    def _choice(self, name: str, allowed: Tuple[Any, ...]) -> None:
        self._check(name, lambda v: v in allowed, f'expected one of {allowed}')

    def to_dict(self) -> Dict[str, Any]:
        """Plain JSON: every field (a pair as a list), those of ``WRITTEN_IF_SET`` only when not their default."""
        values = {f.name: getattr(self, f.name) for f in fields(self)
                  if f.name not in self.WRITTEN_IF_SET or getattr(self, f.name) != f.default}
        return {name: list(v) if isinstance(v, tuple) else v for name, v in values.items()}

    @classmethod
    def _checked_keys(cls, data: Any, extra: Tuple[str, ...] = ()) -> Dict[str, Any]:
        if not isinstance(data, Mapping):
            raise ViTVariantsError(f'expected a JSON object for {cls.NAME}, got {data!r}', key=cls.NAME)
        known = {f.name for f in fields(cls)} | set(extra)
        unknown = sorted(set(data) - known)
        if unknown:
            raise ViTVariantsError(f'unknown {cls.NAME} option(s) {unknown}; expected some of {sorted(known)}',
                                   key=f'{cls.NAME}.{unknown[0]}')
        return {k: v for k, v in data.items() if k not in extra}

    @classmethod
    def from_dict(cls: Type[P], data: Mapping[str, Any]) -> P:
        """The part from ``to_dict`` output; unknown keys are refused."""
        return cls(**cls._checked_keys(data))


@dataclass(frozen=True)
class TokensPart(Part):
    """The prefix tokens: a learned [CLS] token, DeiT's distillation token right after it (its own table slot and
    classifier ``head_dist``), ``registers`` register tokens (Darcet et al. 2024, no position information), and
    ``pre_norm``: a norm (``norm_pre``) after positions and prefix tokens are added (CLIP's ``ln_pre``)."""
    cls: bool = False
    dist: bool = False
    registers: int = 0
    pre_norm: bool = False
    FLAT: ClassVar[Mapping[str, str]] = {'cls': 'class_token', 'dist': 'dist_token', 'registers': 'reg_tokens',
                                         'pre_norm': 'pre_norm'}
    NAME: ClassVar[str] = 'tokens'

    def __post_init__(self) -> None:
        self._bools('cls', 'dist', 'pre_norm')
        self._check('registers', lambda v: _is_int(v) and v >= 0, 'expected an integer >= 0')

    @property
    def count(self) -> int:
        """Tokens before the patch tokens: [CLS], the distillation token, then the registers."""
        return int(self.cls) + int(self.dist) + self.registers
