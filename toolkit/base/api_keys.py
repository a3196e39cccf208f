"""Secrets: the API key comes from the environment only, is checked before use, and is redacted from output.

What counts as a secret in text: the value of a secret flag (`--api-key`, `--hf-token`, spelled any way vLLM's
argument parser accepts), of a `NAME=value` word or a JSON `"NAME": "value"` pair whose name looks secret (one
pattern, also used to refuse such names in a server's environment), of a container's `-e=NAME=value`, of a
Bearer or Basic credential, of a URL query parameter such as `token=`, the user info of a URL, and every key this
process has read, in each form an error can carry it (raw, repr()/bytes-escaped, JSON-escaped, URL-encoded,
percent-encoded byte by byte, base64 at any alignment; with NULs between its characters, as UTF-16 and UTF-32
echo it, once those are gone).

Everything that leaves the process goes through :func:`scrub`: control characters out (a key interleaved with
NULs or other controls is whole again), then redacted, then cut.
"""

from __future__ import annotations

import base64
import functools
import html
import json
import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

from toolkit.base.errors import SecretError
from toolkit.base.text import map_strings, printable

REDACTED = "<redacted>"
DEFAULT_KEY_ENV = "VLLM_API_KEY"  # the variable that holds the key unless api_key_env names another
MIN_KEY_LENGTH = 8  # a shorter key is refused: redacting "1234" would mangle "port 12345" and show the key
SECRET_FLAGS = ("--api-key", "--hf-token")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
KEY_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,127}")  # api_key_env: a variable's name, never a key
# The secret word ends the name or one of its _-separated parts: HF_TOKEN, AWS_SECRET_ACCESS_KEY, DB_PASSWD,
# not TOKENIZERS_PARALLELISM nor MAX_TOKENS_PER_STEP (TOKENS is a count far more often than a secret).
_SECRET_PART = re.compile(r"(?:KEY|SECRET|CREDENTIAL)S?$|TOKEN$|PASS(?:WORD|WD)?$|PWD$|AUTH$")
# One shell word: quoted pieces (an unclosed quote runs to the end) and unquoted ones, up to a `;`, `&` or `|`.
_WORD = r"""(?:'[^']*(?:'|\Z)|"(?:[^"\\]|\\.)*(?:"|\Z)|[^\s'";&|]+)+"""
_ASSIGNMENT = re.compile(rf"""(?<![^\s;&|(`'"])([A-Za-z_][A-Za-z0-9_]*=)({_WORD})""")
# A long option and its value: `--flag=VALUE`, or `--flag VALUE [VALUE ...]` (vLLM's --api-key takes several).
_OPTION = re.compile(rf"(?<!\S)(--[A-Za-z][\w-]*)(?:(=)({_WORD})|((?:\s+(?!-){_WORD})+))")
# URL user info, up to the last @ (a password may hold one); a scheme starts a word, so a long run of letters
# is not rescanned from each of its positions.
_USERINFO = re.compile(r"(?<![A-Za-z0-9+.-])([A-Za-z][A-Za-z0-9+.-]*://)[^\s/?#'\"]+@")
# A container's environment option in one word: `--env=NAME=value`, `-eNAME=value`, `-e=NAME=value` (docker, podman).
_ENV_OPTION = re.compile(r"^(?:--env=|-e=?)(?=[A-Za-z_][A-Za-z0-9_]*=)")
_ENV_OPTION_WORD = re.compile(rf"(?<!\S)(--env=|-e=?)([A-Za-z_][A-Za-z0-9_]*=)({_WORD})")
# A JSON or Python mapping's pair whose name looks secret: `"HF_TOKEN": "value"`, `'password': 'value'`.
_PAIR = re.compile(r"""(["'])([A-Za-z_][A-Za-z0-9_.-]*)\1(\s*:\s*)(["'])((?:(?!\4)[^\\]|\\.)*)\4""")
# An HTTP credential: `Authorization: Bearer <token>`, `Basic <base64>`, in a header, a curl -H or an error.
_CREDENTIAL = re.compile(r"\b(Bearer|Basic)(\s+)(?!<redacted>)[A-Za-z0-9._~+/=-]{8,}", re.IGNORECASE)
# What splits a key for the eye but not for a scan: control characters (C0 but tab, newline and carriage return;
# DEL; C1). NULs between its characters are how UTF-16 and UTF-32 echo an ASCII key read as UTF-8.
# A terminal's stream keeps \r and ESC (progress bars, coloured tracebacks); stored text loses them too (printable).
_SPLITTERS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f-\x9f]")
# A URL query parameter whose name looks secret: `?token=...`, `&api_key=...` (a mirror or proxy URL).
_QUERY = re.compile(r"([?&;])([A-Za-z0-9_.-]+)=([^&#;\s'\"]*)")
_KNOWN: set[str] = set()  # every key read from the environment by this process


