"""`gate plan`: a run's own spread, read per quantity, and the rounds and window that resolve a change (pure).

Within a window: a decode cell's relative standard error (its 95 % half-width over the value, without the t
quantile it was made with: `toolkit.method.spread.window_dof`, as its record says (0.9), the halves recorded
without it 0.95 and the 3 parts of older records 1.5; TTFT's normal), the median over the cells, at the
median window measured. Between rounds, what moves all cells of a round alike:
- an interleaved folder: the rounds' overall log ratios' variance less what the windows explain
  (toolkit.method.gate_plan.between_from_rounds);
- one run with repeats: each cell's spread across its rounds less its window's, for each side of a pair (so
  √2 of it: conservative, as interleaving cancels the slow part of it);
- one run without: its control drift over the run, as the size of the machine's change between a round's two
  runs (one reading, a rough scale); without a control, not measured (the plan is then a lower bound).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from toolkit.method.gate_plan import Plan, Spread, between_from_rounds, plan
from toolkit.method.spread import DOF_DISCOUNT, t_quantile, window_dof
from toolkit.reports.gate_ratios import Rounds, common_cells, decode_values
from toolkit.reports.number_format import as_number

PLANNED = ("total_tok_s", "per_request_tok_s", "tbt_ms", "ttft_ms")


@dataclass(frozen=True)
class PlannedQuantity:
    """One quantity's spread, where its between-rounds part came from, and its plans."""

    quantity: str
    spread: Spread
    between_source: str
    plans: tuple[Plan, ...]


def _relative_se(row: Mapping[Any, Any], q: str) -> float | None:
    value, half = as_number(row.get(q)), as_number(row.get(f"{q}_ci"))
    if value is None or half is None or value <= 0:
        return None
    batches = as_number(row.get("sub_windows"))
    if q == "ttft_ms" or batches is None or batches < 2:
        return half / value / t_quantile(math.inf)
    dof = window_dof(batches, DOF_DISCOUNT, as_number(row.get("window_dof")))
    return half / value / t_quantile(dof)


def _decode(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[(frame["phase"] == "decode") & frame["status"].isin(("Valid", "Requests queued"))]


def within_spread(frames: Sequence[pd.DataFrame], q: str) -> tuple[float, float] | None:
    """(the median relative standard error of a cell, the median window in s) over the frames' decode cells."""
    rows = [r for f in frames for r in _decode(f).to_dict("records")]
    ses = [se for r in rows if (se := _relative_se(r, q)) is not None]
    windows = [w for r in rows if (w := as_number(r.get("measured_s"))) is not None and w > 0]
    if not ses or not windows:
        return None
    return statistics.median(ses), statistics.median(windows)


def cell_overhead_s(frames: Sequence[pd.DataFrame]) -> float:
    """The median wall time of a decode cell around its window (cell_wall_s − windows_s); 0 when not recorded."""
    rows = [r for f in frames for r in _decode(f).to_dict("records")]
    pairs = [(as_number(r.get("cell_wall_s")), as_number(r.get("windows_s"))) for r in rows]
    found = [wall - window for wall, window in pairs if wall is not None and window is not None and wall >= window]
    return statistics.median(found) if found else 0.0


def interleaved_spreads(a: Rounds, b: Rounds, quantities: Sequence[str] = PLANNED) -> dict[str, tuple[Spread, str]]:
    """Per quantity, the spread of an interleaved folder's rounds."""
    rounds = sorted(set(a) & set(b))
    sides = [(decode_values(a[r], quantities), decode_values(b[r], quantities)) for r in rounds]
    cells = common_cells([s for pair in sides for s in pair])
    out = {}
    for q in quantities:
        mine = [c for c in cells if all(q in x[c] and q in y[c] for x, y in sides)]
        within = within_spread([*a.values(), *b.values()], q)
        if len(mine) == 0 or within is None or len(rounds) < 2:
            continue
        logs = [statistics.fmean(math.log(y[c][q] / x[c][q]) for c in mine) for x, y in sides]
        between = between_from_rounds(statistics.variance(logs), within[0], len(mine))
        overhead = cell_overhead_s([*a.values(), *b.values()])
        out[q] = (Spread(within[0], within[1], len(mine), between, overhead), f"{len(rounds)} interleaved rounds")
    return out


def run_spreads(
    frame: pd.DataFrame, drift: float | None, quantities: Sequence[str] = PLANNED
) -> dict[str, tuple[Spread, str]]:
    """Per quantity, the spread of one run (its repeats, else its control drift, else none between rounds)."""
    decode = _decode(frame)
    overhead = cell_overhead_s([frame])
    out = {}
    for q in quantities:
        within = within_spread([frame], q)
        if within is None:
            continue
        rounds_sd = []
        for row in decode.to_dict("records"):
            value, spread, repeats = (as_number(row.get(k)) for k in (q, f"{q}_repeat_ci", "repeats"))
            if value and spread is not None and repeats is not None and repeats >= 2:
                rounds_sd.append(spread / value / t_quantile(repeats - 1) * math.sqrt(repeats))
        cells = len(decode)
        if rounds_sd:
            side = math.sqrt(max(0.0, statistics.median(rounds_sd) ** 2 - within[0] ** 2))
            out[q] = (Spread(within[0], within[1], cells, math.sqrt(2) * side, overhead), "the run's repeats")
        elif drift is not None and q != "ttft_ms":
            out[q] = (Spread(within[0], within[1], cells, math.log1p(abs(drift)), overhead), "the run's control drift")
        else:
            out[q] = (Spread(within[0], within[1], cells, None, overhead),
                      "one round, no control: the plan is a lower bound")  # fmt: skip
    return out


def planned(spreads: Mapping[str, tuple[Spread, str]], detects: Sequence[float], level: float) -> list[PlannedQuantity]:
    return [
        PlannedQuantity(q, spread, source, tuple(plan(spread, d, level) for d in detects))
        for q, (spread, source) in spreads.items()
    ]


def plan_lines(found: Sequence[PlannedQuantity], titles: Mapping[str, str]) -> list[str]:
    """`detect 3 % in decode total tok/s: 6 rounds of 30 s windows (at the 10 s measured: 11 rounds); …`."""
    lines = []
    for p in found:
        s = p.spread
        between = "not measured" if s.between is None else f"{100 * s.between:.1f} %"
        cells = f"{s.cells} cell{'s' if s.cells != 1 else ''}"
        title = titles.get(p.quantity, p.quantity)
        lines.append(f"decode {title}: a cell ±{100 * s.within:.1f} % (standard error) in {s.window_s:.3g} s "
                     f"windows (+{s.overhead_s:.2g} s around each) over {cells}; between rounds {between} "
                     f"({p.between_source})")  # fmt: skip
        for x in p.plans:
            if x.rounds is None:
                lines.append(f"  detect {100 * x.detect:g} %: not within 1,000 rounds of any window")
                continue
            measured = "more than 1,000" if x.rounds_at_measured is None else f"{x.rounds_at_measured}"
            lines.append(f"  detect {100 * x.detect:g} %: {x.rounds} interleaved rounds of {x.window_s:.3g} s windows "
                         f"(at the {s.window_s:.3g} s measured: {measured} rounds), 80 % power")  # fmt: skip
    return lines
