"""JSON text as the readers meet it: parsed without a RecursionError, read line by line in bounded memory, and a
field found again on its line for an error that names it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

MAX_LINE_CHARS = 16 * 1024 * 1024  # a JSONL line longer than this is refused, not read whole
TOO_DEEP = "nested deeper than a JSON reader follows"  # parse_json's reasons, beside json's own
TOO_MANY_DIGITS = "a number of more digits than a JSON reader converts"
_SPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def parse_json(text: str) -> Any:
    """`json.loads(text)`; JSONDecodeError, never RecursionError or a bare ValueError, for a value nested deeper
    than Python parses or a number of more digits than Python converts."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise json.JSONDecodeError(TOO_DEEP, text[:1], 0) from None
    except ValueError:  # sys.get_int_max_str_digits()
        raise json.JSONDecodeError(TOO_MANY_DIGITS, text[:1], 0) from None


def json_lines(path: Path) -> Iterator[tuple[int, str | None]]:
    """(line number, text) of every non-blank line of `path`, read a line at a time; text None for a line longer
    than MAX_LINE_CHARS (skipped to its end). Not UTF-8 is replaced; OSError when it cannot be opened."""
    with open(path, encoding="utf-8", errors="replace", newline="\n") as lines:
        number = 0
        while chunk := lines.readline(MAX_LINE_CHARS):
            number += 1
            if not chunk.endswith("\n") and len(chunk) == MAX_LINE_CHARS:
                while (rest := lines.readline(MAX_LINE_CHARS)) and not rest.endswith("\n"):
                    pass
                yield number, None
            elif chunk.strip():
                yield number, chunk


def line_of(text: str, loc: Sequence[str | int]) -> int:
    """The line (1-based) of `text`, a JSON document, where the value at `loc` (keys and list indices) starts; where
    `loc` leads nowhere, the line of the deepest value it reaches."""
    at = _skip(text, 0)
    try:
        for part in loc:
            found = _child(text, at, part)
            if found is None:
                break
            at = found
    except (ValueError, IndexError, RecursionError):
        pass
    return text.count("\n", 0, at) + 1


def _skip(text: str, at: int) -> int:
    """Past the white space at `at`."""
    match = _SPACE.match(text, at)  # white space, maybe none: it always matches
    return match.end() if match else at


def _child(text: str, at: int, part: str | int) -> int | None:
    """Where the member `part` of the object (or item of the list) starting at `at` begins."""
    opening = text[at]
    if opening not in "{[" or (opening == "{") != isinstance(part, str):
        return None
    at, index = _skip(text, at + 1), 0
    while text[at] not in "}]":
        if opening == "{":
            key, at = _DECODER.raw_decode(text, at)
            at = _skip(text, _skip(text, at) + 1)  # past the colon
            if key == part:
                return at
        elif index == part:
            return at
        _, at = _DECODER.raw_decode(text, at)
        at = _skip(text, at)
        if text[at] == ",":
            at = _skip(text, at + 1)
        index += 1
    return None
