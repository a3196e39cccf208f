"""`vllm bench serve`'s result file, read into our per-request records (pure parsing of a local file).

`vllm bench serve --save-result` writes one JSON document per run: its aggregate figures (`median_ttft_ms`,
`output_throughput`, …) and, with `--save-detailed`, one list per quantity with an entry per request (`ttfts`,
`itls`, `latencies`, `start_times`, `queue_times`, `input_lens`, `output_lens`, `errors`). From those lists each
request becomes a row of `RECORD_COLUMNS`: sent at its start time, scheduled `queue_time` before it, its first
token `ttft` after, a chunk at every inter-token gap, its last token `latency` after the send.

Three figure sets come out: the tool's own (`reported`), the same quantities recomputed from its per-request data
by the tool's own definitions (`reproduced`: a check that the records were read right), and ours, which the
caller computes from the records (toolkit.method.goodput.summarize_step).

Every field read is validated first (`VllmBenchResult`: JSON types, finite, in range, toolkit.results.limits), and
the lists against each other (as long, no more requests completed than listed, no request ending before its
first token); a file that fails is refused in one line naming the file, the line and the field.
"""

from __future__ import annotations

import math
from itertools import accumulate
from pathlib import Path
from statistics import median
from typing import Any

import pandas as pd

from toolkit.base.errors import ResultsError
from toolkit.results.limits import (
    MAX_DURATION_S,
    Clock,
    Count,
    FileModel,
    Ms,
    OfferedRate,
    RequestsPerS,
    Seconds,
    Text,
    Tokens,
    TokensPerS,
    Window,
)
from toolkit.results.peers.step import PeerStep, number, records_frame
from toolkit.results.validation import document_where, validated

# our name -> vllm bench serve's key, for the figures it prints
VLLM_REPORTED: dict[str, str] = {
    "output_tok_s": "output_throughput",
    "request_throughput": "request_throughput",
    "ttft_p50_ms": "median_ttft_ms",
    "ttft_p99_ms": "p99_ttft_ms",
    "tpot_p50_ms": "median_tpot_ms",
    "tpot_p99_ms": "p99_tpot_ms",
    "itl_p50_ms": "median_itl_ms",
    "itl_p99_ms": "p99_itl_ms",
    "e2e_p50_ms": "median_e2el_ms",
    "completed": "completed",
    "failed": "failed",
}
VLLM_REQUIRED = ("completed", "output_throughput", "median_ttft_ms")
VLLM_DETAILED = ("ttfts", "itls", "latencies", "start_times", "input_lens", "output_lens", "errors")
FORMAT = "vllm bench serve's --save-result JSON (completed, output_throughput, median_ttft_ms, …)"


class VllmBenchResult(FileModel):
    """The fields of the result file this reads, each a JSON value of its type within its limit."""

    completed: Count
    failed: Count | None = None
    output_throughput: TokensPerS
    request_throughput: RequestsPerS | None = None
    median_ttft_ms: Ms
    p99_ttft_ms: Ms | None = None
    median_tpot_ms: Ms | None = None
    p99_tpot_ms: Ms | None = None
    median_itl_ms: Ms | None = None
    p99_itl_ms: Ms | None = None
    median_e2el_ms: Ms | None = None
    request_rate: OfferedRate | None = None  # None or "inf": all at once
    duration: Window | None = None
    vllm_version: Text | None = None
    version: Text | None = None
    model_id: Text | None = None
    # --save-detailed: one entry per request
    ttfts: list[Seconds] | None = None
    itls: list[list[Seconds]] | None = None
    latencies: list[Seconds] | None = None
    start_times: list[Clock] | None = None  # the client's perf_counter at each send
    queue_times: list[Seconds | None] | None = None
    input_lens: list[Tokens] | None = None
    output_lens: list[Tokens] | None = None
    errors: list[str | None] | None = None  # "" for a request that succeeded


def read(path: Path, document: Any) -> PeerStep | None:
    """The run in `document`, when it is vllm bench serve's; None when it is another tool's."""
    if not (isinstance(document, dict) and all(key in document for key in VLLM_REQUIRED)):
        return None
    return _vllm_bench(path, document, validated(VllmBenchResult, document, document_where(path)))


