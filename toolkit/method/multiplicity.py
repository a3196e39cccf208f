"""Many cells, one family: a comparison's tests corrected together, and its one overall ratio (pure).

A compare of two runs tests every matching cell for each quantity, a hundred tests and more. At 5 % each, a
run compared with itself would show several "significant" cells by chance alone. The p-values of one pair of
runs are adjusted together by Benjamini–Hochberg (scipy.stats.false_discovery_control): a cell is marked when
its adjusted p is at most 5 %, which holds the expected share of false marks among the marked at 5 %, and the
chance of any false mark at 5 % when the runs do not differ at all. The overall ratio is the geometric mean of
the cells' ratios with its interval (docs/method/drift.md, Comparisons).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from toolkit.method.spread import Interval, t_quantile, welch_dof

if TYPE_CHECKING:
    import pandas as pd

FAMILY_LEVEL = 0.05
MAX_EXP = 709.0  # math.exp overflows a float past this


def adjusted_p_values(p_values: Sequence[float | None]) -> list[float | None]:
    """Benjamini–Hochberg adjusted p-values of the known ones, in the same places (None stays None)."""
    known = [(i, p) for i, p in enumerate(p_values) if p is not None and math.isfinite(p)]
    adjusted: list[float | None] = [None] * len(p_values)
    if not known:
        return adjusted
    from scipy.stats import false_discovery_control

    values = false_discovery_control([p for _, p in known], method="bh")
    for (i, _), q in zip(known, values, strict=True):
        adjusted[i] = float(q)
    return adjusted


def marked(adjusted: float | None) -> bool | None:
    """Whether an adjusted p-value marks its cell significant (None: not tested)."""
    return None if adjusted is None else adjusted <= FAMILY_LEVEL


def family_adjusted(table: pd.DataFrame, quantities: Sequence[str]) -> pd.DataFrame:
    """`<q>_p_adjusted` and `<q>_significant` from every `<q>_p` of the table, adjusted together (one family)."""
    import pandas as pd

    places = [(q, i) for q in quantities for i in range(len(table))]
    adjusted = adjusted_p_values([table[f"{q}_p"].iloc[i] for q, i in places])
    for q in quantities:
        mine = [a for (name, _), a in zip(places, adjusted, strict=True) if name == q]
        table[f"{q}_p_adjusted"] = pd.Series(mine, index=table.index, dtype=object)
        table[f"{q}_significant"] = pd.Series([marked(a) for a in mine], index=table.index, dtype=object)
    return table


def overall_ratio(ratios: Sequence[Interval]) -> Interval | None:
    """The geometric mean of the cells' ratios with its 95 % interval (the larger side, as a half-width); the log
    ratios' standard errors combined, Welch–Satterthwaite degrees of freedom; None without a ratio."""
    usable = [r for r in ratios if r.value > 0 and math.isfinite(r.relative)]
    if not usable:
        return None
    m = len(usable)
    centre = math.fsum(math.log(r.value) for r in usable) / m
    variances = [(r.relative_se / m) ** 2 for r in usable]
    total = math.fsum(variances)
    dof = welch_dof([(v, r.dof) for v, r in zip(variances, usable, strict=True)])
    value = math.exp(centre)
    spread = t_quantile(dof) * math.sqrt(total) if total else 0.0
    # The upper side, e**spread - 1, is the larger; past e**709 (a cell with a near-unbounded interval, or almost
    # no degrees of freedom) the overall ratio has no bound at all.
    half_width = value * math.expm1(spread) if spread < MAX_EXP else math.inf
    return Interval(value, half_width, dof, log_scale=True)