def looks_secret(name: str) -> bool:
    """An environment variable name that holds a key, token or password (HF_TOKEN, AWS_SECRET_ACCESS_KEY)."""
    return any(_SECRET_PART.search(part) for part in name.upper().split("_"))


def secret_flag(word: str) -> str | None:
    """The secret flag `word` sets as vLLM's parser reads it (`_` as `-`, `=VALUE`, a prefix), or None.

    Any prefix of two characters or more counts: argparse takes an unambiguous prefix, and which ones are
    unambiguous depends on the server's version.
    """
    if not word.startswith("--"):
        return None
    name = "--" + word[2:].split("=", 1)[0].replace("_", "-").lower()
    return next((flag for flag in SECRET_FLAGS if len(name) >= 4 and flag.startswith(name)), None)


def secret_assignment(word: str) -> bool:
    """Whether a command word is `NAME=value` with a secret-looking name (`HF_TOKEN=...`), also as a container's
    environment option spells it in one word (`--env=HF_TOKEN=...`, `-eHF_TOKEN=...`)."""
    name, sep, _ = _ENV_OPTION.sub("", word, count=1).partition("=")
    return bool(sep) and bool(ENV_NAME.fullmatch(name)) and looks_secret(name)


def remember_key(key: str) -> None:
    """Redact `key` from now on wherever this process redacts (a key given to a client directly, not read here)."""
    _KNOWN.add(key)


def api_key_from_env(variable: str) -> str | None:
    """The key in environment variable `variable` (surrounding whitespace stripped), or None when unset or empty.

    SecretError, in one line that does not show the key, when it holds a character other than printable ASCII
    or is shorter than MIN_KEY_LENGTH characters.
    """
    raw = os.environ.get(variable)
    if raw is None or not raw.strip():
        return None
    _KNOWN.add(raw)
    key = raw.strip()
    if bad := next((c for c in key if not " " <= c <= "~"), None):
        what = f"control character {ord(bad):#04x}" if ord(bad) < 0x80 else "non-ASCII character"
        raise SecretError(f"api_key_env: {variable} holds a {what}; allowed: printable ASCII (key not shown)")
    if len(key) < MIN_KEY_LENGTH:
        raise SecretError(
            f"api_key_env: {variable} holds a key shorter than {MIN_KEY_LENGTH} characters; "
            f"allowed: {MIN_KEY_LENGTH} or more"
        )
    return key


class ApiKey:
    """The key of a run, read once from its environment variable and checked (`api_key_from_env`); it never prints:
    `repr` and `str` show the variable and `<redacted>`. `value` is the key itself, for the request headers."""

    __slots__ = ("_value", "variable")

    def __init__(self, variable: str, value: str | None) -> None:
        self.variable, self._value = variable, value

    @classmethod
    def from_env(cls, variable: str) -> ApiKey:
        return cls(variable, api_key_from_env(variable))

    @property
    def value(self) -> str | None:
        return self._value

    def __repr__(self) -> str:
        return f"ApiKey({self.variable}: {REDACTED if self._value else 'unset'})"

    __str__ = __repr__

    def __reduce__(self) -> tuple[Any, ...]:  # pickled (a Ray task) as its variable: read again where it runs
        return ApiKey.from_env, (self.variable,)


def env_secret(variable: str) -> str | None:
    """The raw value of `variable`, for redaction only (never raises, never checked)."""
    return os.environ.get(variable) or None


def secret_forms(secret: str) -> set[str]:
    """The spellings of `secret` an error text can hold: raw, stripped, escaped by repr()/bytes/JSON, URL-encoded."""
    forms = set()
    for value in {secret, secret.strip()}:
        forms |= {
            value,
            repr(value)[1:-1],
            json.dumps(value)[1:-1],
            quote(value),
            quote(value, safe=""),
            quote_plus(value),
        }
        forms |= {repr(value.encode(codec, "replace"))[2:-1] for codec in ("utf-8", "latin-1")}
        forms |= _byte_forms(value.encode("utf-8", "replace"))
    return {form for form in forms if len(form.strip()) >= MIN_KEY_LENGTH}


