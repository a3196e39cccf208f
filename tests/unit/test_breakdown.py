"""Where a request's time went (toolkit.method.breakdown): the per-request split, a step's breakdown on its three
bases, the cross-check against the client's clock, the histograms' fallback, and the files' validators."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import pytest

from toolkit.base.errors import RateSweepError, ResultsError
from toolkit.loadgen.open_loop import server_fields
from toolkit.loadgen.server_timing import ServerTiming
from toolkit.matrix.prometheus import histogram_split, parse_metrics
from toolkit.method.breakdown import (
    BREAKDOWN_COLUMNS,
    CLOCK_TOLERANCE_MS,
    CLOCK_TOLERANCE_SHARE,
    breakdown_row,
    mismatch_text,
    request_split,
)
from toolkit.method.goodput import RECORD_COLUMNS
from toolkit.rates.files import records_frame
from toolkit.results.measurement_row import validated_measurement
from toolkit.results.step_row import SweepStep, validated_step


def rec(i: int, sent: float, first: float, last: float, timing: tuple[float, ...] | None = None,
        error: str | None = None) -> dict[str, Any]:  # fmt: skip
    """A record sent at `sent` s, first and last token at `first` and `last`; `timing`: the server's queue, TTFT,
    generation and ITL in ms (the wire as `open_loop.record` computes it)."""
    server = ServerTiming(*timing, tok_s=20.0) if timing else None
    ttft_ms = None if error else (first - sent) * 1e3
    return {"request": i, "scheduled_s": sent, "sent_s": sent, "first_token_s": math.nan if error else first,
            "last_token_s": math.nan if error else last, "chunk_times_s": [first, last], "input_tokens": 10,
            "output_tokens": 0 if error else 4, "error": error, "cached_tokens": None, "note": None,
            **server_fields(server, ttft_ms)}  # fmt: skip


def frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    built = records_frame(records, 0, 10.0)
    assert tuple(built.columns) == RECORD_COLUMNS
    return built


# Client TTFT 50, 80, 60 ms; the server's queue 4, 10, 2, TTFT 30, 40, 50, generation 140, 200, 80, ITL 70, 100, 40:
# the wire 16, 30, 8 ms. Then one request without timing and one that failed (its timing not used).
TIMED = [
    rec(0, 0.0, 0.050, 0.200, (4.0, 30.0, 140.0, 70.0)),
    rec(1, 0.1, 0.180, 0.400, (10.0, 40.0, 200.0, 100.0)),
    rec(2, 0.2, 0.260, 0.350, (2.0, 50.0, 80.0, 40.0)),
]
UNTIMED = rec(3, 0.3, 0.330, 0.500)
FAILED = rec(4, 0.4, 0.0, 0.0, (1.0, 1.0, 1.0, 1.0), error="HTTP 500: boom")
HISTOGRAMS = {"queue": 2.0, "server_ttft": 20.0, "decode": 100.0}
NO_HISTOGRAMS: dict[str, float | None] = {"queue": None, "server_ttft": None, "decode": None, "api_ttft": None}


def test_the_split_of_each_request() -> None:
    split = request_split(frame([*TIMED, UNTIMED, FAILED]))
    assert list(split["ttft_ms"].round(9)[:4]) == [50.0, 80.0, 60.0, 30.0] and math.isnan(split["ttft_ms"][4])
    assert list(split["e2e_ms"].round(9)[:4]) == [200.0, 300.0, 150.0, 200.0]
    assert list(split["wire_ttft_ms"].round(9)[:3]) == [16.0, 30.0, 8.0]
    assert list(split["timed"]) == [True, True, True, False, False]  # the failed one's timing is not used
    assert not split["mismatch"].any()
    assert split["queue_ms"][:3].tolist() == [4.0, 10.0, 2.0]
    assert split[["queue_ms", "decode_ms"]][3:].isna().all(axis=None)


def test_per_request_medians() -> None:
    row = breakdown_row(request_split(frame([*TIMED, UNTIMED, FAILED])), NO_HISTOGRAMS)
    assert list(row) == list(BREAKDOWN_COLUMNS)
    assert row["breakdown_basis"] == "per-request"
    assert (row["queue_p50_ms"], row["server_ttft_p50_ms"], row["decode_p50_ms"], row["server_itl_p50_ms"]) == (
        4.0, 40.0, 140.0, 70.0)  # fmt: skip
    assert row["wire_ttft_p50_ms"] == pytest.approx(16.0, abs=1e-9)
    assert (row["timed_requests"], row["timing_mismatches"]) == (3, 0)
    assert [row[k] for k in ("queue_mean_ms", "server_ttft_mean_ms", "wire_ttft_mean_ms", "decode_mean_ms")] == [
        None] * 4  # fmt: skip


def test_per_request_with_the_histograms_keeps_both() -> None:
    row = breakdown_row(request_split(frame(TIMED)), HISTOGRAMS)
    assert row["breakdown_basis"] == "per-request" and row["queue_p50_ms"] == 4.0
    assert (row["queue_mean_ms"], row["server_ttft_mean_ms"], row["decode_mean_ms"]) == (2.0, 20.0, 100.0)
    assert row["wire_ttft_mean_ms"] == pytest.approx((50 + 80 + 60) / 3 - 2.0 - 20.0)


def test_the_counted_requests_limit_the_medians_not_the_mismatches() -> None:
    late = rec(5, 0.5, 0.550, 0.700, (40.0, 30.0, 100.0, 50.0))  # 70 ms of the server's in a client's 50
    records = frame([*TIMED, late])
    counted = pd.Series([True, False, True, False], index=records.index)
    row = breakdown_row(request_split(records), NO_HISTOGRAMS, counted)
    assert (row["queue_p50_ms"], row["server_ttft_p50_ms"], row["decode_p50_ms"]) == (3.0, 40.0, 110.0)
    assert row["wire_ttft_p50_ms"] == pytest.approx(12.0, abs=1e-9)
    assert (row["timed_requests"], row["timing_mismatches"]) == (2, 1)
    everyone = breakdown_row(request_split(records), NO_HISTOGRAMS)
    assert (everyone["timed_requests"], everyone["timing_mismatches"], everyone["queue_p50_ms"]) == (4, 1, 7.0)


def test_histograms_when_no_reply_carried_timing() -> None:
    records = frame([rec(0, 0.0, 0.050, 0.2), rec(1, 0.1, 0.180, 0.4), UNTIMED, FAILED])
    row = breakdown_row(request_split(records), HISTOGRAMS)
    assert row["breakdown_basis"] == "histograms"
    assert all(row[k] is None for k in BREAKDOWN_COLUMNS if k.endswith("_p50_ms"))
    assert (row["timed_requests"], row["timing_mismatches"]) == (0, 0)
    assert (row["queue_mean_ms"], row["server_ttft_mean_ms"], row["decode_mean_ms"]) == (2.0, 20.0, 100.0)
    assert row["wire_ttft_mean_ms"] == pytest.approx((50 + 80 + 30) / 3 - 2.0 - 20.0)  # the failed one left out


@pytest.mark.parametrize("histograms", [NO_HISTOGRAMS, {}, {"queue": 2.0, "server_ttft": None, "decode": 100.0}])
def test_no_basis_without_either(histograms: dict[str, float | None]) -> None:
    row = breakdown_row(request_split(frame([UNTIMED, FAILED])), histograms)
    assert row["breakdown_basis"] == ""
    assert row["wire_ttft_mean_ms"] is None and row["timed_requests"] == 0 and row["timing_mismatches"] == 0
    assert all(row[k] is None for k in BREAKDOWN_COLUMNS if k.endswith("_p50_ms"))


def test_no_requests_at_all() -> None:
    row = breakdown_row(request_split(frame([])), NO_HISTOGRAMS)
    assert row["breakdown_basis"] == "" and row["timed_requests"] == 0 and row["timing_mismatches"] == 0


# ---- the cross-check --------------------------------------------------------------------------------------------

TTFT_MS, E2E_MS = 50.0, 200.0  # the client's, for every request below
TTFT_ROOM = CLOCK_TOLERANCE_MS + CLOCK_TOLERANCE_SHARE * TTFT_MS  # 1.5 ms
E2E_ROOM = CLOCK_TOLERANCE_MS + CLOCK_TOLERANCE_SHARE * E2E_MS  # 3 ms


def checked(queue: float, ttft: float, generation: float) -> bool:
    """Whether one request (client TTFT 50 ms, end-to-end 200 ms) with this server timing breaks the cross-check."""
    split = request_split(frame([rec(0, 1.0, 1.0 + TTFT_MS / 1e3, 1.0 + E2E_MS / 1e3, (queue, ttft, generation, 1.0))]))
    row = breakdown_row(split, NO_HISTOGRAMS)
    assert row["timing_mismatches"] == int(split["mismatch"].iloc[0])
    return bool(split["mismatch"].iloc[0])


def test_the_server_s_ttft_within_the_client_s_tolerance_is_no_mismatch() -> None:
    assert (TTFT_ROOM, E2E_ROOM) == (1.5, 3.0)
    assert not checked(10.0, TTFT_MS - 10.0, 100.0)  # exactly the client's
    assert not checked(10.0, TTFT_MS - 10.0 + TTFT_ROOM - 0.2, 100.0)
    assert checked(10.0, TTFT_MS - 10.0 + TTFT_ROOM + 0.2, 100.0)
    assert checked(10 * TTFT_MS, TTFT_MS, 100.0)  # a queue 10x the client's TTFT


def test_the_server_s_span_within_the_client_s_tolerance_is_no_mismatch() -> None:
    first = TTFT_MS - 5.0  # the TTFT well inside; the span decides
    assert not checked(5.0, first - 5.0, E2E_MS - first + E2E_ROOM - 0.2)
    assert checked(5.0, first - 5.0, E2E_MS - first + E2E_ROOM + 0.2)


def test_a_request_breaking_both_counts_once_and_partial_timing_never() -> None:
    records = frame([rec(0, 0.0, 0.050, 0.200, (100.0, 100.0, 100.0, 1.0)),
                     rec(1, 0.0, 0.050, 0.200, (math.nan, 100.0, 500.0, 1.0)),
                     rec(2, 0.0, 0.050, 0.200, (100.0, math.nan, 500.0, 1.0))])  # fmt: skip
    split = request_split(records)
    assert list(split["mismatch"]) == [True, False, False] and list(split["timed"]) == [True, False, False]
    assert breakdown_row(split, NO_HISTOGRAMS)["timing_mismatches"] == 1


def test_the_mismatch_line() -> None:
    assert mismatch_text("step 2", {"timing_mismatches": 0}, 12) is None
    assert mismatch_text("step 2", {"timing_mismatches": None}, 12) is None
    text = mismatch_text("step 2", {"timing_mismatches": 3}, 12)
    assert text is not None and "\n" not in text
    assert text.startswith("step 2: 3 of 12 requests' server timing exceeds the client's clock")
    assert "1 ms + 1%" in text


# ---- the histograms' fallback -----------------------------------------------------------------------------------


def scrape(
    queue: tuple[float, int],
    prefill: tuple[float, int],
    decode: tuple[float, int],
    api: tuple[float, int] | None = None,
) -> str:
    """vLLM's /metrics with the three request timing histograms (sum in seconds, count), the API process's TTFT
    histogram when given, and the running gauge."""
    lines = ["# TYPE vllm:num_requests_running gauge", 'vllm:num_requests_running{model_name="m"} 0.0']
    families = [(f"vllm:request_{name}_time_seconds", name, value)
                for name, value in (("queue", queue), ("prefill", prefill), ("decode", decode))]  # fmt: skip
    if api is not None:
        families.append(("vllm:time_to_first_token_seconds", "first token", api))
    for family, name, (total, count) in families:
        lines += [f"# HELP {family} Histogram of time spent in {name} phase for request.",
                  f"# TYPE {family} histogram", f'{family}_bucket{{le="0.3",model_name="m"}} {count}',
                  f'{family}_bucket{{le="+Inf",model_name="m"}} {count}', f'{family}_count{{model_name="m"}} {count}',
                  f'{family}_sum{{model_name="m"}} {total}']  # fmt: skip
    return "\n".join(lines) + "\n"


def test_histogram_split_gives_the_means_of_the_requests_between_two_scrapes_in_ms() -> None:
    before = parse_metrics(scrape((1.0, 10), (2.0, 10), (5.0, 10), api=(4.0, 10)))
    after = parse_metrics(scrape((1.5, 20), (2.6, 20), (9.0, 20), api=(5.2, 20)))
    split = histogram_split(before, after)
    assert split == {"queue": pytest.approx(50.0), "server_ttft": pytest.approx(60.0), "decode": pytest.approx(400.0),
                     "api_ttft": pytest.approx(120.0)}  # fmt: skip
    assert histogram_split(before, before) == NO_HISTOGRAMS  # no request finished
    assert histogram_split(None, after) == histogram_split(before, None) == NO_HISTOGRAMS


def test_histogram_split_without_the_histograms_or_when_they_went_back() -> None:
    bare = parse_metrics('vllm:num_requests_running{model_name="m"} 0.0\n')
    assert histogram_split(bare, bare) == NO_HISTOGRAMS
    before = parse_metrics(scrape((1.0, 10), (2.0, 10), (5.0, 10)))
    restarted = parse_metrics(scrape((0.1, 2), (0.2, 2), (0.5, 2)))  # a server restarted between the two
    assert histogram_split(before, restarted) == NO_HISTOGRAMS


def test_the_histogram_means_make_a_step_s_breakdown() -> None:
    before = parse_metrics(scrape((0.0, 0), (0.0, 0), (0.0, 0)))
    after = parse_metrics(scrape((0.004, 2), (0.040, 2), (0.2, 2)))
    records = frame([rec(0, 0.0, 0.050, 0.2), rec(1, 0.1, 0.180, 0.4)])
    row = breakdown_row(request_split(records), histogram_split(before, after))
    assert row["breakdown_basis"] == "histograms"
    assert (row["queue_mean_ms"], row["server_ttft_mean_ms"], row["decode_mean_ms"]) == pytest.approx((2, 20, 100))
    assert row["wire_ttft_mean_ms"] == pytest.approx(65.0 - 2.0 - 20.0)


# ---- the files' validators --------------------------------------------------------------------------------------


def where(loc: Any) -> str:
    return "steps.jsonl:1"


STEP = {"step": 0, "offered_rate": 5.0, "searched": False, "requests": 10, "slo_fraction": 1.0}


def test_a_step_line_may_hold_a_negative_wire_but_no_negative_part() -> None:
    line = {**STEP, "breakdown_basis": "per-request", "queue_p50_ms": 0.1, "server_ttft_p50_ms": 30.0,
            "wire_ttft_p50_ms": -4.5, "wire_ttft_mean_ms": -2.0, "timing_mismatches": 10, "timed_requests": 10,
            "queue_mean_ms": 0.2, "server_ttft_mean_ms": 31.0, "decode_mean_ms": 90.0}  # fmt: skip
    assert validated_step(line, where, SweepStep).model_extra["wire_ttft_p50_ms"] == -4.5  # type: ignore[index]
    for name in ("queue_p50_ms", "server_ttft_p50_ms", "decode_p50_ms", "queue_mean_ms", "decode_mean_ms"):
        with pytest.raises(RateSweepError, match=rf"^steps\.jsonl:1: {name}: -1\.0 should be"):
            validated_step({**line, name: -1.0}, where, SweepStep)
    for name, value in (("breakdown_basis", "guessed"), ("timing_mismatches", -1), ("timed_requests", 1.5)):
        with pytest.raises(RateSweepError, match=rf"^steps\.jsonl:1: {name}: "):
            validated_step({**line, name: value}, where, SweepStep)
    with pytest.raises(RateSweepError, match=r"wire_ttft_p50_ms"):
        validated_step({**line, "wire_ttft_p50_ms": -1e12}, where, SweepStep)


CELL = {"phase": "decode", "context_tokens": 1024, "context": "1k", "concurrency": 4, "status": "Valid"}


def test_a_results_line_may_hold_a_negative_wire_but_no_negative_queue() -> None:
    line = {**CELL, "breakdown_basis": "per-request", "queue_p50_ms": 0.1, "wire_ttft_p50_ms": -3.0,
            "wire_ttft_mean_ms": -1.0, "timing_mismatches": 4, "timed_requests": 4}  # fmt: skip
    measurement = validated_measurement(line, where)
    assert (measurement.wire_ttft_p50_ms, measurement.queue_p50_ms, measurement.timing_mismatches) == (-3.0, 0.1, 4)
    for name in ("queue_p50_ms", "server_ttft_p50_ms", "decode_p50_ms", "queue_mean_ms"):
        with pytest.raises(ResultsError, match=rf"^steps\.jsonl:1: {name}: "):
            validated_measurement({**line, name: -1.0}, where)
    with pytest.raises(ResultsError, match=r"timing_mismatches"):
        validated_measurement({**line, "timing_mismatches": -1}, where)
