"""The exception type the package raises for bad input, and the two helpers every module words failures with.

``first_line`` cuts a library's long message to the line that says what happened; ``reraised_as`` turns
whatever a library raises inside it into the one error a caller is promised (a ``ViTVariantsError``
raised inside passes as it is). Both serve ``porting`` as well: data flows ``porting`` -> here, never back.
"""
import contextlib
from typing import Callable, Iterator, Optional, Sequence, Tuple, Type

__all__ = ['ViTVariantsError', 'UnknownOptionError', 'first_line', 'reraised_as']


class ViTVariantsError(ValueError):
    """Bad checkpoint, bad shape, bad image size or bad output location.

    Subclasses ValueError so generic callers can catch it; the message names the
    file, key and reason whenever they are known. ``needs`` names the option that would resolve
    it (``'source_img_size'``, ``'num_heads'``, ``'prefix'``, ``'limit:depth=300'``, ...): the message
    says what is missing in words, and each front end adds how to give it (the CLI, its flag).
    """

    def __init__(
            self,
            reason: str,
            *,
            path: Optional[str] = None,
            key: Optional[str] = None,
            shapes: Optional[Sequence] = None,
            needs: Optional[str] = None,
    ) -> None:
        self.reason = reason
        self.path = str(path) if path is not None else None
        self.key = key
        self.shapes = shapes
        self.needs = needs
        parts = []
        if self.path:
            parts.append(f'file {self.path!r}')
        if key:
            parts.append(f'key {key!r}')
        if shapes is not None:
            parts.append('shapes ' + ' vs '.join(str(tuple(s)) for s in shapes))
        where = (', '.join(parts) + ': ') if parts else ''
        super().__init__(where + reason)


class UnknownOptionError(ViTVariantsError, TypeError):
    """A keyword no option is spelled as: a ``ViTVariantsError``, and a ``TypeError`` as Python's own unexpected
    keyword is, so callers catching either keep working."""


def first_line(error: BaseException, typed: bool = True) -> str:
    """One line for any failure, however long the library's message: ``Type: first line`` (``typed``), or the
    first line alone, without its closing period; the type's name when the message is empty."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not typed:
        return lines[0].rstrip('.') if lines else type(error).__name__
    return f'{type(error).__name__}: {lines[0] if lines else ""}'.rstrip(': ')


@contextlib.contextmanager
def reraised_as(convert: Callable[[Exception], BaseException],
                keep: Tuple[Type[BaseException], ...] = ()) -> Iterator[None]:
    """Inside, a ``ViTVariantsError`` (or one of ``keep``) propagates as it is, and any other exception ``e`` is
    replaced by ``convert(e)``, raised without the library's traceback as its context."""
    try:
        yield
    except (ViTVariantsError, *keep):
        raise
    except Exception as e:  # noqa: BLE001  (libraries raise many types; each becomes the one a caller expects)
        raise convert(e) from None
