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
    PERCENTILES,
    STEADY_TRIM,
    Figures,
    ServiceLevel,
    StepSummary,
    complete_records,
    percentile_bounds,
    percentile_name,
    percentile_of,
    summarize_requests,
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


def summarize_embedding_step(
    records: pd.DataFrame, level: ServiceLevel, trim: float = STEADY_TRIM, percentiles: Sequence[float] = PERCENTILES
) -> StepSummary:
    """The step's summary from its records alone, as `toolkit.method.goodput.summarize_step` gives a streamed
    step's: counts, request throughput and goodput over all its requests, percentiles and the fraction meeting the
    level over its steady part. `output_tok_s` and the untimed percentiles are 0 and None."""
    shown = sorted({*PERCENTILES, *percentiles})

    def figures(latencies: pd.DataFrame, _steady: pd.Series) -> Figures:
        quantiles: dict[str, float | None] = {}
        for name in (*UNTIMED, *TIMED, "lag"):
            values = None if name in UNTIMED else latencies[f"{name}_ms"]
            for q in shown:
                found = None if values is None else percentile_of(values, q, name != "lag")
                quantiles[f"{name}_{percentile_name(q)}_ms"] = found
        return quantiles, percentile_bounds({n: latencies[f"{n}_ms"] if n in TIMED else [] for n in BOUNDED})

    return summarize_requests(records, embedding_latencies(records), level, trim, figures, output_tokens=0)


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