def _byte_forms(raw: bytes) -> set[str]:
    """The key's bytes percent-encoded one by one (`%73%6B...`, either case) and base64-encoded (standard and
    URL-safe) at each of the three alignments inside a longer blob: the characters that depend on the key alone."""
    forms = {"".join(f"%{b:02X}" for b in raw), "".join(f"%{b:02x}" for b in raw)}
    for pad in range(3):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            encoded = encode(b"\0" * pad + raw + b"\0" * 2).decode("ascii")
            start = -(-pad * 4 // 3) + (1 if pad else 0)  # past the characters the padding shares
            end = (pad + len(raw)) * 4 // 3  # before the characters the tail shares
            forms.add(encoded[start:end])
    return forms


def redact(text: str, *secrets: str | None) -> str:
    """Replace secret flag values, secret `NAME=value` words, URL user info, `secrets` and every key read by
    this process (each in all its forms, and every piece of a form of MIN_KEY_LENGTH characters or more, as a
    server that cut or masked the key would echo it) with `<redacted>`. NULs go first (a UTF-16 echo of a key is
    whole again). Redact first, then cut: `redact_and_cut`; what leaves the process: `scrub`."""
    text = text.replace("\0", "")
    forms = set().union(*(secret_forms(s) for s in {*secrets, *_KNOWN} if s))
    for form in sorted(forms, key=len, reverse=True):
        text = text.replace(form, REDACTED)
    for form in forms:
        text = _redact_pieces(text, form.strip())
    text = _OPTION.sub(_redact_option, text)
    text = _ASSIGNMENT.sub(lambda m: m.group(1) + REDACTED if looks_secret(m.group(1)[:-1]) else m.group(0), text)
    text = _ENV_OPTION_WORD.sub(
        lambda m: m.group(1) + m.group(2) + REDACTED if looks_secret(m.group(2)[:-1]) else m.group(0), text
    )
    text = _QUERY.sub(
        lambda m: (
            f"{m.group(1)}{m.group(2)}={REDACTED}"
            if _secret_parameter(m.group(2)) and m.group(3) and not _redacted_already(text, m.end(3))
            else m.group(0)
        ),
        text,
    )
    text = _PAIR.sub(lambda m: _redact_pair(m) if _secret_name_ends(m.group(2)) else m.group(0), text)
    text = _CREDENTIAL.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)
    return _USERINFO.sub(
        lambda m: m.group(0) if m.group(0)[len(m.group(1)) : -1] in _MARKERS else m.group(1) + REDACTED + "@", text
    )


_MARKERS = (REDACTED, html.escape(REDACTED))  # redacted already: as written, and as an HTML page escapes it


def _redacted_already(text: str, end: int) -> bool:
    """Whether a value cut short at `end` is a redaction marker (its `<` or `&` stopped the value's match)."""
    return text.startswith(_MARKERS, end)


def _secret_name_ends(name: str) -> bool:
    """A mapping's name whose last part is a secret word (`HF_TOKEN`, `password`, `api_key`), not one that names
    where a secret is (`api_key_env`)."""
    return _SECRET_PART.search(re.split(r"[._-]", name.upper())[-1]) is not None


def _redact_pair(match: re.Match[str]) -> str:
    quote_name, name, colon, quote_value, _ = match.groups()
    return f"{quote_name}{name}{quote_name}{colon}{quote_value}{REDACTED}{quote_value}"


def scrub_tree(value: Any, *secrets: str | None) -> Any:
    """`value` (JSON-like: dicts, lists, strings, numbers) with every string, keys included, `scrub`bed."""
    return map_strings(value, lambda text: scrub(text, *secrets))


def scrub(text: str, *secrets: str | None, limit: int | None = None) -> str:
    """The one filter for text that leaves the process (records, files, reports, an error line): control
    characters out (tab and newline stay), so that a key split by them is whole again and no escape sequence
    drives a terminal, then every secret redacted (`redact`), then cut to `limit` characters (a cut never leaves
    a piece of a key to redact)."""
    clean = redact(printable(text), *secrets)
    return clean if limit is None else clean[:limit]


# Tokens by their well-known shapes (OpenAI-style `sk-…`, Hugging Face `hf_…`) and bearer credentials.
_TOKEN_SHAPES = re.compile(
    r"(?<![A-Za-z0-9])(?:sk-[A-Za-z0-9_-]{16,}|hf_[A-Za-z0-9]{20,})|\bBearer\s+(?!<redacted>)[A-Za-z0-9._~+/=-]{8,}"
)


def holds_secret(text: str, *secrets: str | None) -> bool:
    """Whether `text` holds a key-shaped string: a token of a well-known shape, or a value `redact` would hide.

    Text redacted already holds none: redacting it again may reword its quoting (`--api-key <redacted>",` in JSON)
    but adds no `<redacted>`."""
    return _TOKEN_SHAPES.search(text) is not None or redact(text, *secrets).count(REDACTED) > text.count(REDACTED)


def _secret_parameter(name: str) -> bool:
    return looks_secret(re.sub(r"[.-]", "_", name))


def redact_and_cut(text: str, limit: int, *secrets: str | None) -> str:
    """`text` scrubbed and cut to `limit` characters (`scrub`): a cut never leaves a piece of a key to redact."""
    return scrub(text, *secrets, limit=limit)


