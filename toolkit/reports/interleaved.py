"""An interleaved comparison's report: each decode cell's paired ratio B / A over the rounds (pure).

The runs of `toolkit interleave` (toolkit.batch.interleave) measured A and B in alternating rounds; here each
decode cell's per-round values become paired ratios (toolkit.method.paired), every test of the table is adjusted
together (toolkit.method.multiplicity), and one overall ratio per quantity sums them up, beside it the same ratio
adjusted for the rounds' order and the smallest difference the rounds' own spread could have detected. Where the
rounds' decode requests carried a response format or tools, each side's reply shares beside each cell's ratios.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from toolkit.base.schema import RAN_STATUSES
from toolkit.loadgen.reply_checks import SHARE_OF
from toolkit.method.disturbed import disturbed_mask
from toolkit.method.multiplicity import family_adjusted
from toolkit.method.paired import (
    Detectable,
    OrderAdjusted,
    a_first,
    minimum_detectable,
    order_adjusted_ratio,
    paired_ratio,
    round_log_sd,
)
from toolkit.reports.compare_overall import RATIO_QUANTITIES, cells_text, format_ratio
from toolkit.reports.markdown_text import inert
from toolkit.reports.number_format import as_number
from toolkit.reports.tables import REPLY_SHARE_MARKS, REPLY_SHARE_NOTE, markdown_table

Rounds = Mapping[int, pd.DataFrame]  # round -> that round's results frame (load_run)
CELL = ("context_tokens", "context", "concurrency")
Cells = dict[tuple[int, str, int], dict[str, float]]  # a round's side: decode cell -> quantity -> value (_values)
SIDES = ("a", "b")  # a reply share's column: `<share>_a`, `<share>_b` (toolkit.loadgen.reply_checks.SHARE_OF)


def _values(frame: pd.DataFrame) -> Cells:
    """The decode cells that ran undisturbed: (context tokens, context, concurrency) -> quantity (and reply share,
    where the cell has one) -> value."""
    usable = frame[(frame["phase"] == "decode") & frame["status"].isin(RAN_STATUSES) & ~disturbed_mask(frame)]
    out: Cells = {}
    for row in usable.to_dict("records"):
        key = (int(row["context_tokens"]), str(row["context"]), int(row["concurrency"]))
        out[key] = {q: v for q in (*RATIO_QUANTITIES, *SHARE_OF) if (v := as_number(row.get(q))) is not None}
    return out


def paired_table(a: Rounds, b: Rounds) -> pd.DataFrame:
    """One row per decode cell measured in every round on both sides: per quantity the geometric-mean ratio B / A
    (`<q>_ratio`), its 95 % half-width, p-value, adjusted p-value and whether it is marked significant; where the
    cell's requests carried a response format or tools, each side's reply shares (`_shares`)."""
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
        rows.append(row | _shares(cell, sides))
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    return family_adjusted(table, list(RATIO_QUANTITIES))


def _shares(cell: tuple[int, str, int], sides: Sequence[tuple[Cells, Cells]]) -> dict[str, float]:
    """Each side's reply shares of `cell`, the mean over the rounds that have one (`<share>_a`, `<share>_b`; none
    when its requests carried no response format or tools: a plain comparison's table keeps its columns)."""
    out = {}
    for share in SHARE_OF:
        for side, index in zip(SIDES, (0, 1), strict=True):
            found = [values[index][cell][share] for values in sides if share in values[index][cell]]
            if found:
                out[f"{share}_{side}"] = statistics.fmean(found)
    return out


def _round_means(a: Rounds, b: Rounds) -> dict[str, tuple[list[int], list[float], list[float], int]]:
    """Per quantity: the rounds both sides measured, each round's geometric mean over the cells measured in every
    round on both sides (A's, B's), and how many cells."""
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
        out[q] = (rounds, [math.exp(u) for u, _ in means], [math.exp(v) for _, v in means], len(cells))
    return out


def overall(a: Rounds, b: Rounds) -> dict[str, tuple[float, float, int]]:
    """Per quantity: the geometric mean over the cells measured in every round on both sides of B / A, with its
    95 % half-width from the spread of the rounds' own geometric means (the machine's change between a round's two
    runs moves every cell alike, so the cells are not independent tests), and how many cells."""
    out = {}
    for q, (_, xs, ys, cells) in _round_means(a, b).items():
        test = paired_ratio(xs, ys)
        if test is not None:
            out[q] = (test.interval.value, test.interval.half_width, cells)
    return out


@dataclass(frozen=True)
class Design:
    """What an overall ratio's rounds say beyond it: the ratio adjusted for their order (None: fewer than three
    rounds, or one order only) and the smallest difference their spread detects (None: fewer than two)."""

    adjusted: OrderAdjusted | None
    detectable: Detectable | None