def _vllm_bench(path: Path, data: dict[str, Any], result: VllmBenchResult) -> PeerStep:
    version = " ".join((result.vllm_version or result.version or "").split())[:40]  # one line, short
    records = _vllm_records(path, result) if all(key in data for key in VLLM_DETAILED) else None
    return PeerStep(
        source=f"vllm bench serve {version}" if version else "vllm bench serve",
        file=path,
        offered_rate=math.inf if result.request_rate is None else result.request_rate,
        records=records,
        reported={ours: number(getattr(result, theirs)) for ours, theirs in VLLM_REPORTED.items()},
        reproduced=_vllm_reproduced(result, records) if records is not None else {},
        model=result.model_id,
        duration_s=result.duration,
    )


def _vllm_records(path: Path, result: VllmBenchResult) -> pd.DataFrame:
    lists = {key: getattr(result, key) for key in VLLM_DETAILED}
    sizes = {key: len(value) if isinstance(value, list) else -1 for key, value in lists.items()}
    if len(set(sizes.values())) != 1 or -1 in sizes.values():
        shown = ", ".join(f"{k} {v if v >= 0 else 'not a list'}" for k, v in sizes.items())
        raise ResultsError(f"{path}: its per-request lists differ in length ({shown}); the file is damaged")
    _check_requests(path, result, sizes["ttfts"])
    saved = result.queue_times
    queue = saved if saved is not None and len(saved) == sizes["ttfts"] else [0.0] * sizes["ttfts"]
    start = min(lists["start_times"], default=0.0)
    rows = []
    for i, (ttft, itl, latency, began, prompt, out, error) in enumerate(zip(*lists.values(), strict=True)):
        sent = began - start
        failed = bool(error) or not out
        first = math.nan if failed else sent + ttft
        chunks = None if failed else list(accumulate(itl, initial=first))
        rows.append({
            "step": 0, "offered_rate": math.nan, "request": i, "scheduled_s": sent - (queue[i] or 0.0),
            "sent_s": sent, "first_token_s": first, "last_token_s": math.nan if failed else sent + latency,
            "chunk_times_s": chunks, "input_tokens": prompt, "output_tokens": out,
            "error": (" ".join(str(error).split()) or "failed without an error text") if failed else None,
        })  # fmt: skip
    return records_frame(rows)


def _check_requests(path: Path, result: VllmBenchResult, count: int) -> None:
    """Per-request lists that agree with each other and with the counts: ResultsError naming the field if not."""
    where = document_where(path)
    if result.completed > count:
        raise ResultsError(f"{where(('completed',))}: completed: {result.completed} is more than the {count} "
                           "requests its lists hold; the file is damaged")  # fmt: skip
    starts = result.start_times or []
    if starts and max(starts) - min(starts) > MAX_DURATION_S:
        raise ResultsError(f"{where(('start_times',))}: start_times: span {max(starts) - min(starts):.3g} s, more "
                           f"than {MAX_DURATION_S:g} s; the file is damaged")  # fmt: skip
    for i, (ttft, latency, error, out) in enumerate(
        zip(result.ttfts or [], result.latencies or [], result.errors or [], result.output_lens or [], strict=True)
    ):
        if not error and out and latency < ttft:
            raise ResultsError(f"{where(('latencies', i))}: latencies[{i}]: {latency:g} s ends before its first "
                               f"token (ttfts[{i}] {ttft:g} s); the file is damaged")  # fmt: skip


def _vllm_reproduced(result: VllmBenchResult, records: pd.DataFrame) -> dict[str, float | None]:
    """vllm bench serve's figures from its per-request lists, by its definitions (vllm/benchmarks/serve.py,
    calculate_metrics): medians over the successful requests; TPOT (latency − TTFT) / (output − 1) for outputs
    over one token; every inter-token gap for ITL; output tokens over the benchmark's whole duration."""
    ok = records[records["error"].isna()]
    ttfts = (ok["first_token_s"] - ok["sent_s"]) * 1e3
    e2es = (ok["last_token_s"] - ok["sent_s"]) * 1e3
    long = ok[ok["output_tokens"] > 1]
    tpots = (long["last_token_s"] - long["first_token_s"]) / (long["output_tokens"] - 1) * 1e3
    itls, errors = result.itls or [], result.errors or []
    gaps = [gap * 1e3 for itl, error in zip(itls, errors, strict=True) if not error for gap in itl]
    duration = result.duration
    return {
        "ttft_p50_ms": float(median(ttfts)) if len(ttfts) else None,
        "tpot_p50_ms": float(median(tpots)) if len(tpots) else None,
        "itl_p50_ms": float(median(gaps)) if gaps else None,
        "e2e_p50_ms": float(median(e2es)) if len(e2es) else None,
        "output_tok_s": float(ok["output_tokens"].sum()) / duration if duration else None,
        "completed": float(len(ok)),
    }
