"""The single exception type the package raises for bad input."""
from typing import Optional, Sequence


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
