"""Open-loop steps judged from their per-request records: latencies, a service level, goodput (pure).

A rate step stores one record per request (`RECORD_COLUMNS`, times in seconds from the step's start). Everything a
step reports is computed here from those records alone, so a finished sweep can be judged again against another
service level without a server (docs/method/rates.md, Open-loop rates).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from toolkit.method.slo_fraction import batch_fraction, fraction_bounds, verdict

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

# One row per request of a step. `chunk_times_s` holds every content chunk's arrival (a list; a chunk may carry
# more than one token); `first_token_s`/`last_token_s` are NaN and `error` a one-line text when it failed.
# `turn`: the request's turn in its conversation (1 for a single request), `history_tokens` the tokens of the turns
# before it (prompt and reply, as the server counted them), `cached_tokens` the prompt tokens the server reported
# found in its prefix cache (NaN: not reported), `warmup`: kept but left out of the step's summary, `note` why the
# client cut what it kept of the reply (a conversation's history past its byte bound), or why it did not read the
# server's timing (None: nothing to say). `server_*`: the request on the server's own clock (the final chunk's
# `metrics`, toolkit.loadgen.server_timing; NaN: not given), `wire_ttft_ms` the client's TTFT less the server's queue
# and TTFT (toolkit.method.breakdown). `schema_valid`: whether the reply kept to the `response_format` its request
# carried (toolkit.loadgen.structured; None: no format, or the request failed), `schema_problem` why not, with the
# reply's first characters (None: kept to it). `tool_called`: whether the reply's
# stream carried a tool call (None: the request carried no tools, or failed); `tool_args_valid`: whether that first
# call's arguments kept to its function's parameters (toolkit.loadgen.tools; None: no call). `images`: the images
# the request carried (toolkit.loadgen.images; 0: none).
REQUIRED_RECORD_COLUMNS: tuple[str, ...] = (
    "step", "offered_rate", "request", "scheduled_s", "sent_s", "first_token_s", "last_token_s", "chunk_times_s",
    "input_tokens", "output_tokens", "error",
)  # fmt: skip
TIMING_COLUMNS: tuple[str, ...] = ("server_queue_ms", "server_ttft_ms", "server_generation_ms", "server_itl_ms",
                                   "server_tok_s", "wire_ttft_ms")  # fmt: skip
RECORD_DEFAULTS: dict[str, Any] = {"turn": 1, "history_tokens": 0, "cached_tokens": math.nan, "warmup": False,
                                   "note": None, **dict.fromkeys(TIMING_COLUMNS, math.nan),
                                   "schema_valid": None, "schema_problem": None, "tool_called": None,
                                   "tool_args_valid": None, "images": 0}  # fmt: skip
RECORD_COLUMNS: tuple[str, ...] = (*REQUIRED_RECORD_COLUMNS, *RECORD_DEFAULTS)  # older files lack the defaulted ones
CLASS_COLUMN = "class"  # a class sweep's records (toolkit.rates.classes) also hold each request's class name
MODEL_COLUMN = "model"  # a model mix's records (toolkit.rates.model_mix) also hold each request's served model
PERCENTILES: tuple[int, ...] = (50, 90, 99)
# The latencies whose PERCENTILES get 95 % distribution-free bounds (toolkit.method.quantile_bounds), as columns
# `ttft_p99_low_ms`, `ttft_p99_high_ms` (None: no bound at that end; a missing high end is "unbounded").
BOUNDED: tuple[str, ...] = ("ttft", "tpot", "itl", "e2e", "ttft_sched", "e2e_sched")
BOUND_COLUMNS: tuple[str, ...] = tuple(
    f"{name}_p{q:g}_{end}_ms" for name in BOUNDED for q in PERCENTILES for end in ("low", "high")
)
STEADY_TRIM = 0.1  # the first and last 10 % of a step's schedule are its warm-up and cool-down
HELD_MS = 5.0  # a request sent this much after its due time was held by the client (a cap, a late timer)
VERDICTS: tuple[str, ...] = ("meets", "fails", "undecided")


@dataclass(frozen=True)
class ServiceLevel:
    """Limits a request must meet (None: no limit) and the fraction of requests that must meet them."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    target: float = 0.99

    def __post_init__(self) -> None:
        for name in ("ttft_ms", "tpot_ms", "e2e_ms"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name}: {value} is not a positive number of milliseconds")
        if not 0 < self.target <= 1:
            raise ValueError(f"target: {self.target} is not a fraction in (0, 1]")


