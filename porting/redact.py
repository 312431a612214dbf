"""Keep Hub tokens out of everything we print, log, raise or write (cards, config.json, errors).

Redaction is by value: every token this process holds (a ``--token`` flag, ``HF_TOKEN``, the
login cache) is masked wherever it appears, however it got there. Token-shaped strings
(``hf_...``) and bearer headers are masked too, as a second line of defence. A URL's credentials
(``https://USER:PASSWORD@HOST/...``) are masked by their place, as pip masks them: the password, or a lone user
name (often a token); ``without_credentials`` drops them from a URL a card or ``config.json`` records.
"""
import os
import re
from typing import Iterable, List, Optional, Set

__all__ = ['REDACTED', 'register_token', 'known_tokens', 'redact', 'tokens_in_argv', 'holds_token',
           'without_credentials']

# User access tokens issued by the Hub start with ``hf_``; old ``api_`` org tokens are matched too.
_TOKEN_PATTERN = r'\b(?:hf|api)_[A-Za-z0-9]{8,}\b'
_TOKEN_RE = re.compile(_TOKEN_PATTERN)
_TOKEN_BYTES_RE = re.compile(_TOKEN_PATTERN.encode())
_TOKEN_PREFIXES = (b'hf_', b'api_')
# ``--token VALUE`` / ``--token=VALUE`` on a command line, whatever the value looks like.
_TOKEN_FLAG_RE = re.compile(r'(--token)(=|\s+)(\'[^\']*\'|"[^"]*"|\S+)')
# ``Authorization: Bearer VALUE`` as it can appear in a repr of request headers.
_BEARER_RE = re.compile(r'(Bearer\s+)[^\s\'",}]+', re.IGNORECASE)
# A URL's user info: everything of the authority before its last ``@`` (as ``urllib.parse.urlsplit`` splits it).
_URL_AUTH_RE = re.compile(r'\b([A-Za-z][A-Za-z0-9+.-]*://)([^/?#\s@]*(?:@[^/?#\s@]*)*)@')
_ENV_VARS = ('HF_TOKEN', 'HUGGING_FACE_HUB_TOKEN')
# Shorter values are not masked by value: replacing every 'abc' in a text would mangle it, not protect it.
_MIN_LEN = 6

REDACTED = 'REDACTED'  # plain word: safe inside YAML front matter, JSON and Markdown
_registered: Set[str] = set()


def register_token(value: Optional[str]) -> None:
    """Remember a token value (e.g. from ``--token``) so every later ``redact`` masks it."""
    if value:
        _registered.add(value)


def tokens_in_argv(argv: Iterable[str]) -> List[str]:
    """Values given to ``--token`` in a raw argument list, before it is parsed."""
    argv = list(argv)
    found = []
    for i, arg in enumerate(argv):
        if arg == '--token' and i + 1 < len(argv):
            found.append(argv[i + 1])
        elif arg.startswith('--token='):
            found.append(arg[len('--token='):])
    return found


def known_tokens() -> List[str]:
    """Every token value this process can see, longest first."""
    tokens = set(_registered)
    tokens.update(os.environ.get(name) or '' for name in _ENV_VARS)
    try:
        from huggingface_hub import get_token

        tokens.add(get_token() or '')
    except Exception:  # noqa: BLE001  (an unreadable login cache holds nothing to hide)
        pass
    return sorted((t for t in tokens if len(t) >= _MIN_LEN), key=len, reverse=True)


def redact(text: str, tokens: Iterable[Optional[str]] = ()) -> str:
    """``text`` with the given tokens, every known token, any ``hf_...`` token and any bearer value masked."""
    for token in sorted({t for t in tokens if t} | set(known_tokens()), key=len, reverse=True):
        text = text.replace(token, REDACTED)
    text = _TOKEN_FLAG_RE.sub(lambda m: f'{m.group(1)}{m.group(2)}{REDACTED}', text)
    text = _BEARER_RE.sub(lambda m: m.group(1) + REDACTED, text)
    text = _URL_AUTH_RE.sub(_masked_auth, text)
    return _TOKEN_RE.sub(REDACTED, text)


def _masked_auth(match: 're.Match[str]') -> str:
    """``USER:REDACTED@`` for a user and password, ``REDACTED@`` for a lone user name (it may be a token)."""
    user, colon, _ = match.group(2).partition(':')
    return f'{match.group(1)}{user}:{REDACTED}@' if colon else f'{match.group(1)}{REDACTED}@'


def without_credentials(url: str) -> str:
    """``url`` with any ``USER[:PASSWORD]@`` dropped from its authority (text that is no URL as it is)."""
    return _URL_AUTH_RE.sub(lambda m: m.group(1), url, count=1) if '://' in url else url


def holds_token(data: bytes, tokens: Iterable[str] = ()) -> bool:
    """Whether ``data`` holds a token-shaped string (``hf_...``) or one of ``tokens``.

    Scans by the literal prefixes first, so a weight file of gigabytes costs about one ``bytes.find`` pass.
    """
    for prefix in _TOKEN_PREFIXES:
        at = data.find(prefix)
        while at != -1:
            if _TOKEN_BYTES_RE.match(data, at):
                return True
            at = data.find(prefix, at + 1)
    return any(token.encode() in data for token in tokens if token)
