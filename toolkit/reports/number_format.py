"""Number formatting exactly as the published speed-test-matrix reports print numbers.

Every function takes a number or a missing value (None, NaN, pandas NA) and returns a string;
missing values print as an em dash.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from toolkit.method.number_parse import MISSING
from toolkit.method.quantile_bounds import min_bounded_n

K_THRESHOLD = 10_000


def as_number(value: Any) -> float | None:
    """Return ``value`` as a finite float, or None when it is missing (None, NaN, NA, inf)."""
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _drop_zero(text: str) -> str:
    return text[:-2] if text.endswith(".0") else text


def format_tok_s(value: Any, *, trim_zero: bool = False) -> str:
    """Tokens per second: ``17.7K``/``15K`` from 10,000 up, else ``8,828.0``.

    ``trim_zero`` also drops a trailing ``.0`` below 10,000 (``8,828``), as the prefill cards do.
    """
    number = as_number(value)
    if number is None:
        return MISSING
    if abs(round(number, 1)) >= K_THRESHOLD:
        return _drop_zero(f"{number / 1000:,.1f}") + "K"
    text = f"{number:,.1f}"
    return _drop_zero(text) if trim_zero else text


def _formatter(template: str, doc: str) -> Callable[[Any], str]:
    """A formatter printing a number through `template` (e.g. ``"{:,.0f} ms"``), missing values as ``—``."""

    def format_number(value: Any) -> str:
        number = as_number(value)
        return MISSING if number is None else template.format(number)

    format_number.__doc__ = doc
    return format_number


format_ms = _formatter(
    "{:,.0f} ms", "Milliseconds rounded to an integer with thousands separators: ``1,036 ms`` (TTFT)."
)
format_tbt_ms = _formatter("{:,.1f} ms", "Milliseconds with one decimal: ``39.2 ms`` (time between tokens).")
format_seconds = _formatter("{:,.1f} s", "Seconds with one decimal: ``29.9 s``.")
format_active = _formatter("{:,.1f}", "Average active requests with one decimal: ``1.0``, ``126.2``.")


def format_count(value: Any) -> str:
    """An integer count with thousands separators: ``28,796``."""
    number = as_number(value)
    return MISSING if number is None else f"{round(number):,}"


def format_percent(fraction: Any) -> str:
    """A 0–1 fraction as a percentage with one decimal: ``87.5%``."""
    number = as_number(fraction)
    return MISSING if number is None else f"{number * 100:,.1f}%"


def format_bounded(value: Any, low: Any, high: Any, show: Callable[[Any], str]) -> str:
    """A percentile with its 95 % bounds (toolkit.method.quantile_bounds), each through `show`: ``812 ms [640,
    1,020]``; a missing upper end is ``unbounded`` (too few values); the value alone when neither end is known."""
    shown = show(value)
    low, high = as_number(low), as_number(high)
    if shown == MISSING or (low is None and high is None):
        return shown
    bound = lambda x: show(x).removesuffix(" ms")  # noqa: E731
    return f"{shown} [{MISSING if low is None else bound(low)}, {'unbounded' if high is None else bound(high)}]"


def bounds_note(*qs: float) -> str:
    """What the brackets of `format_bounded` mean, for a table of these percentiles: ``in brackets the percentile's
    95 % distribution-free interval, unbounded above from fewer than 36 requests at p90 and 368 at p99``."""
    fewest = [f"{min_bounded_n(q):,}" + (" requests" if i == 0 else "") + f" at p{q:g}" for i, q in enumerate(qs)]
    listed = " and ".join(fewest)
    return f"in brackets the percentile's 95 % distribution-free interval, unbounded above from fewer than {listed}"


def format_rate(value: Any) -> str:
    """Requests per second with two decimals (``7.50``); an infinite offered rate is ``all at once``."""
    if isinstance(value, int | float) and math.isinf(value) and value > 0:
        return "all at once"
    number = as_number(value)
    return MISSING if number is None else f"{number:,.2f}"
