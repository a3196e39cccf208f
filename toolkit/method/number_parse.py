"""Parsing of numbers as the reports display them ("17.7K", "8,828.0", "1,036 ms", "—")."""

from __future__ import annotations

import re
from decimal import Decimal

MISSING = "—"  # a missing number, as the reports print it (toolkit.reports.number_format)
UNITS: tuple[str, ...] = ("ms", "s", "tokens")
MAX_NUMBER_CHARS = 40  # longer than any number a report displays ("1,234,567.8901 tokens" is 21)

_NUMBER = re.compile(r"(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)(?P<k>K)?(?:\s*(?P<unit>[a-z]+))?")


def parse_number(text: str, unit: str | None = None) -> float | None:
    """Parse one displayed number; ``K`` means ×1000 and ``—`` means missing (None).

    Without ``unit`` any known unit (ms, s, tokens) or none is accepted; with ``unit``
    the text must carry exactly that unit. Anything else raises ``ValueError``.
    """
    stripped = text.strip()
    if stripped == MISSING:
        return None
    match = _NUMBER.fullmatch(stripped) if len(stripped) <= MAX_NUMBER_CHARS else None
    found = match["unit"] if match else None
    if match is None or (found is not None and found not in UNITS):
        raise ValueError(f"{_shown(text)!r} is not a displayed number (like 17.7K, 8,828.0, 1,036 ms, 29.9 s or —)")
    if unit is not None and found != unit:
        raise ValueError(f"{_shown(text)!r} is not a number in {unit} (like 1,036 {unit})")
    value = Decimal(match["num"].replace(",", ""))
    return float(value * 1000 if match["k"] else value)


def parse_int(text: str, unit: str | None = None) -> int | None:
    """Parse a displayed whole number ("1,434", "4,096 tokens"); ``—`` gives None."""
    value = parse_number(text, unit)
    if value is None:
        return None
    if not value.is_integer():
        raise ValueError(f"{_shown(text)!r} is not a whole number")
    return int(value)


def _shown(text: str) -> str:
    """`text` for an error message: a long one cut (a report's cell can be any length)."""
    return text if len(text) <= MAX_NUMBER_CHARS else text[: MAX_NUMBER_CHARS - 3] + "..."
