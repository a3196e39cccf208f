"""Seeded damage to result files, for the readers' fuzz tests (tests/unit/test_import_fuzz.py, test_resume_fuzz.py).

A document is damaged the ways a file on disk can be: a field replaced by a value of another type, NaN, an
infinity, a huge or a negative number, a value nested deeper than Python's parser follows, a number of more digits
than it converts; two fields at once; the text cut short; the whole file one deep nesting; bytes that are not UTF-8.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from typing import Any

from toolkit.base.errors import ToolkitError

Loc = tuple[str | int, ...]
DEEP = "@@deep@@"  # a value replaced, in the text, by lists nested this deep: see `text_of`
DIGITS = "@@digits@@"  # a number of 5,000 digits (Python converts at most 4,300)
ODD: tuple[Any, ...] = (
    "x", "", "inf", "-5", None, True, False, 0, -1, -4, -5000, -6.7e10, 1e9, 1e30, -1e30, 2**80, 0.5, 24.5,
    math.nan, math.inf, -math.inf, [], [1], ["x"], [[1, 2]], [None], {}, {"a": 1}, {"value": "x", "unit": "ms"},
    DEEP, DIGITS,
)  # fmt: skip


def paths(value: Any, prefix: Loc = ()) -> list[Loc]:
    """Every place in a JSON value (the first three items and the last of a list), the value itself first."""
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index in sorted({*range(min(3, len(value))), len(value) - 1} - {-1}):
            found += paths(value[index], (*prefix, index))
    return found


def put(value: Any, loc: Loc, new: Any) -> Any:
    """`value` with the value at `loc` replaced by `new` (copies along the way; `value` is unchanged)."""
    if not loc:
        return new
    head, rest = loc[0], loc[1:]
    copy: Any = dict(value) if isinstance(value, dict) else list(value)
    copy[head] = put(value[head], rest, new)
    return copy


def text_of(value: Any, rng: random.Random) -> str:
    """`value` as JSON text, NaN and infinities as Python writes them, DEEP and DIGITS spelled out."""
    text = json.dumps(value, allow_nan=True)
    depth = rng.choice((40, 3000, 200_000))
    return text.replace(f'"{DEEP}"', "[" * depth + "]" * depth).replace(f'"{DIGITS}"', "1" * 5000)


def damaged_value(rng: random.Random, value: Any, places: list[Loc]) -> Any:
    """`value` with one field (sometimes two) replaced by an odd value."""
    for _ in range(2 if rng.random() < 0.15 else 1):
        value = put(value, rng.choice([place for place in places if fits(value, place)]), rng.choice(ODD))
    return value


def fits(value: Any, place: Loc) -> bool:
    """Whether `place` leads somewhere in `value`."""
    for part in place:
        listed = isinstance(value, list) and isinstance(part, int) and part < len(value)
        if not (listed or (isinstance(value, dict) and part in value)):
            return False
        value = value[part]
    return True


def damaged_text(rng: random.Random, text: str) -> bytes:
    """The whole file damaged: cut short, one deep nesting, not UTF-8, or empty."""
    kind = rng.random()
    if kind < 0.6:
        return text.encode()[: rng.randrange(len(text.encode()))]
    if kind < 0.8:
        return ("[" * 200_000).encode() if rng.random() < 0.5 else ('{"a":' * 100_000).encode()
    if kind < 0.95:
        raw = bytearray(text.encode())
        raw[rng.randrange(len(raw))] = 0xFF
        return bytes(raw)
    return b""


def one_line_refusal(exc: BaseException, seed: int, where: str) -> str:
    """The refusal's message, after checking it is the toolkit's (not a bug's traceback), one line, naming `where`."""
    if not isinstance(exc, ToolkitError):
        raise AssertionError(f"seed {seed}: {type(exc).__name__}: {exc}") from exc
    message = str(exc)
    assert "\n" not in message and "\r" not in message, (seed, message)
    assert message.startswith(where), (seed, message)
    return message


def each_case(cases: range, check: Callable[[int, random.Random], bool]) -> int:
    """`check` with each seed and its generator (a failure names its seed: rerun it alone to see it); how many
    cases it accepted, after checking that both outcomes occur in one case of twenty at least: a fuzz that damages
    nothing, or everything, tests little."""
    accepted = sum(check(seed, random.Random(seed)) for seed in cases)
    assert len(cases) // 20 <= accepted <= len(cases) - len(cases) // 20, f"{accepted} of {len(cases)} accepted"
    return accepted
