"""Measurements still disturbed after their retries: kept and flagged, never used as numbers.

A pause of the machine hit every window of such a measurement (:func:`toolkit.method.status.disturbance`), so its
numbers may be far too low or too high. Reports show it marked; service levels, best-of figures and
comparisons leave it out. Pure: values and DataFrames in, booleans and text out.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd

DISTURBED_MARK = "disturbed"


def is_disturbed(value: Any) -> bool:
    """Whether a ``disturbed`` value gives a reason (None, NaN and empty text do not)."""
    return isinstance(value, str) and bool(value.strip())


def disturbed_mask(frame: pd.DataFrame) -> pd.Series:
    """True for each row still disturbed after its retries; all False without a ``disturbed`` column."""
    if "disturbed" not in frame.columns:
        return pd.Series(False, index=frame.index, dtype=bool)
    return pd.Series([is_disturbed(v) for v in frame["disturbed"]], index=frame.index, dtype=bool)


def disturbed_count_text(reasons: Iterable[Any]) -> str | None:
    """``2 of 6 measurements disturbed`` from every measurement's ``disturbed`` value; None when none is."""
    values = list(reasons)
    count = sum(is_disturbed(v) for v in values)
    if not count:
        return None
    return f"{count} of {len(values)} measurement{'' if len(values) == 1 else 's'} {DISTURBED_MARK}"
