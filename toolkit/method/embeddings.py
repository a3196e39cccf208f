"""Embeddings steps judged from their per-request records: items and input tokens per second, end-to-end latency
percentiles and goodput against an end-to-end service level (pure).

An embeddings request (toolkit.loadgen.embeddings) streams nothing: its record has no first token, no chunks and
no output tokens, `last_token_s` is when its whole reply was read, `input_tokens` the reply's `usage.prompt_tokens`
and `items` the inputs it carried. It completed when it has no error and a reply time. The step is then summarised
as toolkit.method.goodput summarises a streamed one (the same steady part, fraction bounds, verdict and percentile
bounds), with the TTFT, TPOT and ITL figures None: an embeddings step has none.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from toolkit.method.goodput import (
    BOUNDED,
    HELD_MS,
    PERCENTILES,
    STEADY_TRIM,
    ServiceLevel,
    StepSummary,
    complete_records,
    meeting_fraction,
    meets,
    percentile_bounds,
    percentile_name,
    steady_mask,
    supported,
    verdict,
)

if TYPE_CHECKING:
    import pandas as pd

EMBEDDING_COLUMNS: tuple[str, ...] = ("items",)  # what an embeddings record holds beside `RECORD_COLUMNS`
TIMED: tuple[str, ...] = ("e2e", "e2e_sched")  # the latencies an embeddings request has (and its lag)
UNTIMED: tuple[str, ...] = ("ttft", "tpot", "itl", "ttft_sched")  # those it has not: None in its step's row


def complete_embedding_records(frame: pd.DataFrame) -> pd.DataFrame:
    """`complete_records`, keeping `EMBEDDING_COLUMNS` where the frame has them (an embeddings step's)."""
    kept = {name: frame[name].astype("int64") for name in EMBEDDING_COLUMNS if name in frame.columns}
    return complete_records(frame).assign(**kept)


def is_embeddings(records: pd.DataFrame) -> bool:
    """Whether the records are an embeddings step's (they count the inputs of each request)."""
    return "items" in records.columns


def embedding_latencies(records: pd.DataFrame) -> pd.DataFrame:
    """Per request, as `toolkit.method.goodput.request_latencies` has them: ok (no error, the reply read), e2e in ms
    from the send and from the scheduled arrival, the scheduling lag; TTFT and TPOT NaN (none streamed)."""
    import numpy as np
    import pandas as pd

    ok = records["error"].isna() & records["last_token_s"].notna()
    none = pd.Series(np.nan, index=records.index)
    return pd.DataFrame(
        {
            "ok": ok,
            "ttft_ms": none,
            "tpot_ms": none,
            "e2e_ms": ((records["last_token_s"] - records["sent_s"]) * 1e3).where(ok),
            "ttft_sched_ms": none,
            "e2e_sched_ms": ((records["last_token_s"] - records["scheduled_s"]) * 1e3).where(ok),
            "lag_ms": (records["sent_s"] - records["scheduled_s"]) * 1e3,
        }
    )


def _quantile(values: pd.Series, q: float, check: bool = True) -> float | None:
    found = values.dropna()
    if not len(found) or (check and not supported(q, len(found))):
        return None
    return float(found.quantile(q / 100))


def summarize_embedding_step(
    records: pd.DataFrame, level: ServiceLevel, trim: float = STEADY_TRIM, percentiles: Sequence[float] = PERCENTILES
) -> StepSummary:
    """The step's summary from its records alone, as `toolkit.method.goodput.summarize_step` gives a streamed
    step's: counts, request throughput and goodput over all its requests, percentiles and the fraction meeting the
    level over its steady part. `output_tok_s` and the untimed percentiles are 0 and None."""
    shown = sorted({*PERCENTILES, *percentiles})
    all_latencies = embedding_latencies(records)
    all_met = meets(all_latencies, level)
    steady = steady_mask(records, trim)
    latencies = all_latencies[steady]
    completed, requests = int(all_latencies["ok"].sum()), len(records)
    end = records["last_token_s"].max() if completed else records["sent_s"].max()
    duration = float(end - records["sent_s"].min()) if requests else 0.0
    per_second = lambda count: count / duration if duration > 0 else 0.0  # noqa: E731
    quantiles: dict[str, float | None] = {}
    for name in (*UNTIMED, *TIMED, "lag"):
        for q in shown:
            column = f"{name}_{percentile_name(q)}_ms"
            quantiles[column] = None if name in UNTIMED else _quantile(latencies[f"{name}_ms"], q, name != "lag")
    quantiles["lag_max_ms"] = float(all_latencies["lag_ms"].max()) if requests else None
    bounds = percentile_bounds({name: latencies[f"{name}_ms"] if name in TIMED else [] for name in BOUNDED})
    found = meeting_fraction(latencies, level)
    counted, batches, low, high = found.counted, found.batches, found.low, found.high
    fraction = found.met / counted if counted else 0.0
    return StepSummary(
        offered_rate=float(records["offered_rate"].iloc[0]) if requests else float("nan"),
        scheduled_rate=_rate(records["scheduled_s"]),
        achieved_rate=_rate(records["sent_s"]),
        requests=requests,
        completed=completed,
        failed=requests - completed,
        duration_s=duration,
        request_throughput=per_second(completed),
        output_tok_s=0.0,
        input_tokens=int(records.loc[all_latencies["ok"], "input_tokens"].sum()),
        output_tokens=0,
        goodput=per_second(int(all_met.sum())),
        slo_fraction=fraction,
        slo_met=fraction >= level.target,
        slo_fraction_low=low,
        slo_fraction_high=high,
        slo_fraction_se=None if batches is None else batches[0],
        slo_fraction_dof=None if batches is None else batches[1],
        slo_verdict=verdict(low, high, level.target),
        steady_requests=counted,
        held=int((all_latencies["lag_ms"] > HELD_MS).sum()),
        percentiles=quantiles,
        bounds=bounds,
        slo_fraction_deff=found.deff,
    )


def _rate(times: pd.Series) -> float | None:
    found = times.dropna()
    span = float(found.max() - found.min()) if len(found) > 1 else 0.0
    return (len(found) - 1) / span if span > 0 else None


def embedding_figures(records: pd.DataFrame, summary: StepSummary) -> dict[str, Any]:
    """What an embeddings step reports beside its summary: the inputs of its completed requests (`items`) and
    per second (`items_s`), and their prompt tokens per second (`input_tok_s`), over the step's duration."""
    ok = embedding_latencies(records)["ok"]
    items = int(records.loc[ok, "items"].sum())
    seconds = summary.duration_s
    return {
        "items": items,
        "items_s": items / seconds if seconds > 0 else 0.0,
        "input_tok_s": summary.input_tokens / seconds if seconds > 0 else 0.0,
    }


def judge_embedding_steps(records: pd.DataFrame, level: ServiceLevel, trim: float = STEADY_TRIM) -> pd.DataFrame:
    """Every step of an embeddings sweep (records of all steps, `step` column) judged against `level`, one row per
    step, as `toolkit.method.goodput.judge_steps` judges a streamed sweep's."""
    import pandas as pd

    steps = records.groupby("step")
    return pd.DataFrame([{"step": step, **summarize_embedding_step(group, level, trim).row()} for step, group in steps])
