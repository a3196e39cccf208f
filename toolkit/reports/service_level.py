"""Service level: per context, the most simultaneous requests whose decode cell meets a TTFT and a speed limit.

Pure: a results DataFrame (schema columns, and a ``run`` column when it holds several runs) in, a boolean
Series or a DataFrame out. A limit given as None is not applied; with no limit at all nothing is judged. A cell
still disturbed after its retries (:mod:`toolkit.method.disturbed`) never meets a limit: its numbers are not usable.
"""

from __future__ import annotations

import pandas as pd

from toolkit.method.disturbed import disturbed_mask
from toolkit.results.runs import RUN_COLUMN

__all__ = ["COLUMNS", "highest_concurrency", "limits_text", "meets"]

COLUMNS: tuple[str, ...] = ("context_tokens", "context", "concurrency", "total_tok_s", "ttft_ms", "per_request_tok_s")


def meets(frame: pd.DataFrame, ttft_ms: float | None = None, per_request_tok_s: float | None = None) -> pd.Series:
    """True for each Valid, undisturbed decode row with ttft_ms <= ``ttft_ms`` and per_request_tok_s >=
    ``per_request_tok_s``.

    A missing limit is not applied; with neither limit every row is False (nothing to meet). A missing
    value fails the limit it would be held to.
    """
    ok = (frame["phase"] == "decode") & (frame["status"] == "Valid") & ~disturbed_mask(frame)
    if ttft_ms is None and per_request_tok_s is None:
        return pd.Series(False, index=frame.index)
    if ttft_ms is not None:
        ok &= pd.to_numeric(frame["ttft_ms"], errors="coerce").le(ttft_ms)
    if per_request_tok_s is not None:
        ok &= pd.to_numeric(frame["per_request_tok_s"], errors="coerce").ge(per_request_tok_s)
    return ok


def highest_concurrency(
    frame: pd.DataFrame, ttft_ms: float | None = None, per_request_tok_s: float | None = None
) -> pd.DataFrame | None:
    """Per decode context (and run): the highest concurrency meeting the limits, with its numbers.

    Columns ``context_tokens, context, concurrency, total_tok_s, ttft_ms, per_request_tok_s`` (after ``run``
    when the frame has one); a context where no cell meets them has missing values. None without limits.
    """
    if ttft_ms is None and per_request_tok_s is None:
        return None
    runs = [RUN_COLUMN] if RUN_COLUMN in frame.columns else []
    keys = [*runs, "context_tokens"]
    decode = frame[frame["phase"] == "decode"]
    contexts = decode[[*keys, "context"]].drop_duplicates(keys)
    if runs:  # runs in their order of appearance, each by context
        contexts = contexts.assign(_run=pd.factorize(contexts[RUN_COLUMN])[0]).sort_values(["_run", "context_tokens"])
    else:
        contexts = contexts.sort_values("context_tokens")
    meeting = decode[meets(decode, ttft_ms, per_request_tok_s)].sort_values("concurrency")
    best = meeting.drop_duplicates(keys, keep="last")[[*keys, *COLUMNS[2:]]]
    table = contexts.merge(best, on=keys, how="left")
    table["concurrency"] = table["concurrency"].astype("Int64")
    return table[[*runs, *COLUMNS]].reset_index(drop=True)


def limits_text(ttft_ms: float | None = None, per_request_tok_s: float | None = None) -> str:
    """``TTFT ≤ 200 ms and ≥ 20 tok/s per request`` (only the limits given)."""
    parts = [f"TTFT ≤ {ttft_ms:,g} ms"] if ttft_ms is not None else []
    parts += [f"≥ {per_request_tok_s:,g} tok/s per request"] if per_request_tok_s is not None else []
    return " and ".join(parts)