def complete_records(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with exactly `RECORD_COLUMNS` (and a class sweep's `CLASS_COLUMN`, a model mix's
    `MODEL_COLUMN`): a column an older file (or another tool) lacks gets its default."""
    filled = {
        name: default if name not in frame.columns else frame[name].astype(object).where(frame[name].notna(), default)
        for name, default in RECORD_DEFAULTS.items()
    }
    types = {
        "turn": "int64",
        "history_tokens": "int64",
        "warmup": "bool",
        "cached_tokens": "float64",
        "images": "int64",
        **dict.fromkeys(TIMING_COLUMNS, "float64"),
    }
    kept = [c for c in (CLASS_COLUMN, MODEL_COLUMN) if c in frame.columns]  # a class sweep's, a model mix's
    return frame.assign(**filled)[[*RECORD_COLUMNS, *kept]].astype(types)


def request_latencies(records: pd.DataFrame) -> pd.DataFrame:
    """Per request: ok (no error, a token came), ttft/tpot/e2e in ms from the send, TTFT and end-to-end from the
    scheduled arrival as well (`ttft_sched_ms`, `e2e_sched_ms`: they hold the time the client held the request),
    and the scheduling lag in ms.

    TPOT is (last token - first token) / (output tokens - 1), 0 for a single token, as `vllm bench serve` counts it.
    """
    import pandas as pd

    ok = records["error"].isna() & records["first_token_s"].notna() & (records["output_tokens"] > 0)
    decode_tokens = (records["output_tokens"] - 1).clip(lower=1)
    tpot = ((records["last_token_s"] - records["first_token_s"]) / decode_tokens * 1e3).where(
        records["output_tokens"] > 1, 0.0
    )
    return pd.DataFrame(
        {
            "ok": ok,
            "ttft_ms": ((records["first_token_s"] - records["sent_s"]) * 1e3).where(ok),
            "tpot_ms": tpot.where(ok),
            "e2e_ms": ((records["last_token_s"] - records["sent_s"]) * 1e3).where(ok),
            "ttft_sched_ms": ((records["first_token_s"] - records["scheduled_s"]) * 1e3).where(ok),
            "e2e_sched_ms": ((records["last_token_s"] - records["scheduled_s"]) * 1e3).where(ok),
            "lag_ms": (records["sent_s"] - records["scheduled_s"]) * 1e3,
        }
    )


def limited(level: ServiceLevel) -> list[tuple[str, float]]:
    """The latency columns `level` limits, with their limits in ms. TTFT and end-to-end count from the scheduled
    arrival: a user waits from when the request was due, also while the client held it."""
    limits = (("ttft_sched_ms", level.ttft_ms), ("tpot_ms", level.tpot_ms), ("e2e_sched_ms", level.e2e_ms))
    return [(column, limit) for column, limit in limits if limit is not None]


def meets(latencies: pd.DataFrame, level: ServiceLevel) -> pd.Series:
    """Whether each request met every limit of `level` (a failed request never does)."""
    met = latencies["ok"].copy()
    for column, limit in limited(level):
        met &= latencies[column] <= limit
    return met


def slo_margins(latencies: pd.DataFrame, level: ServiceLevel) -> np.ndarray | None:
    """Each request's largest latency over its limit (met: at most 1; a failed request +inf), the continuous
    series behind `meets`; None when `level` limits no latency."""
    import numpy as np

    limits = limited(level)
    if not limits:
        return None
    ratios = np.column_stack([latencies[column].to_numpy(dtype=float) / limit for column, limit in limits])
    worst = ratios.max(axis=1)
    return np.where(latencies["ok"].to_numpy(dtype=bool) & ~np.isnan(worst), worst, np.inf)


def inter_token_ms(records: pd.DataFrame) -> list[float]:
    """Every gap between consecutive chunks of the successful requests, in ms (ITL as `vllm bench serve` has it)."""
    gaps: list[float] = []
    for times, error in zip(records["chunk_times_s"], records["error"], strict=True):
        if isinstance(error, str) or times is None:
            continue
        values = list(times)
        gaps.extend((b - a) * 1e3 for a, b in pairwise(values))
    return gaps


@dataclass(frozen=True)
class StepSummary:
    """One rate step as a results row: load, throughput, latency percentiles, goodput and the client's lag."""

    offered_rate: float
    scheduled_rate: float | None  # the drawn schedule's own rate: (n - 1) / its span
    achieved_rate: float | None  # the same over the actual send times: below scheduled when the client lagged
    requests: int
    completed: int
    failed: int
    duration_s: float  # first send to last token (or last send)
    request_throughput: float
    output_tok_s: float
    input_tokens: int
    output_tokens: int
    goodput: float  # requests/s that met the service level
    slo_fraction: float  # of all requests
    slo_met: bool  # the fraction reached the target (a point judgement)
    slo_fraction_low: float  # 95 % interval of the fraction meeting the level (`fraction_bounds`)
    slo_fraction_high: float
    slo_fraction_se: float | None  # the fraction's standard error from its batches, and its t degrees of freedom
    slo_fraction_dof: float | None
    slo_fraction_deff: float | None  # its design effect (`meeting_fraction`); None: the level limits no latency
    slo_verdict: str  # "meets": even the interval's low end reaches the target; "fails": its high end does not
    steady_requests: int  # the requests due in the step's steady part, which the percentiles and the fraction cover
    held: int  # requests sent more than HELD_MS after their due time
    percentiles: dict[str, float | None]  # "ttft_p50_ms" ... "lag_max_ms"; None: too few requests for it
    bounds: dict[str, float | None] = field(default_factory=dict)  # BOUND_COLUMNS; None: no bound at that end

    def row(self) -> dict[str, Any]:
        """A flat dict, percentiles and then their bounds as columns."""
        data = asdict(self)
        nested = ("percentiles", "bounds")
        return {**{k: v for k, v in data.items() if k not in nested}, **data["percentiles"], **data["bounds"]}


def supported(q: float, n: int) -> bool:
    """Whether `n` values can give the q-th percentile: above the median, at least one value must lie beyond it
    (p99 needs 100 values; from fewer it is the maximum, not a p99)."""
    return n >= 1 and (q <= 50 or n * (1 - q / 100) >= 1 - 1e-9)


def percentile_of(values: Sequence[float] | pd.Series, q: float, check: bool = True) -> float | None:
    """The `q`th percentile of the values present (None: none, or too few to support it, unless `check` is off)."""
    import pandas as pd

    series = pd.Series(values, dtype=float).dropna()
    if check and not supported(q, len(series)):
        return None
    return float(series.quantile(q / 100)) if len(series) else None


@dataclass(frozen=True)
class SloFraction:
    """The fraction of a step's requests meeting a level: counts, batches' (se, dof), design effect, interval."""

    met: int
    counted: int
    batches: tuple[float, float] | None  # `batch_fraction`; None: too few requests
    deff: float | None  # `toolkit.method.effective_n.design_effect` of `slo_margins`; None: the level limits none
    low: float
    high: float


def meeting_fraction(latencies: pd.DataFrame, level: ServiceLevel) -> SloFraction:
    """The fraction of the requests (`request_latencies`, in schedule order) meeting `level` with its 95 %
    interval (`fraction_bounds` at the effective count from the requests' margins)."""
    from toolkit.method.effective_n import design_effect

    met = [bool(x) for x in meets(latencies, level)]
    k, n = sum(met), len(met)
    batches = batch_fraction(met)
    margins = slo_margins(latencies, level)
    deff = None if margins is None else design_effect(margins, k / n if n else 1.0)
    low, high = fraction_bounds(k, n, [batches] if batches else [], None if deff is None else n / deff)
    return SloFraction(k, n, batches, deff, low, high)


def _rate(times: pd.Series) -> float | None:
    found = times.dropna()
    span = float(found.max() - found.min()) if len(found) > 1 else 0.0
    return (len(found) - 1) / span if span > 0 else None


def steady_mask(records: pd.DataFrame, trim: float = STEADY_TRIM) -> pd.Series:
    """The requests due in the step's steady part: not a warm-up request (a conversation's first turns, a replay's
    first seconds), and not in the first or last `trim` of the rest's schedule span (the ramp from an idle server
    and the drain); every request past the warm-up when the trim leaves none (an all-at-once step)."""
    due = records["scheduled_s"]
    if not len(due):
        return due.astype(bool)
    counted = records["warmup"].ne(True) if "warmup" in records else due.notna() | due.isna()
    if not counted.any():
        return counted
    low, high = float(due[counted].min()), float(due[counted].max())
    margin = trim * (high - low)
    inside = counted & (due >= low + margin) & (due <= high - margin)
    return inside if inside.any() else counted


def percentile_name(q: float) -> str:
    """A percentile's column part: ``p50``, ``p99``, ``p99.9``."""
    return f"p{q:g}"


Figures = tuple[dict[str, float | None], dict[str, float | None]]  # a step's percentiles and their bounds


def summarize_step(
    records: pd.DataFrame,
    level: ServiceLevel,
    trim: float = STEADY_TRIM,
    percentiles: Sequence[float] = PERCENTILES,
) -> StepSummary:
    """The step's row from its records alone: counts, throughput and goodput over all of its requests; latency
    percentiles (`PERCENTILES` and any others given) and the fraction meeting the level (with its interval and
    verdict) over its steady part; `PERCENTILES` of the latencies in `BOUNDED` with their 95 % bounds."""
    shown = sorted({*PERCENTILES, *percentiles})

    def figures(latencies: pd.DataFrame, steady: pd.Series) -> Figures:
        quantiles: dict[str, float | None] = {}
        for name in ("ttft", "tpot", "e2e", "ttft_sched", "e2e_sched", "lag"):
            for q in shown:
                quantiles[f"{name}_{percentile_name(q)}_ms"] = percentile_of(latencies[f"{name}_ms"], q, name != "lag")
        itl = inter_token_ms(records[steady])
        for q in shown:
            quantiles[f"itl_{percentile_name(q)}_ms"] = percentile_of(itl, q)
        return quantiles, percentile_bounds({n: itl if n == "itl" else latencies[f"{n}_ms"] for n in BOUNDED})

    all_latencies = request_latencies(records)
    out_tokens = int(records.loc[all_latencies["ok"], "output_tokens"].sum())
    return summarize_requests(records, all_latencies, level, trim, figures, out_tokens)


def summarize_requests(
    records: pd.DataFrame,
    all_latencies: pd.DataFrame,
    level: ServiceLevel,
    trim: float,
    figures: Callable[[pd.DataFrame, pd.Series], Figures],
    output_tokens: int,
) -> StepSummary:
    """What every kind of request's step summary shares, from its records and per-request latencies (`ok`, the
    `*_ms` columns, `lag_ms`): counts, throughput and goodput over all requests; over the steady part, the
    fraction meeting `level` and `figures(steady latencies, steady mask)`, the percentiles and their bounds."""
    all_met = meets(all_latencies, level)
    steady = steady_mask(records, trim)
    latencies = all_latencies[steady]
    completed, requests = int(all_latencies["ok"].sum()), len(records)
    end = records["last_token_s"].max() if completed else records["sent_s"].max()
    duration = float(end - records["sent_s"].min()) if requests else 0.0
    per_second = lambda count: count / duration if duration > 0 else 0.0  # noqa: E731
    quantiles, bounds = figures(latencies, steady)
    quantiles["lag_max_ms"] = float(all_latencies["lag_ms"].max()) if requests else None
    found = meeting_fraction(latencies, level)
    counted, batches, low, high = found.counted, found.batches, found.low, found.high
    fraction = found.met / counted if counted else 0.0
    offered = records["offered_rate"].iloc[0] if requests else math.nan
    return StepSummary(
        offered_rate=float(offered),
        scheduled_rate=_rate(records["scheduled_s"]),
        achieved_rate=_rate(records["sent_s"]),
        requests=requests,
        completed=completed,
        failed=requests - completed,
        duration_s=duration,
        request_throughput=per_second(completed),
        output_tok_s=per_second(output_tokens),
        input_tokens=int(records.loc[all_latencies["ok"], "input_tokens"].sum()),
        output_tokens=output_tokens,
        goodput=per_second(int(all_met.sum())),
        slo_fraction=fraction,
        slo_met=fraction >= level.target,
        slo_fraction_low=low,
        slo_fraction_high=high,
        slo_fraction_se=None if batches is None else batches[0],
        slo_fraction_dof=None if batches is None else batches[1],
        slo_fraction_deff=found.deff,
        slo_verdict=verdict(low, high, level.target),
        steady_requests=counted,
        held=int((all_latencies["lag_ms"] > HELD_MS).sum()),
        percentiles=quantiles,
        bounds=bounds,
    )


def percentile_bounds(samples: dict[str, Sequence[float] | pd.Series]) -> dict[str, float | None]:
    """The 95 % distribution-free bounds of every `PERCENTILES` of each named sample, as `BOUND_COLUMNS` (ITL's
    gaps are counted as independent values, though a request's gaps are not: its bounds are too narrow)."""
    import numpy as np

    from toolkit.method.quantile_bounds import quantile_bounds

    out: dict[str, float | None] = {}
    for name, values in samples.items():
        data = np.asarray(values, dtype=float)  # once: a step's gaps may be a million
        for q in PERCENTILES:
            found, column = quantile_bounds(data, q), f"{name}_{percentile_name(q)}"
            out[f"{column}_low_ms"], out[f"{column}_high_ms"] = found.low, found.high
    return out


def judge_steps(records: pd.DataFrame, level: ServiceLevel, trim: float = STEADY_TRIM) -> pd.DataFrame:
    """Every step of a sweep (records of all steps, `step` column) judged against `level`: one row per step."""
    import pandas as pd

    rows = [{"step": step, **summarize_step(group, level, trim).row()} for step, group in records.groupby("step")]
    return pd.DataFrame(rows)


def highest_rate_meeting(steps: Sequence[tuple[float, bool]]) -> tuple[float | None, float | None]:
    """From (offered rate, met) pairs: the highest rate that met the level below every rate that failed it, and the
    lowest failing rate above it (None where there is none): the bracket a search narrows."""
    failing = sorted(rate for rate, met in steps if not met)
    first_fail = failing[0] if failing else None
    passing = [rate for rate, met in steps if met and (first_fail is None or rate < first_fail)]
    return (max(passing) if passing else None), first_fail