def overall_design(a: Rounds, b: Rounds) -> dict[str, Design]:
    """Per quantity of `overall`: its rounds' ratio adjusted for the order (A first in odd rounds,
    toolkit.method.paired.a_first) and its minimum detectable effect at 80 % power."""
    out = {}
    for q, (rounds, xs, ys, _) in _round_means(a, b).items():
        sd = round_log_sd(xs, ys)
        detectable = None if sd is None else minimum_detectable(sd, len(xs))
        out[q] = Design(order_adjusted_ratio(xs, ys, [a_first(r) for r in rounds]), detectable)
    return out


def _rounds_text(rounds: int | None) -> str:
    return "more than 1,000" if rounds is None else f"{rounds:,}"


def _needed_text(detectable: Detectable) -> str:
    """``5 % needs about 34 rounds, 10 % about 10``."""
    shown = [(f"{100 * share:.0f} %", _rounds_text(n)) for share, n in detectable.needed]
    return ", ".join(f"{d} needs about {n} rounds" if i == 0 else f"{d} about {n}" for i, (d, n) in enumerate(shown))


def design_lines(design: Mapping[str, Design], labels: Sequence[str]) -> list[str]:
    """The order-adjusted overall ratios and each quantity's minimum detectable effect, a line each."""
    a, b = labels
    out = []
    adjusted = {q: d.adjusted for q, d in design.items() if d.adjusted is not None}
    if adjusted:
        parts = [f"{RATIO_QUANTITIES[q]} {format_ratio(r.ratio.interval.value)} ±{r.ratio.interval.half_width:.2f}, "
                 f"a round's second run {format_ratio(r.period)} its first" for q, r in adjusted.items()]  # fmt: skip
        dof = next(iter(adjusted.values())).ratio.interval.dof
        out.append(f"Order-adjusted, {b} / {a} (the mean of the rounds {a} went first and the rounds {b} went "
                   f"first, so that a change from a round's first run to its second cancels; its interval from the "
                   f"spread about those two means, {dof:.0f} degrees of freedom): " + "; ".join(parts))  # fmt: skip
    elif design:
        out.append("Order-adjusted: needs three rounds or more, with each side first in one of them.")
    found = {q: d.detectable for q, d in design.items() if d.detectable is not None}
    if found:
        rounds = next(iter(found.values())).rounds
        parts = [f"{RATIO_QUANTITIES[q]} ±{d.effect:.1f} % ({_needed_text(d)})" for q, d in found.items()]
        out.append(f"Minimum detectable effect at 80 % power (two-sided 95 %; this run's round-to-round spread, "
                   f"{rounds} rounds): " + "; ".join(parts))  # fmt: skip
    return out


def _cell_text(row: Mapping[Any, Any], q: str) -> str:
    ratio, hw = as_number(row.get(f"{q}_ratio")), as_number(row.get(f"{q}_ratio_hw"))
    if ratio is None or hw is None:
        return "—"
    return f"{format_ratio(ratio)} ±{hw:.2f}" + ("" if row.get(f"{q}_significant") else " n.s.")


def _share_columns(table: pd.DataFrame, labels: Sequence[str]) -> dict[str, str]:
    """The reply shares the table holds, as the decode matrix marks them: column -> title (``A valid``)."""
    return {f"{share}_{side}": f"{label} {mark}" for share, mark in REPLY_SHARE_MARKS.items()
            for side, label in zip(SIDES, labels, strict=True) if f"{share}_{side}" in table.columns}  # fmt: skip


def _share_text(value: Any) -> str:
    share = as_number(value)
    return "—" if share is None else f"{share:.0%}"


def interleaved_markdown(
    table: pd.DataFrame,
    labels: Sequence[str],
    rounds: int,
    sums: Mapping[str, tuple[float, float, int]],
    design: Mapping[str, Design] | None = None,
) -> str:
    """interleaved.md: what was measured in which order, the overall ratios (`overall`), what their rounds say
    beyond them (`overall_design`) and the paired table, with each side's reply shares and the decode matrix's note
    on them where the rounds' requests carried a response format or tools."""
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
    out += design_lines(design or {}, [a, b])
    if table.empty:
        out.append("No decode cell ran undisturbed in every round on both sides.")
    else:
        shares = _share_columns(table, [a, b])
        shown = pd.DataFrame(
            [[row["context"], f"{int(row['concurrency']):,}", *(_cell_text(row, q) for q in RATIO_QUANTITIES),
              *(_share_text(row[c]) for c in shares)] for row in table.to_dict("records")],
            columns=["Context", "Requests at once", *RATIO_QUANTITIES.values(), *shares.values()],
        )  # fmt: skip
        out.append(markdown_table(shown))
        if shares:
            out.append(REPLY_SHARE_NOTE)
    return "\n\n".join(out) + "\n"
