"""Do the toolkit's 95 % intervals hold the truth 95 % of the time? Coverage on token streams whose truth is known.

Every interval is computed here by the function of the product that shows it, never a copy: a window's numbers
and half-widths as a run records them (`toolkit.method.window.summarize_window`, `window_spread`, into a
`Measurement`); a cell's rounds by `toolkit.results.rounds.combine`; compare's ratios by
`toolkit.reports.compare.ratio_table` on a frame laid out as `load_runs` lays it out (so its degrees of freedom,
`with_round_spreads` and the control-line correction are the product's); an interleaved comparison by
`toolkit.reports.interleaved.paired_table` and `overall`; the SLO fraction by `toolkit.method.goodput.meeting_fraction`
(batches, design effect, `fraction_bounds`) on the requests' latencies, as `summarize_step` calls it. The kinds
(`INTERVALS`):

- `total_tok_s`, `per_request_tok_s`, `tbt_ms`, `ttft_ms`: one window's (8 streams, 10 s) value ± its recorded
  half-width; the truth is the quantity's mean over `--truth-trials` further windows;
- `repeat`: `combine` of 3 rounds (windows): the mean total tok/s ± `total_tok_s_repeat_ci`;
- `ratio`, `ratio_per_request`, `ratio_ttft`: `ratio_table` of two one-round runs of the same kind (truth 1);
- `repeat_ratio`: `ratio_table` of two runs of 3 rounds each (combined), total tok/s (truth 1);
- `drift_ratio`: `ratio_table` of one cell in two back-to-back runs on a machine whose speed drifts
  (log-linearly, N(0, `--machine-drift`) over a run), each run with its control cell (1 stream, 2 s) read at its
  start and after each of 3 rounds, the cell placed on the run's control line (`control_fit`, `cell_drift`) as
  `load_runs` places it; truth 1. `drift_plain` (shown for contrast, not a kind): the same without the lines;
- `interleaved`, `interleaved_overall`: A/A interleaved comparisons (4 rounds A B B A …, 2 cells of 2 s windows,
  the machine a random walk of `--machine-drift` a run): each cell's paired total tok/s ratio (`paired_table`)
  and the overall one (`overall`); truth 1;
- `slo_fraction`: steps of `--slo-requests` requests of which a true 0.99 (the default target) meet the level,
  each request's TTFT over its limit the exponential of a Gaussian AR(1) (neighbouring requests correlated; met:
  at most 1), the interval `meeting_fraction`'s.

Noise levels: the kinds of `benchmarks/token_truth.py`; `ar1` at each between-batch correlation of `--ar`. The
correlation is stated between the three batches the window interval uses (consecutive batch total tok/s, measured
on simulated windows): the generator's ρ per tenth of a window is found from a measured map (`rho_map`, its own
seeded windows) and the correlation is measured again on each level's trial windows and printed. For the SLO
fraction the correlation is between consecutive batches of `batch_fraction` (5 per step), by the same kind of map
over the requests' AR(1). `--ar-sweep` adds the levels of `SWEEP` (to 0.7), each at `--sweep-trials`.

Per level: 3 × `--trials` windows (the quantities are judged on all, `repeat` on `--trials` triples of them,
`ratio` on 1.5 × `--trials` pairs, `repeat_ratio` on `--trials` pairs of triples from two partitions of them),
`--trials` drift compares, interleaved compares and SLO steps. Coverage is the share of trials whose interval
holds the truth (binomial standard error about 0.005 at 2,000); width the median half-width as a % of the value.

    .venv/bin/python benchmarks/calibration.py [--trials 400] [--truth-trials 1000] [--seeds 1,2,3] [--ar 0.25,0.5]
        [--ar-sweep] [--sweep-trials 500] [--kinds independent,ar1,drift] [--coverage-only | --slo-only |
        --windows-only] [--json PATH]
    .venv/bin/python benchmarks/calibration.py --gate-only [--gate-trials 200]

Last line per seed: `calibration: seed=S trials=N levels=… <kind>=<coverage per level> … outside=<kind/level:cov,…>
[outside@0.7=…]`, outside meaning out of 0.93–0.97. Without `--coverage-only` the compare family, the interleaved
machine compares and the gate (`gate: …`) are printed before it. `--windows-only` measures the window, repeat,
compare and drift kinds alone (no interleaved compares or SLO steps, most of a level's time).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.token_truth import KINDS, Cell, Noise, window_streams  # noqa: E402
from toolkit.base.schema import COLUMNS, Measurement  # noqa: E402
from toolkit.loadgen.client import StreamResult  # noqa: E402
from toolkit.matrix.control import control_reading  # noqa: E402
from toolkit.method.drift import (  # noqa: E402
    CELL_DRIFT_COLUMNS,
    CellDrift,
    cell_drift,
    cell_drift_columns,
    control_fit,
)
from toolkit.method.gate import Verdict, family_level, paired_interval, verdict  # noqa: E402
from toolkit.method.goodput import ServiceLevel, meeting_fraction  # noqa: E402
from toolkit.method.paired import alternating_order  # noqa: E402
from toolkit.method.spread import Interval  # noqa: E402
from toolkit.method.window import _sub_window_values, summarize_window, window_spread  # noqa: E402
from toolkit.reports.compare import ratio_table  # noqa: E402
from toolkit.reports.compare_drift import MEDIANS, with_round_spreads  # noqa: E402,F401 (ratio_table's, see the tests)
from toolkit.reports.compare_overall import overall_ratios  # noqa: E402
from toolkit.reports.interleaved import Rounds, overall, paired_table  # noqa: E402
from toolkit.results.documents.run_blocks import ControlReading  # noqa: E402
from toolkit.results.rounds import combine  # noqa: E402
from toolkit.results.runs import RUN_COLUMN, RUN_DRIFT  # noqa: E402

QUANTITIES = ("total_tok_s", "per_request_tok_s", "tbt_ms", "ttft_ms")
RATIOS = {"ratio": "total_tok_s", "ratio_per_request": "per_request_tok_s", "ratio_ttft": "ttft_ms"}
INTERVALS = (*QUANTITIES, "repeat", *RATIOS, "repeat_ratio", "drift_ratio", "interleaved", "interleaved_overall",
             "slo_fraction")  # fmt: skip
SHOWN_ONLY = ("drift_plain",)  # printed in the table for contrast, not an interval the toolkit shows
BAND = (0.93, 0.97)
STATED_BATCHES = 3  # the AR(1) levels' correlation is stated between 3 batches of a window, whatever the interval uses
SWEEP = (0.1, 0.25, 0.4, 0.55, 0.7)  # between-batch correlations of --ar-sweep
RUN_SPAN_S = 600.0  # a run's span, for the control readings' start times
CONTROL = Cell(streams=1, window_s=2.0)
INTERLEAVED_CELL = Cell(window_s=2.0)
INTERLEAVED_ROUNDS, INTERLEAVED_CELLS = 4, 2
GOAL_KINDS = ("independent", "ar1", "drift")
ROUNDS = 3
MATRIX_CELLS = 12
COMPARES = 40
GATE_LIMIT, GATE_ROUNDS, GATE_CELLS = 0.03, 4, 4
SLO_LEVEL = ServiceLevel(ttft_ms=1.0)  # the SLO steps' level: TTFT alone, 1 ms, the default target
SLO_TARGET = SLO_LEVEL.target  # 0.99
SLO_DRIFT = 0.3  # the `drift` kind's SLO steps: the latent latency's mean moves this many sds across the step


def _stamp(at_s: float) -> str:
    return datetime.fromtimestamp(at_s, UTC).isoformat()


def record(results: list[StreamResult], window_s: float, key: int = 1, round_: int | None = None,
           at_s: float = 0.0) -> Measurement:  # fmt: skip
    """One window as a run records it (toolkit.matrix.verdict.judge_window's fields): each quantity, its 95 %
    half-width from `window_spread`, the window's batches and their dof, its round and start time."""
    summary, spread = summarize_window(results, 0.0, window_s), window_spread(results, 0.0, window_s)
    half = lambda i: None if i is None else i.half_width  # noqa: E731
    ttft_low, ttft_high = spread.ttft_ms.bounds if spread.ttft_ms else (None, None)
    return Measurement(
        phase="decode", context_tokens=1024, context="1K", concurrency=key, status="Valid",
        total_tok_s=summary.total_tok_s, per_request_tok_s=summary.per_request_tok_s, ttft_ms=summary.ttft_ms,
        tbt_ms=summary.tbt_ms, total_tok_s_ci=half(spread.total_tok_s),
        per_request_tok_s_ci=half(spread.per_request_tok_s), tbt_ms_ci=half(spread.tbt_ms),
        ttft_ms_ci=half(spread.ttft_ms), ttft_ms_low=ttft_low, ttft_ms_high=ttft_high, sub_windows=spread.sub_windows,
        window_dof=spread.dof, round=round_, started_at=_stamp(at_s),
    )  # fmt: skip


def runs_frame(runs: dict[str, Sequence[tuple[Measurement, CellDrift | None]]], drift: float | None = None
               ) -> pd.DataFrame:  # fmt: skip
    """Runs as `toolkit.results.runs.load_runs` lays them out: the run label, the schema's columns, the run's
    drift and each cell's place on its run's control line."""
    rows = [{RUN_COLUMN: label, **m.to_dict(), RUN_DRIFT: drift, **cell_drift_columns(place)}
            for label, cells in runs.items() for m, place in cells]  # fmt: skip
    return pd.DataFrame(rows, columns=[RUN_COLUMN, *COLUMNS, RUN_DRIFT, *CELL_DRIFT_COLUMNS])


def compare_table(a: Sequence[Measurement], b: Sequence[Measurement]) -> pd.DataFrame:
    """compare's ratio table of two runs whose cells are matched by their keys (no control lines)."""
    return ratio_table(runs_frame({"A": [(m, None) for m in a], "B": [(m, None) for m in b]}), "A", "B")


def _holds(value: Any, half_width: Any, true: float) -> bool | None:
    if value is None or half_width is None or not math.isfinite(value) or not math.isfinite(half_width):
        return None
    return abs(value - true) <= half_width


class Tally:
    """Per kind: whether each trial's interval held the truth, and its relative half-width."""

    def __init__(self) -> None:
        self.hits: dict[str, list[bool]] = {k: [] for k in (*INTERVALS, *SHOWN_ONLY)}
        self.widths: dict[str, list[float]] = {k: [] for k in (*INTERVALS, *SHOWN_ONLY)}

    def add(self, kind: str, value: Any, half_width: Any, true: float) -> None:
        held = _holds(value, half_width, true)
        if held is not None:
            self.hits[kind].append(held)
            self.widths[kind].append(abs(half_width / value) if value else math.inf)

    def ends(self, kind: str, value: Any, low: Any, high: Any, true: float) -> None:
        """An interval shown by its own ends `[low, high]` (a median's order statistics)."""
        if value and low is not None and high is not None:
            self.hits[kind].append(low <= true <= high)
            self.widths[kind].append((high - low) / 2 / abs(value))

    def table(self, kind: str, frame: pd.DataFrame, q: str) -> None:
        """A table's ratios of `q`, each judged as its cell shows it (`compare._ratio_interval_text`): ± its
        half-width, or a median's (TTFT's) by its bounds `[low, high]` (`Interval.bounds`, log scale)."""
        for r, hw in zip(frame[f"{q}_ratio"], frame[f"{q}_ratio_hw"], strict=True):
            if q not in MEDIANS:
                self.add(kind, float(r), float(hw), 1.0)
            elif math.isfinite(r) and math.isfinite(hw) and r > 0:
                low, high = Interval(float(r), float(hw), log_scale=True).bounds
                self.hits[kind].append(low <= 1.0 <= high)
                self.widths[kind].append(hw / r)

    def rows(self) -> dict[str, tuple[float, float, int]]:
        out = {}
        for k, h in self.hits.items():
            width = statistics.median(self.widths[k]) if self.widths[k] else math.nan
            out[k] = (sum(h) / len(h) if h else math.nan, width, len(h))
        return out


def truth(noise: Noise, cell: Cell, trials: int, rng: random.Random) -> dict[str, float]:
    """Each quantity's mean over `trials` windows."""
    found = [record(window_streams(noise, cell, rng), cell.window_s) for _ in range(trials)]
    return {q: statistics.fmean(v for m in found if (v := getattr(m, q)) is not None) for q in QUANTITIES}


def batch_correlation(windows: Sequence[list[StreamResult]], window_s: float) -> float:
    """The correlation between consecutive batch total tok/s of STATED_BATCHES batches (the 3 the window interval
    used when the levels were defined; fixed, so that a level stays the same generator), pooled over the windows
    (each window's batches from `toolkit.method.window._sub_window_values`)."""
    values = np.array([_sub_window_values(w, 0.0, window_s, STATED_BATCHES)[0] for w in windows])
    centred = values - values.mean()
    lagged = np.mean(centred[:, :-1] * centred[:, 1:])
    return float(lagged / np.mean(centred**2))


def window_coverage(noise: Noise, cell: Cell, trials: int, true: dict[str, float], rng: random.Random,
                    tally: Tally) -> float:  # fmt: skip
    """The window, repeat and compare kinds on 3 × `trials` windows; returns their between-batch correlation
    (measured on the first 1,000)."""
    streams, records = [], []
    for i in range(ROUNDS * trials):
        results = window_streams(noise, cell, rng)
        if i < 1000:
            streams.append(results)
        records.append(record(results, cell.window_s, key=1 + i // ROUNDS, round_=1 + i % ROUNDS,
                              at_s=60.0 * i))  # fmt: skip
    for m in records:
        for q in QUANTITIES:
            if q == "ttft_ms" and m.ttft_ms_low is not None:  # a report shows the median's interval by its ends
                tally.ends(q, m.ttft_ms, m.ttft_ms_low, m.ttft_ms_high, true[q])
            else:
                tally.add(q, getattr(m, q), getattr(m, f"{q}_ci"), true[q])
    singles_a = [replace(m, concurrency=j + 1) for j, m in enumerate(records[0::2])]
    singles_b = [replace(m, concurrency=j + 1) for j, m in enumerate(records[1::2])]
    n = min(len(singles_a), len(singles_b))
    table = compare_table(singles_a[:n], singles_b[:n])
    for kind, q in RATIOS.items():
        tally.table(kind, table, q)
    order = list(range(len(records)))
    rng.shuffle(order)
    partitions = [records, [records[i] for i in order]]
    combined: list[list[Measurement]] = []
    for part in partitions:
        triples = [[replace(m, round=r + 1) for r, m in enumerate(part[i : i + ROUNDS])]
                   for i in range(0, len(part) - ROUNDS + 1, ROUNDS)]  # fmt: skip
        combined.append([combine(t) for t in triples])
    for m in combined[0]:
        tally.add("repeat", m.total_tok_s, m.total_tok_s_repeat_ci, true["total_tok_s"])
    sides: tuple[list[Measurement], list[Measurement]] = ([], [])
    for p, part in enumerate(combined):
        for j in range(len(part) // 2):
            key = p * len(records) + j + 1
            sides[0].append(replace(part[2 * j], concurrency=key))
            sides[1].append(replace(part[2 * j + 1], concurrency=key))
    tally.table("repeat_ratio", compare_table(*sides)[["total_tok_s_ratio", "total_tok_s_ratio_hw"]], "total_tok_s")
    return batch_correlation(streams, cell.window_s)


def _control(noise: Noise, speed: float, at_s: float, round_: int, rng: random.Random) -> ControlReading:
    """One control reading as run.json keeps it."""
    m = record(window_streams(noise, replace(CONTROL, speed=speed), rng), CONTROL.window_s, round_=round_ or None,
               at_s=at_s)  # fmt: skip
    return control_reading(m)


def drift_coverage(noise: Noise, cell: Cell, trials: int, machine_drift: float, rng: random.Random,
                   tally: Tally) -> None:  # fmt: skip
    """`drift_ratio` (and `drift_plain`): `trials` cells, each compared across two back-to-back runs on a drifting
    machine, in one ratio table (each cell its own pair of runs)."""
    runs: dict[str, list[tuple[Measurement, CellDrift | None]]] = {"A": [], "B": []}
    for i in range(trials):
        slope = rng.gauss(0.0, machine_drift)  # the log change of the machine's speed over one run's span
        at = rng.random()  # where in each run the cell is measured
        for run, label in enumerate("AB"):
            base = (2 * i + run) * RUN_SPAN_S
            readings = [_control(noise, math.exp(slope * (run + k / ROUNDS)), base + k / ROUNDS * RUN_SPAN_S, k, rng)
                        for k in range(ROUNDS + 1)]  # fmt: skip
            line = control_fit(readings)
            results = window_streams(noise, replace(cell, speed=math.exp(slope * (run + at))), rng)
            m = record(results, cell.window_s, key=i + 1, at_s=base + at * RUN_SPAN_S)
            runs[label].append((m, cell_drift(line, m.started_at)))
    table = ratio_table(runs_frame(runs), "A", "B", ["total_tok_s"])
    tally.table("drift_ratio", table, "total_tok_s")
    plain = {k: [(m, None) for m, _ in v] for k, v in runs.items()}
    tally.table("drift_plain", ratio_table(runs_frame(plain), "A", "B", ["total_tok_s"]), "total_tok_s")


CARRIED = ("phase", "context_tokens", "context", "concurrency", "status", "disturbed", "sub_windows", "window_dof")
ROUND_COLUMNS = (*CARRIED, *RATIOS.values(), *(f"{q}_ci" for q in RATIOS.values()))  # a round's own intervals too


def interleaved_rounds(
    noise: Noise, rng: random.Random, faster: float, rounds: int, cells: int, drift_sd: float, cell: Cell,
    first_key: int = 1,
) -> tuple[Rounds, Rounds]:  # fmt: skip
    """Two sides measured in alternating rounds on a machine whose speed takes a random walk of `drift_sd` a run,
    each round a results frame of `cells` decode cells (the columns `paired_table` and `overall` read) as
    `toolkit interleave` leaves it; B is `faster` × A."""
    speed, frames = 1.0, (dict[int, pd.DataFrame](), dict[int, pd.DataFrame]())
    for round_, side in alternating_order(rounds):
        speeds = replace(cell, speed=speed * (faster if side == "B" else 1.0))
        found = [record(window_streams(noise, speeds, rng), cell.window_s, key=first_key + c) for c in range(cells)]
        frames[side == "B"][round_] = pd.DataFrame([{c: getattr(m, c) for c in ROUND_COLUMNS} for m in found])
        speed *= math.exp(rng.gauss(0.0, drift_sd))
    return frames


def interleaved_coverage(noise: Noise, trials: int, drift_sd: float, rng: random.Random, tally: Tally) -> None:
    """`interleaved` (each cell's paired ratio, one `paired_table` over every compare's cells, each cell its own
    key) and `interleaved_overall` (`overall` of each compare) over `trials` A/A interleaved compares."""
    compares = []
    for j in range(trials):
        a, b = interleaved_rounds(noise, rng, 1.0, INTERLEAVED_ROUNDS, INTERLEAVED_CELLS, drift_sd, INTERLEAVED_CELL,
                                  first_key=1 + j * INTERLEAVED_CELLS)  # fmt: skip
        compares.append((a, b))
        if (whole := overall(a, b).get("total_tok_s")) is not None:
            tally.add("interleaved_overall", whole[0], whole[1], 1.0)
    every = [{r: pd.concat([c[side][r] for c in compares], ignore_index=True) for r in compares[0][side]}
             for side in (0, 1)]  # fmt: skip
    tally.table("interleaved", paired_table(every[0], every[1]), "total_tok_s")


def _ar1_latent(rng: np.random.Generator, steps: int, n: int, phi: float) -> np.ndarray:
    """Standard normal latent values of `n` requests per step, an AR(1) with `phi` between neighbours."""
    z = np.empty((steps, n))
    z[:, 0] = rng.standard_normal(steps)
    scale = math.sqrt(1 - phi * phi)
    for i in range(1, n):
        z[:, i] = phi * z[:, i - 1] + scale * rng.standard_normal(steps)
    return z


def _threshold() -> float:
    from scipy.special import ndtri

    return float(ndtri(SLO_TARGET))


def slo_batch_correlation(met: np.ndarray) -> float:
    """Correlation between consecutive batches' fractions (`batch_fraction`'s batches), pooled over the steps."""
    from toolkit.method.slo_fraction import SLO_BATCHES

    n = met.shape[1]
    bounds = [round(i * n / SLO_BATCHES) for i in range(SLO_BATCHES + 1)]
    shares = np.stack([met[:, a:b].mean(axis=1) for a, b in pairwise(bounds)], axis=1)
    centred = shares - shares.mean()
    variance = float(np.mean(centred**2))
    return float(np.mean(centred[:, :-1] * centred[:, 1:])) / variance if variance else math.nan


def slo_steps(rng: np.random.Generator, steps: int, n: int, phi: float, drift: float) -> tuple[np.ndarray, float]:
    """Each request's latency over its limit per step (the latent AR(1) cut at the target's quantile, on the
    exponential scale: met when at most 1), and the true fraction (the mean of the requests' probabilities)."""
    from scipy.special import ndtr

    shift = drift * (np.arange(n) / max(1, n - 1) - 0.5)
    margins = np.exp(_ar1_latent(rng, steps, n, phi) + shift - _threshold())
    return margins, float(np.mean(ndtr(_threshold() - shift)))


def step_latencies(margins: np.ndarray) -> pd.DataFrame:
    """One step's requests as `request_latencies` gives them: all completed, TTFT (from the scheduled arrival)
    the margin times SLO_LEVEL's limit."""
    assert SLO_LEVEL.ttft_ms is not None
    return pd.DataFrame({"ok": True, "ttft_sched_ms": margins * SLO_LEVEL.ttft_ms})


def slo_coverage(rng: np.random.Generator, steps: int, n: int, phi: float, drift: float, tally: Tally) -> float:
    """`slo_fraction` over `steps` steps of `n` requests, by `meeting_fraction` as `summarize_step` calls it;
    returns the steps' between-batch correlation."""
    margins, true = slo_steps(rng, steps, n, phi, drift)
    for row in margins:
        found = meeting_fraction(step_latencies(row), SLO_LEVEL)
        share = found.met / found.counted
        tally.hits["slo_fraction"].append(found.low <= true <= found.high)
        tally.widths["slo_fraction"].append(max(share - found.low, found.high - share) / share if share else math.inf)
    return slo_batch_correlation(margins <= 1)


def rho_map(seed: int = 0, windows: int = 600) -> list[tuple[float, float]]:
    """(generator ρ per tenth of a window, measured correlation between consecutive batches) on ar1 windows."""
    rng, out = random.Random(seed), []
    for rho in (0.3, 0.5, 0.7, 0.8, 0.88, 0.93, 0.96, 0.98):
        cell = Cell()
        found = [window_streams(Noise("ar1", rho=rho), cell, rng) for _ in range(windows)]
        out.append((rho, batch_correlation(found, cell.window_s)))
    return out


def phi_map(n: int, seed: int = 0, steps: int = 2000) -> list[tuple[float, float]]:
    """(AR(1) φ between neighbouring requests, measured correlation between consecutive `batch_fraction` batches)."""
    rng, out = np.random.default_rng(seed), []
    for phi in (0.0, 0.5, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 0.998, 0.999):
        out.append((phi, slo_batch_correlation(slo_steps(rng, steps, n, phi, 0.0)[0] <= 1)))
    return out


def invert(mapping: Sequence[tuple[float, float]], target: float) -> float:
    """The parameter whose measured correlation is `target`, by linear interpolation of the (monotone) map."""
    params = np.array([p for p, _ in mapping])
    measured = np.maximum.accumulate(np.array([c for _, c in mapping]))
    return float(np.interp(target, measured, params))


def compare_family(noise: Noise, a: Cell, b: Cell, rng: random.Random) -> tuple[bool, bool, float]:
    """One compare of two matrices of MATRIX_CELLS cells by `ratio_table` and `overall_ratios`: (any cell marked,
    the overall total tok/s ratio leaves out 1, share of tests marked)."""
    first = [record(window_streams(noise, a, rng), a.window_s, key=i + 1) for i in range(MATRIX_CELLS)]
    second = [record(window_streams(noise, b, rng), b.window_s, key=i + 1) for i in range(MATRIX_CELLS)]
    table = compare_table(first, second)
    flags = [bool(f) for q in RATIOS.values() for f in table[f"{q}_significant"] if f is not None]
    whole = overall_ratios(table).get("total_tok_s")
    detected = whole is not None and abs(whole.value - 1) > whole.half_width
    return any(flags), detected, sum(flags) / len(flags) if flags else math.nan


def machine_compare(
    rng: random.Random, faster: float, rounds: int, drift_sd: float, window_s: float = 5.0
) -> tuple[tuple[bool, bool], tuple[bool, bool]]:
    """Two 12-cell matrices compared on a machine whose speed takes a random walk between runs (`drift_sd` a run):
    (plain: round 1's A and B by `ratio_table`; interleaved: `rounds` rounds A B B A … by `paired_table` and
    `overall`), each as (any total tok/s cell marked, the overall total tok/s ratio leaves out 1). B is `faster`
    times A's speed."""
    a, b = interleaved_rounds(Noise("lockstep"), rng, faster, rounds, MATRIX_CELLS, drift_sd, Cell(window_s=window_s))
    records = [[Measurement.from_dict(row) for row in side[1].to_dict("records")] for side in (a, b)]
    plain = compare_table(*records)
    plain_whole = overall_ratios(plain, ["total_tok_s"]).get("total_tok_s")
    paired = paired_table(a, b)
    whole = overall(a, b).get("total_tok_s")
    return (
        (any(bool(f) for f in plain["total_tok_s_significant"] if f is not None),
         plain_whole is not None and abs(plain_whole.value - 1) > plain_whole.half_width),
        (any(bool(f) for f in paired["total_tok_s_significant"] if f is not None),
         whole is not None and abs(whole[0] - 1) > whole[1]),
    )  # fmt: skip


def measure_total(noise: Noise, cell: Cell, rng: random.Random) -> float | None:
    return record(window_streams(noise, cell, rng), cell.window_s).total_tok_s


def gate_trial(noise: Noise, rng: random.Random, truth: float, drift_sd: float, window_s: float = 5.0) -> Verdict:
    """One gate of total tok/s (GATE_LIMIT) over GATE_ROUNDS interleaved rounds of GATE_CELLS cells, B at `truth`
    times A's speed, the machine's speed a random walk of `drift_sd` a run, as `vllm-speedtest gate` judges it."""
    speed, rounds_a, rounds_b = 1.0, list[float](), list[float]()
    for _round, side in alternating_order(GATE_ROUNDS):
        cell = Cell(window_s=window_s, speed=speed * (truth if side == "B" else 1.0))
        totals = [measure_total(noise, cell, rng) for _ in range(GATE_CELLS)]
        mean = math.exp(statistics.fmean(math.log(t) for t in totals if t))
        (rounds_b if side == "B" else rounds_a).append(mean)
        speed *= math.exp(rng.gauss(0.0, drift_sd))
    interval = paired_interval(rounds_a, rounds_b, family_level(1))
    return Verdict.INCONCLUSIVE if interval is None else verdict(interval, GATE_LIMIT, True)


def gate_rates(kinds: list[str], trials: int, drift_sd: float, rng: random.Random) -> dict[str, dict[str, float]]:
    """Per kind: the shares of fail and pass with the truth on the limit, and with no change."""
    out = {}
    for kind in kinds:
        at_limit = [gate_trial(Noise(kind), rng, 1 - GATE_LIMIT, drift_sd) for _ in range(trials)]
        unchanged = [gate_trial(Noise(kind), rng, 1.0, drift_sd) for _ in range(trials)]
        out[kind] = {"at_limit_fail": at_limit.count(Verdict.FAIL) / trials,
                     "at_limit_pass": at_limit.count(Verdict.PASS) / trials,
                     "no_change_fail": unchanged.count(Verdict.FAIL) / trials,
                     "no_change_pass": unchanged.count(Verdict.PASS) / trials}  # fmt: skip
        print(f"gate {kind}: " + ", ".join(f"{k}={v:.3f}" for k, v in out[kind].items()), flush=True)
    return out


def gate_line(rates: dict[str, dict[str, float]], trials: int, drift_sd: float) -> str:
    names = ("at_limit_fail", "at_limit_pass", "no_change_fail", "no_change_pass")
    parts = [f"{n}={','.join(f'{rates[k][n]:.3f}' for k in rates)}" for n in names]
    return (f"gate: trials={trials} limit={100 * GATE_LIMIT:g}% rounds={GATE_ROUNDS} cells={GATE_CELLS} "
            f"machine_drift={100 * drift_sd:g}% kinds={','.join(rates)} {' '.join(parts)}")  # fmt: skip


def level_names(kinds: Sequence[str], ar: Sequence[float]) -> list[str]:
    """`ar1` becomes one level per between-batch correlation: `ar1@0.25`."""
    return [n for k in kinds for n in ([f"ar1@{c:g}" for c in ar] if k == "ar1" else [k])]


def run_level(name: str, trials: int, args: argparse.Namespace, maps: dict[str, list[tuple[float, float]]],
              rng: random.Random, nprng: np.random.Generator) -> dict[str, Any]:  # fmt: skip
    """Every kind's coverage at one noise level."""
    kind, target = level_target(name)
    phi = invert(maps["phi"], target) if target is not None and maps["phi"] else 0.0
    tally = Tally()
    windows = {} if args.slo_only else window_level(name, trials, args, maps, rng, tally)
    slo_measured = math.nan
    if not args.windows_only:
        slo_measured = slo_coverage(nprng, trials, args.slo_requests, phi, SLO_DRIFT if kind == "drift" else 0.0, tally)
        print(f"{name}: SLO phi={phi:.4f}, between-batch r={slo_measured:.3f}", flush=True)
    rows = tally.rows()
    return {**windows, "slo_phi": phi, "slo_between_batch_r": slo_measured, "trials": trials,
            "kinds": {k: dict(zip(("coverage", "width", "n"), v, strict=True)) for k, v in rows.items()}}  # fmt: skip


def level_target(name: str) -> tuple[str, float | None]:
    """A level's noise kind and its between-batch correlation (None: not stated): `ar1@0.25` -> (ar1, 0.25)."""
    kind, _, level = name.partition("@")
    return kind, float(level) if level else None


def window_level(name: str, trials: int, args: argparse.Namespace, maps: dict[str, list[tuple[float, float]]],
                 rng: random.Random, tally: Tally) -> dict[str, Any]:  # fmt: skip
    """The window, compare, drift and interleaved kinds at one noise level."""
    kind, target = level_target(name)
    rho = invert(maps["rho"], target) if target is not None else Noise().rho
    noise, cell = Noise(kind, rho=rho), Cell()
    true = truth(noise, cell, args.truth_trials, rng)
    measured = window_coverage(noise, cell, trials, true, rng, tally)
    drift_coverage(noise, cell, trials, args.machine_drift, rng, tally)
    if not args.windows_only:
        interleaved_coverage(noise, trials, args.machine_drift, rng, tally)
    print(f"{name}: generator rho={rho:.3f} per tenth, between-batch r={measured:.3f}; truth "
          + ", ".join(f"{q}={v:.4g}" for q, v in true.items()), flush=True)  # fmt: skip
    return {"rho_per_tenth": rho, "between_batch_r": measured, "truth": true}


def _table(levels: dict[str, dict[str, Any]]) -> str:
    shown = [k for k in (*INTERVALS, *SHOWN_ONLY) if any(v["kinds"][k]["n"] for v in levels.values())]
    lines = [f"{'kind':<20}" + "".join(f"{name:>22}" for name in levels),
             " " * 20 + "".join(f"{'coverage  width     n':>22}" for _ in levels)]  # fmt: skip
    for k in shown:
        cells = "".join(f"{v['kinds'][k]['coverage']:>10.3f}{100 * v['kinds'][k]['width']:>6.1f}%"
                        f"{v['kinds'][k]['n']:>6d}" for v in levels.values())  # fmt: skip
        lines.append(f"{k:<20}{cells}")
    return "\n".join(lines)


def outside(levels: dict[str, dict[str, Any]]) -> list[str]:
    """`kind/level:coverage` for every kind whose coverage falls out of BAND."""
    return [f"{k}/{name}:{c:.3f}" for name, v in levels.items() for k in measured(v)
            if not BAND[0] <= (c := v["kinds"][k]["coverage"]) <= BAND[1]]  # fmt: skip


def measured(level: dict[str, Any]) -> list[str]:
    """The kinds of INTERVALS that had trials at a level (`--slo-only` leaves all but slo_fraction without)."""
    return [k for k in INTERVALS if level["kinds"][k]["n"]]


def calibration_line(seed: int, trials: int, levels: dict[str, dict[str, Any]], sweep: dict[str, dict[str, Any]],
                     extra: str = "") -> str:  # fmt: skip
    cov = lambda k: ",".join(f"{v['kinds'][k]['coverage']:.3f}" for v in levels.values())  # noqa: E731
    kinds = [k for k in INTERVALS if any(k in measured(v) for v in levels.values())]
    parts = [f"{k}={cov(k)}" for k in kinds]
    values = [v["kinds"][k]["coverage"] for v in levels.values() for k in measured(v)]
    r = ",".join(f"{v.get('between_batch_r', math.nan):.2f}" for v in levels.values())
    line = (f"calibration: seed={seed} trials={trials} levels={','.join(levels)} between_batch_r={r} "
            f"{' '.join(parts)} min={min(values):.3f} max={max(values):.3f}{extra} "
            f"outside={','.join(outside(levels)) or 'none'}")  # fmt: skip
    top = {n: v for n, v in sweep.items() if n == f"ar1@{max(SWEEP):g}"}
    if top:
        line += f" outside@{max(SWEEP):g}={','.join(outside(top)) or 'none'}"
    return line


def run_seed(seed: int, args: argparse.Namespace, maps: dict[str, list[tuple[float, float]]]) -> dict[str, Any]:
    rng, nprng = random.Random(seed), np.random.default_rng(seed)
    names = level_names(args.kinds.split(","), [float(x) for x in args.ar.split(",") if x])
    levels = {name: run_level(name, args.trials, args, maps, rng, nprng) for name in names}
    sweep: dict[str, dict[str, Any]] = {}
    if args.ar_sweep:
        for c in SWEEP:
            name = f"ar1@{c:g}"
            sweep[name] = levels[name] if name in levels else run_level(name, args.sweep_trials, args, maps, rng,
                                                                        nprng)  # fmt: skip
        print(f"sweep (seed {seed}): between-batch correlation of ar1 to {max(SWEEP):g}")
        print(_table(sweep))
    print(f"seed {seed}")
    print(_table(levels))
    extra, out = "", {"levels": levels, "sweep": sweep}
    if not args.coverage_only:
        extra = family(rng, args)
        rates = gate_rates([k for k in GOAL_KINDS if k in args.kinds.split(",")], args.gate_trials,
                           args.machine_drift, rng)  # fmt: skip
        print(gate_line(rates, args.gate_trials, args.machine_drift))
        out["gate"] = rates
    out["line"] = calibration_line(seed, args.trials, levels, sweep, extra)
    print(out["line"], flush=True)
    return out


def family(rng: random.Random, args: argparse.Namespace) -> str:
    """The compare family's and the interleaved machine compares' shares (printed); their fields of the line."""
    run = lambda a, b: [compare_family(Noise("independent"), a, b, rng) for _ in range(COMPARES)]  # noqa: E731
    short = Cell(window_s=5.0)
    same, faster = run(short, short), run(short, Cell(window_s=5.0, speed=1.1))
    aa_any = sum(any_ for any_, _, _ in same) / len(same)
    ab_detected = sum(d for _, d, _ in faster) / len(faster)
    ab_cells = statistics.fmean(share for _, _, share in faster)
    print(
        f"family ({COMPARES} compares of {MATRIX_CELLS} cells x 3 quantities, 5 s windows, independent): A/A any "
        f"cell marked {aa_any:.3f}; A/B +10 %: overall ratio detected {ab_detected:.3f}, tests marked {ab_cells:.3f}"
    )
    for drift_sd in (0.0, args.machine_drift):
        aa = [machine_compare(rng, 1.0, 4, drift_sd) for _ in range(COMPARES)]
        ab = [machine_compare(rng, 1.1, 4, drift_sd) for _ in range(COMPARES)]
        share = lambda xs, side, i: sum(x[side][i] for x in xs) / len(xs)  # noqa: E731
        print(f"machine drift {100 * drift_sd:g} % a run ({COMPARES} compares, 12 cells, 5 s windows, lockstep): "
              f"A/A any cell marked plain {share(aa, 0, 0):.3f} interleaved(4 rounds) {share(aa, 1, 0):.3f}, "
              f"overall ratio off 1 plain {share(aa, 0, 1):.3f} interleaved {share(aa, 1, 1):.3f}; "
              f"A/B +10 % overall detected plain {share(ab, 0, 1):.3f} interleaved {share(ab, 1, 1):.3f}, "
              f"any cell marked plain {share(ab, 0, 0):.3f} interleaved {share(ab, 1, 0):.3f}")  # fmt: skip
    return f" aa_any_marked={aa_any:.3f} ab_detected={ab_detected:.3f} ab_cells_marked={ab_cells:.3f}"


def save_results(args: argparse.Namespace, started: float, **parts: Any) -> None:
    """A benchmark's results file (`args.json`): its arguments, the seconds since `started`, and `parts`."""
    document = {"args": {k: str(v) for k, v in vars(args).items()}, "elapsed_s": round(time.monotonic() - started)}
    args.json.write_text(json.dumps(document | parts, indent=1, default=str) + "\n")


def keep_seed(args: argparse.Namespace, started: float, results: dict[str, Any], seed: int,
              entry: dict[str, Any]) -> None:  # fmt: skip
    """One seed's results (with its last `line`) kept and printed, and the file saved so far: a run stopped early
    keeps the seeds it finished."""
    results[str(seed)] = entry
    print(entry["line"], flush=True)
    if args.json:
        save_results(args, started, seeds=results)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--trials", type=int, default=400)
    ap.add_argument("--truth-trials", type=int, default=1000)
    ap.add_argument("--seeds", default="1", help="comma-separated seeds, each a whole calibration")
    ap.add_argument("--seed", type=int, default=None, help="one seed (the same as --seeds S)")
    ap.add_argument("--kinds", default=",".join(GOAL_KINDS), help=f"of {','.join(KINDS)}")
    ap.add_argument("--ar", default="0.25,0.5", help="ar1's correlations between consecutive batches")
    ap.add_argument("--ar-sweep", action="store_true", help=f"also ar1 at {SWEEP} between batches")
    ap.add_argument("--sweep-trials", type=int, default=500, help="trials of a sweep level not in --ar")
    ap.add_argument("--slo-requests", type=int, default=500, help="steady requests of an SLO step")
    ap.add_argument("--machine-drift", type=float, default=0.05, help="sd of the machine's change over a run")
    ap.add_argument("--gate-trials", type=int, default=200, help="gates per kind and truth")
    ap.add_argument("--gate-only", action="store_true", help="only the regression gate's error rates")
    ap.add_argument("--coverage-only", action="store_true", help="no compare family, machine compares or gate")
    ap.add_argument("--slo-only", action="store_true", help="only slo_fraction (implies --coverage-only)")
    ap.add_argument("--windows-only", action="store_true",
                    help="only the window, repeat, compare and drift kinds (implies --coverage-only)")  # fmt: skip
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    args = ap.parse_args(argv)
    seeds = [args.seed] if args.seed is not None else [int(s) for s in args.seeds.split(",")]
    if args.gate_only:
        rng = random.Random(seeds[0])
        gate_kinds = [k for k in GOAL_KINDS if k in args.kinds.split(",")]
        print(gate_line(gate_rates(gate_kinds, args.gate_trials, args.machine_drift, rng), args.gate_trials,
                        args.machine_drift))  # fmt: skip
        return
    if args.slo_only and args.windows_only:
        ap.error("--slo-only and --windows-only exclude each other")
    args.coverage_only |= args.slo_only or args.windows_only
    maps = {"rho": [] if args.slo_only else rho_map(), "phi": [] if args.windows_only else phi_map(args.slo_requests)}
    if maps["rho"]:
        print("map: generator rho per tenth -> between-batch r " + ", ".join(f"{p:g}:{c:.3f}" for p, c in maps["rho"]))
    if maps["phi"]:
        print("map: SLO requests' phi -> between-batch r " + ", ".join(f"{p:g}:{c:.3f}" for p, c in maps["phi"]))
    started, results = time.monotonic(), {}
    for seed in seeds:
        results[str(seed)] = run_seed(seed, args, maps)
        if args.json:  # after every seed: a run stopped early keeps the seeds it finished
            save_results(args, started, maps=maps, seeds=results)


if __name__ == "__main__":
    main()