_EXCERPT_SOURCE = 65536  # what an excerpt reads of a value: far past its limit, so no cut piece of a key shows


def excerpt(value: Any, limit: int, *secrets: str | None) -> str:
    """A glimpse of what a server sent, for a one-line error: `value` (text or bytes; anything else as its str())
    as repr() shows it, redacted, then cut to `limit` characters."""
    if not isinstance(value, str | bytes):
        value = str(value)
    head = value[:_EXCERPT_SOURCE]
    if isinstance(head, bytes):  # a key echoed in UTF-16 or UTF-32 reads as itself once its NULs are gone
        head = head.replace(b"\0", b"")
    return redact(repr(_SPLITTERS.sub("", head) if isinstance(head, str) else head), *secrets)[:limit]


class RedactingWriter:
    """A text stream that redacts what it passes on to `stream`, a line at a time (a key split over two writes is
    still whole in its line); `close()` passes on an unfinished last line."""

    def __init__(self, stream: Any, *secrets: str | None) -> None:
        self._stream, self._secrets, self._pending = stream, secrets, ""

    def write(self, text: str) -> int:
        lines = (self._pending + text).split("\n")
        self._pending = lines.pop()
        if lines:
            self._stream.write(redact(_SPLITTERS.sub("", "\n".join(lines)), *self._secrets) + "\n")
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def end_line(self) -> None:
        """End an unfinished last line (a progress bar cut off), so that a line of one's own starts afresh."""
        if self._pending:
            self.write("\n")

    def close(self) -> None:
        if self._pending:
            self._stream.write(redact(_SPLITTERS.sub("", self._pending), *self._secrets))
            self._pending = ""
        self._stream.flush()


def redact_file(path: Path, *secrets: str | None) -> None:
    """Rewrite a text file with its secrets redacted (nothing is written when it holds none)."""
    if not path.is_file():
        return
    text = path.read_text(encoding="utf-8", errors="surrogateescape")
    if (clean := redact(text, *secrets)) != text:
        path.write_text(clean, encoding="utf-8", errors="surrogateescape")


def _redact_pieces(text: str, form: str) -> str:
    """Every run of MIN_KEY_LENGTH or more characters that is a piece of `form` (a key a server or a gateway cut
    short, masked in the middle or echoed in part), replaced with `<redacted>`."""
    if len(text) < MIN_KEY_LENGTH:
        return text
    pieces, start = [], 0
    for found in _piece_starts(text, form):
        if found < start:
            continue
        end = found + MIN_KEY_LENGTH
        while end < len(text) and text[found : end + 1] in form:
            end += 1
        pieces += [text[start:found], REDACTED]
        start = end
    return "".join(pieces) + text[start:] if pieces else text


_LONG_TEXT = 4096  # past this, windows are compared eight bytes at a time (numpy): an executed notebook is megabytes


def _piece_starts(text: str, form: str) -> list[int]:
    """Where a MIN_KEY_LENGTH-character piece of `form` begins in `text`, in order."""
    grams = _grams(form)
    if len(text) <= _LONG_TEXT:
        return [i for i in range(len(text) - MIN_KEY_LENGTH + 1) if text[i : i + MIN_KEY_LENGTH] in grams]
    import numpy as np

    data = text.encode("ascii", "replace")  # one byte per character: offsets stay those of `text`
    found: list[int] = []
    for shift in range(MIN_KEY_LENGTH):
        count = (len(data) - shift) // MIN_KEY_LENGTH
        windows = np.frombuffer(data, dtype="<u8", count=count, offset=shift)
        found += (shift + MIN_KEY_LENGTH * np.flatnonzero(np.isin(windows, _packed(form)))).tolist()
    return sorted(i for i in found if text[i : i + MIN_KEY_LENGTH] in grams)  # "?" stood for any non-ASCII


@functools.lru_cache(maxsize=64)
def _grams(form: str) -> frozenset[str]:
    """`form`'s MIN_KEY_LENGTH-character pieces."""
    return frozenset(form[i : i + MIN_KEY_LENGTH] for i in range(len(form) - MIN_KEY_LENGTH + 1))


@functools.lru_cache(maxsize=64)
def _packed(form: str) -> Any:
    """`form`'s pieces (`_grams`) as little-endian 64-bit words, sorted (a numpy array)."""
    import numpy as np

    packed = b"".join(gram.encode("ascii", "replace") for gram in _grams(form))
    return np.unique(np.frombuffer(packed, dtype="<u8"))


def _redact_option(match: re.Match[str]) -> str:
    flag, equals, _, values = match.groups()
    if secret_flag(flag) is None:
        return match.group(0)
    if equals:
        return f"{flag}={REDACTED}"
    spaces = re.match(r"\s+", values)
    return flag + (spaces.group(0) if spaces else " ") + REDACTED
