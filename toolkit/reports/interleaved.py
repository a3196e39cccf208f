"""An interleaved comparison's report: each decode cell's paired ratio B / A over the rounds (pure).

The runs of `toolkit interleave` (toolkit.batch.interleave) measured A and B in alternating rounds; here each
decode cell's per-round values become paired ratios (toolkit.method.paired), every test of the table is adjusted
together (toolkit.method.multiplicity), and one overall ratio per quantity sums them up.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from toolkit.base.schema import RAN_STATUSES
from toolkit.method.disturbed import disturbed_mask
from toolkit.method.multiplicity import family_adjusted
from toolkit.method.number_format import as_number
from toolkit.method.paired import paired_ratio
from toolkit.reports.compare_overall import RATIO_QUANTITIES, cells_text, format_ratio
from toolkit.reports.markdown_text import inert
from toolkit.reports.tables import markdown_table

Rounds = Mapping[int, pd.DataFrame]  # round -> that round's results frame (load_run)
CELL = ("context_tokens", "context", "concurrency")


def _values(frame: pd.DataFrame) -> dict[tuple[int, str, int], dict[str, float]]:
    """The decode cells that ran undisturbed: (context tokens, context, concurrency) -> quantity -> value."""
    usable = frame[(frame["phase"] == "decode") & frame["status"].isin(RAN_STATUSES) & ~disturbed_mask(frame)]
    out: dict[tuple[int, str, int], dict[str, float]] = {}
    for row in usable.to_dict("records"):
        key = (int(row["context_tokens"]), str(row["context"]), int(row["concurrency"]))
        out[key] = {q: v for q in RATIO_QUANTITIES if (v := as_number(row.get(q))) is not None}
    return out


def paired_table(a: Rounds, b: Rounds) -> pd.DataFrame:
    """One row per decode cell measured in every round on both sides: per quantity the geometric-mean ratio B / A
    (`<q>_ratio`), its 95 % half-width, p-value, adjusted p-value and whether it is marked significant."""
    rounds = sorted(set(a) & set(b))
    sides = [(_values(a[r]), _values(b[r])) for r in rounds]
    cells = sorted(set.intersection(*(set(x) & set(y) for x, y in sides))) if sides else []
    rows = []
    for cell in cells:
        row: dict[str, object] = dict(zip(CELL, cell, strict=True)) | {"rounds": len(rounds)}
        for q in RATIO_QUANTITIES:
            pairs = [(x[cell].get(q), y[cell].get(q)) for x, y in sides]
            test = paired_ratio([p or math.nan for p, _ in pairs], [p or math.nan for _, p in pairs])
            row |= {f"{q}_ratio": test.interval.value if test else math.nan,
                    f"{q}_ratio_hw": test.interval.half_width if test else math.nan,
                    f"{q}_ratio_dof": test.interval.dof if test else math.nan,
                    f"{q}_p": test.p_value if test else None}  # fmt: skip
        rows.append(row)
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    return family_adjusted(table, list(RATIO_QUANTITIES))


def overall(a: Rounds, b: Rounds) -> dict[str, tuple[float, float, int]]:
    """Per quantity: the geometric mean over the cells measured in every round on both sides of B / A, with its
    95 % half-width from the spread of the rounds' own geometric means (the machine's change between a round's two
    runs moves every cell alike, so the cells are not independent tests), and how many cells."""
    rounds = sorted(set(a) & set(b))
    sides = [(_values(a[r]), _values(b[r])) for r in rounds]
    out = {}
    for q in RATIO_QUANTITIES:
        cells = [c for c in set.intersection(*(set(x) & set(y) for x, y in sides)) if all(
            x[c].get(q) and y[c].get(q) for x, y in sides)] if sides else []  # fmt: skip
        if not cells:
            continue
        means = [
            (statistics.fmean(math.log(x[c][q]) for c in cells), statistics.fmean(math.log(y[c][q]) for c in cells))
            for x, y in sides
        ]
        test = paired_ratio([math.exp(u) for u, _ in means], [math.exp(v) for _, v in means])
        if test is not None:
            out[q] = (test.interval.value, test.interval.half_width, len(cells))
    return out


def _cell_text(row: Mapping[Any, Any], q: str) -> str:
    ratio, hw = as_number(row.get(f"{q}_ratio")), as_number(row.get(f"{q}_ratio_hw"))
    if ratio is None or hw is None:
        return "—"
    return f"{format_ratio(ratio)} ±{hw:.2f}" + ("" if row.get(f"{q}_significant") else " n.s.")


def interleaved_markdown(
    table: pd.DataFrame, labels: Sequence[str], rounds: int, sums: Mapping[str, tuple[float, float, int]]
) -> str:
    """interleaved.md: what was measured in which order, the overall ratios (`overall`) and the paired table."""
    a, b = (inert(label) for label in labels)
    out = [
        f"# Interleaved comparison: {b} / {a}",
        f"{rounds} rounds measured in alternating order ({a} {b}, {b} {a}, …): each round's two runs are neighbours "
        "in time, so the machine's slow change moves both alike and cancels in their ratio. Per cell, the "
        "geometric mean of the rounds' ratios with its 95 % t interval over the rounds; n.s.: no significant "
        "difference once every test of the table is counted (Benjamini–Hochberg at 5 %). docs/method/drift.md, "
        "Comparisons.",
    ]
    if sums:
        parts = [
            f"{RATIO_QUANTITIES[q]} {format_ratio(v)} ±{hw:.2f} ({cells_text(n)})" for q, (v, hw, n) in sums.items()
        ]
        out.append(f"Overall, {b} / {a} (geometric mean over the cells, its interval over the rounds, 95 %): "
                   + "; ".join(parts))  # fmt: skip
    if table.empty:
        out.append("No decode cell ran undisturbed in every round on both sides.")
    else:
        shown = pd.DataFrame(
            [[row["context"], f"{int(row['concurrency']):,}", *(_cell_text(row, q) for q in RATIO_QUANTITIES)]
             for row in table.to_dict("records")],
            columns=["Context", "Requests at once", *RATIO_QUANTITIES.values()],
        )  # fmt: skip
        out.append(markdown_table(shown))
    return "\n\n".join(out) + "\n"
