"""Keep Hub tokens out of anything we print, log, raise or write (cards, commands, error messages)."""
import re
from typing import Iterable, Optional

# User access tokens issued by the Hub start with ``hf_``; old ``api_`` org tokens are matched too.
_TOKEN_RE = re.compile(r'\b(?:hf|api)_[A-Za-z0-9]{8,}\b')
# ``--token VALUE`` / ``--token=VALUE`` on a command line, whatever the value looks like.
_TOKEN_FLAG_RE = re.compile(r'(--token)(=|\s+)(\'[^\']*\'|"[^"]*"|\S+)')
# ``Authorization: Bearer VALUE`` as it can appear in a repr of request headers.
_BEARER_RE = re.compile(r'(Bearer\s+)[^\s\'",}]+', re.IGNORECASE)

REDACTED = '***'


def redact(text: str, tokens: Iterable[Optional[str]] = ()) -> str:
    """Return ``text`` with every given token, any ``hf_...`` token and any bearer value masked."""
    for token in tokens:
        if token:
            text = text.replace(token, REDACTED)
    text = _TOKEN_FLAG_RE.sub(lambda m: f'{m.group(1)}{m.group(2)}{REDACTED}', text)
    text = _BEARER_RE.sub(lambda m: m.group(1) + REDACTED, text)
    return _TOKEN_RE.sub(REDACTED, text)
