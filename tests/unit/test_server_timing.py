"""A stream's per-request server timing: vLLM's `metrics` object on the final usage chunk, read into a
`ServerTiming`, carried by the SSE path into `StreamResult`, and into a record's `server_*` and `wire_ttft_ms`."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

import orjson
import pytest

from toolkit.base.errors import ReplyError
from toolkit.loadgen.open_loop import REQUEST_FIELDS, PlannedRequest, record, server_fields
from toolkit.loadgen.server_timing import MAX_SERVER_MS, SERVER_FIELDS, ServerTiming, read_server_timing
from toolkit.loadgen.stream_events import StreamAccount, StreamResult

# As vLLM 0.32 writes it with --enable-per-request-metrics.
VLLM_METRICS = {"time_to_first_token_ms": 16.77, "generation_time_ms": 19.81, "queue_time_ms": 0.04,
                "mean_itl_ms": 4.95, "tokens_per_second": 136.7}  # fmt: skip
VLLM_TIMING = ServerTiming(queue_ms=0.04, ttft_ms=16.77, generation_ms=19.81, itl_ms=4.95, tok_s=136.7)


def test_vllm_s_object_is_read_whole() -> None:
    assert read_server_timing(VLLM_METRICS) == VLLM_TIMING
    assert VLLM_TIMING.fields() == {"server_queue_ms": 0.04, "server_ttft_ms": 16.77, "server_generation_ms": 19.81,
                                    "server_itl_ms": 4.95, "server_tok_s": 136.7}  # fmt: skip
    assert list(VLLM_TIMING.fields()) == list(SERVER_FIELDS)


def test_whole_numbers_are_read_as_floats() -> None:
    timing = read_server_timing({"queue_time_ms": 0, "time_to_first_token_ms": 12})
    assert timing == ServerTiming(queue_ms=0.0, ttft_ms=12.0)
    assert type(timing.queue_ms) is float and type(timing.ttft_ms) is float  # type: ignore[union-attr]


def test_absent_and_null_fields_are_none() -> None:
    partial = {"time_to_first_token_ms": 16.77, "queue_time_ms": None, "speculative_decoding": {"accepted": 3}}
    assert read_server_timing(partial) == ServerTiming(ttft_ms=16.77)
    assert read_server_timing({**VLLM_METRICS, "mean_itl_ms": None}) == ServerTiming(0.04, 16.77, 19.81, None, 136.7)


@pytest.mark.parametrize("metrics", [
    {"speculative_decoding": {"num_drafts": 4, "num_accepted_tokens": 7}},
    {},
    dict.fromkeys(VLLM_METRICS),
])  # fmt: skip
def test_an_object_without_timing_is_none(metrics: dict[str, Any]) -> None:
    assert read_server_timing(metrics) is None


@pytest.mark.parametrize(("metrics", "message"), [
    ([1, 2], "metrics is not an object ('[1, 2]')"),
    ("fast", "metrics is not an object ('fast')"),
    (3.5, "metrics is not an object ('3.5')"),
    ({**VLLM_METRICS, "queue_time_ms": "soon"}, "metrics.queue_time_ms is not a duration or rate >= 0 ('soon')"),
    ({**VLLM_METRICS, "time_to_first_token_ms": -0.5},
     "metrics.time_to_first_token_ms is not a duration or rate >= 0 ('-0.5')"),
    ({**VLLM_METRICS, "generation_time_ms": 1e300},
     "metrics.generation_time_ms is not a duration or rate >= 0 ('1e+300')"),
    ({**VLLM_METRICS, "tokens_per_second": MAX_SERVER_MS * 2},
     "metrics.tokens_per_second is not a duration or rate >= 0 ('172800000.0')"),
    ({**VLLM_METRICS, "mean_itl_ms": True}, "metrics.mean_itl_ms is not a duration or rate >= 0 ('True')"),
    ({**VLLM_METRICS, "queue_time_ms": {"ms": 1}}, "metrics.queue_time_ms is not a duration or rate >= 0"),
    ({**VLLM_METRICS, "queue_time_ms": [0.1]}, "metrics.queue_time_ms is not a duration or rate >= 0"),
])  # fmt: skip
def test_a_malformed_object_is_refused_in_one_line(metrics: Any, message: str) -> None:
    with pytest.raises(ReplyError) as caught:
        read_server_timing(metrics)
    text = str(caught.value)
    assert text.startswith(message) and "\n" not in text and len(text) < 120


def test_nan_and_infinity_are_refused() -> None:
    """JSON has neither, but a caller that builds the object itself could pass them."""
    for value in (math.nan, math.inf, -math.inf):
        with pytest.raises(ReplyError, match=r"^metrics\.queue_time_ms is not a duration"):
            read_server_timing({"queue_time_ms": value})


def test_the_largest_duration_is_accepted() -> None:
    assert read_server_timing({"queue_time_ms": MAX_SERVER_MS}) == ServerTiming(queue_ms=MAX_SERVER_MS)


# ---- speculative decoding's acceptance histogram ---------------------------------------------------------------

# As vLLM 0.32 writes it with --per-request-spec-decode-metrics summary and two draft tokens (exclude_none: no
# per-step arrays).
VLLM_SPEC = {"mean_acceptance_length": 1.6, "draft_acceptance_rate": 0.3, "acceptance_histogram": [6, 2, 2],
             "num_spec_steps": 10, "num_accepted_draft_tokens": 6, "num_draft_tokens": 20,
             "num_spec_tokens": 2}  # fmt: skip
NOT_A_HISTOGRAM = "metrics.speculative_decoding.acceptance_histogram is not a list of 2 to 65 step counts ("


def test_the_acceptance_histogram_is_read_beside_the_timing() -> None:
    timing = read_server_timing({**VLLM_METRICS, "speculative_decoding": VLLM_SPEC})
    assert timing == ServerTiming(0.04, 16.77, 19.81, 4.95, 136.7, acceptance_histogram=(6, 2, 2))
    assert timing is not None and timing.fields() == VLLM_TIMING.fields()  # not a record's column


def test_a_histogram_without_timing_is_read_and_without_either_is_none() -> None:
    """vLLM sends the spec object with or without --enable-per-request-metrics: then it is all the object holds."""
    assert read_server_timing({"speculative_decoding": VLLM_SPEC}) == ServerTiming(acceptance_histogram=(6, 2, 2))
    without_count = {k: v for k, v in VLLM_SPEC.items() if k != "num_spec_tokens"}
    assert read_server_timing({"speculative_decoding": without_count}) == ServerTiming(acceptance_histogram=(6, 2, 2))
    for spec in (None, {"num_drafts": 4}, {**VLLM_SPEC, "acceptance_histogram": None}):
        assert read_server_timing({"speculative_decoding": spec}) is None
        assert read_server_timing({**VLLM_METRICS, "speculative_decoding": spec}) == VLLM_TIMING


@pytest.mark.parametrize(("spec", "message"), [
    ("fast", "metrics.speculative_decoding is not an object ('fast')"),
    ({"acceptance_histogram": "6,2,2"}, NOT_A_HISTOGRAM),
    ({"acceptance_histogram": []}, NOT_A_HISTOGRAM),
    ({"acceptance_histogram": [6]}, NOT_A_HISTOGRAM),
    ({"acceptance_histogram": [6, -1]}, NOT_A_HISTOGRAM),
    ({"acceptance_histogram": [6, 2.0]}, NOT_A_HISTOGRAM),
    ({"acceptance_histogram": [6, True]}, NOT_A_HISTOGRAM),
    ({"acceptance_histogram": [6, None]}, NOT_A_HISTOGRAM),
    ({"acceptance_histogram": [6, 10**9]}, NOT_A_HISTOGRAM),
    ({"acceptance_histogram": [1] * 66}, NOT_A_HISTOGRAM),
    ({**VLLM_SPEC, "num_spec_tokens": 3},
     "metrics.speculative_decoding.acceptance_histogram has 3 entries for num_spec_tokens 3"),
    ({**VLLM_SPEC, "num_spec_tokens": "2"},
     "metrics.speculative_decoding.acceptance_histogram has 3 entries for num_spec_tokens '2'"),
])  # fmt: skip
def test_a_malformed_spec_object_is_refused_in_one_line(spec: Any, message: str) -> None:
    with pytest.raises(ReplyError) as caught:
        read_server_timing({**VLLM_METRICS, "speculative_decoding": spec})
    text = str(caught.value)
    assert text.startswith(message) and "\n" not in text and len(text) < 160


def test_the_longest_histogram_is_accepted() -> None:
    histogram = [1] * 65
    timing = read_server_timing({"speculative_decoding": {"acceptance_histogram": histogram, "num_spec_tokens": 64}})
    assert timing == ServerTiming(acceptance_histogram=tuple(histogram))


# ---- the SSE path -----------------------------------------------------------------------------------------------

PROMPT = 5
HEAD = {"id": "cmpl-9304", "object": "text_completion", "created": 1796350869, "model": "tiny-llama"}


def usage(completion: int) -> dict[str, Any]:
    return {"prompt_tokens": PROMPT, "total_tokens": PROMPT + completion, "completion_tokens": completion,
            "prompt_tokens_details": {"cached_tokens": 0}}  # fmt: skip


def event(body: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(body) + b"\n\n"


def vllm_stream(metrics: Any) -> bytes:
    """Five text chunks with continuous usage, the final usage chunk with `metrics` (as vLLM 0.32 orders its
    keys: after the usage and the fingerprint), then [DONE]."""
    texts = [" Hello", ",", " world", " again", "!"]
    chunks = [event({**HEAD, "choices": [{"index": 0, "text": t, "logprobs": None, "finish_reason": None,
                                          "stop_reason": None}], "usage": usage(i + 1)})
              for i, t in enumerate(texts)]  # fmt: skip
    final = {**HEAD, "choices": [], "usage": usage(len(texts)), "system_fingerprint": "vllm-0.32.0", "metrics": metrics}
    return b"".join(chunks) + event(final) + b"data: [DONE]\n\n"


def fed(pieces: list[bytes]) -> StreamResult:
    result = StreamResult(started=0.5)
    account = StreamAccount(result)
    for piece in pieces:
        account.feed(piece, 1.0)
    account.end()
    return result


def test_the_final_chunk_s_timing_is_read_however_the_stream_is_split() -> None:
    raw = vllm_stream(VLLM_METRICS)
    whole = fed([raw])
    assert whole.server_timing == VLLM_TIMING and whole.server_timing_note is None and whole.note is None
    assert whole.done and whole.error is None
    assert (whole.completion_tokens, whole.prompt_tokens, whole.cached_tokens, whole.chunks) == (5, PROMPT, 0, 6)
    assert whole.token_events == [(1.0, k) for k in range(1, 6)]
    for i in range(1, len(raw)):
        assert asdict(fed([raw[:i], raw[i:]])) == asdict(whole), f"split at {i}"
    assert asdict(fed([raw[i : i + 1] for i in range(len(raw))])) == asdict(whole)


def test_the_token_count_is_that_of_a_stream_without_timing() -> None:
    timed, plain = fed([vllm_stream(VLLM_METRICS)]), fed([vllm_stream(None)])
    assert plain.server_timing is None and plain.note is None
    assert asdict(timed) == {**asdict(plain), "server_timing": asdict(VLLM_TIMING)}


def test_metrics_in_the_text_is_not_taken_for_the_object() -> None:
    """A reply that prints `"metrics": {...}` keeps it in its text (escaped quotes), not in its timing."""
    text = {**HEAD, "choices": [{"index": 0, "text": '"metrics": {"queue_time_ms": 1}'}], "usage": usage(1)}
    result = fed([event(text) + event(text | {"usage": usage(2)}) + b"data: [DONE]\n\n"])
    assert result.server_timing is None and result.completion_tokens == 2 and result.error is None


@pytest.mark.parametrize("metrics", [{**VLLM_METRICS, "queue_time_ms": "soon"}, "fast", [1], {"queue_time_ms": -1}])
def test_a_malformed_object_leaves_the_stream_whole_and_says_why(metrics: Any) -> None:
    raw = vllm_stream(metrics)
    result = fed([raw])
    assert result.done and result.error is None and result.completion_tokens == 5 and result.chunks == 6
    assert result.server_timing is None
    assert result.note is not None and result.note.startswith("server timing not read: metrics")
    assert result.note == result.server_timing_note and "\n" not in result.note
    for i in range(1, len(raw), 7):
        assert asdict(fed([raw[:i], raw[i:]])) == asdict(result), f"split at {i}"


def test_a_malformed_spec_object_leaves_the_timing_unread_too() -> None:
    result = fed([vllm_stream({**VLLM_METRICS, "speculative_decoding": {"acceptance_histogram": [1, -2]}})])
    assert result.done and result.error is None and result.completion_tokens == 5
    assert result.server_timing is None and result.note is not None
    assert result.note.startswith("server timing not read: metrics.speculative_decoding.acceptance_histogram is not")
    spec = fed([vllm_stream({**VLLM_METRICS, "speculative_decoding": VLLM_SPEC})])
    assert spec.server_timing is not None and spec.server_timing.acceptance_histogram == (6, 2, 2)
    assert spec.note is None


def test_the_note_joins_a_cut_reply_s() -> None:
    result = StreamResult(text_kept_bytes=10, text_bytes=20, server_timing_note="server timing not read: x")
    assert result.note == ("reply cut to its first 10 bytes of 20 (1,024 bytes a token asked for); "
                           "server timing not read: x")  # fmt: skip


# ---- the record ---------------------------------------------------------------------------------------------------


def streamed(timing: ServerTiming | None, *, error: str | None = None) -> StreamResult:
    """Sent at 10.1 s, first token at 10.15 s (a 50 ms TTFT), tokens to 10.3 s; the step started at 10 s."""
    return StreamResult(started=10.1, first_token_at=10.15, token_events=[(10.15, 1), (10.2, 2), (10.3, 3)],
                        completion_tokens=3, prompt_tokens=7, done=error is None, error=error,
                        server_timing=timing)  # fmt: skip


PLANNED = PlannedRequest("/v1/completions", {}, 7)


def test_a_record_holds_the_server_s_timing_and_the_wire() -> None:
    timing = ServerTiming(queue_ms=4.0, ttft_ms=30.0, generation_ms=140.0, itl_ms=70.0, tok_s=17.6)
    row = record(3, 0.1, streamed(timing), PLANNED, 10.0)
    assert list(row) == list(REQUEST_FIELDS)
    assert (row["server_queue_ms"], row["server_ttft_ms"], row["server_generation_ms"], row["server_itl_ms"],
            row["server_tok_s"]) == (4.0, 30.0, 140.0, 70.0, 17.6)  # fmt: skip
    client_ttft = (row["first_token_s"] - row["sent_s"]) * 1e3
    assert client_ttft == pytest.approx(50.0)
    assert row["wire_ttft_ms"] == pytest.approx(16.0) and row["wire_ttft_ms"] == client_ttft - 4.0 - 30.0


def test_without_timing_the_server_fields_and_the_wire_are_nan() -> None:
    row = record(0, 0.1, streamed(None), PLANNED, 10.0)
    assert all(math.isnan(row[name]) for name in (*SERVER_FIELDS, "wire_ttft_ms"))
    assert row["error"] is None and row["note"] is None


def test_a_partial_timing_gives_nan_where_a_figure_is_missing() -> None:
    row = record(0, 0.1, streamed(ServerTiming(ttft_ms=30.0)), PLANNED, 10.0)
    assert row["server_ttft_ms"] == 30.0 and math.isnan(row["server_queue_ms"]) and math.isnan(row["wire_ttft_ms"])


def test_a_failed_request_keeps_the_server_s_figures_but_has_no_wire() -> None:
    row = record(0, 0.1, streamed(VLLM_TIMING, error="stream ended before [DONE]"), PLANNED, 10.0)
    assert row["server_queue_ms"] == 0.04 and math.isnan(row["first_token_s"]) and math.isnan(row["wire_ttft_ms"])


def test_a_request_never_sent_has_no_server_fields() -> None:
    row = record(0, 0.1, StreamResult(), PLANNED, 10.0)
    assert row["error"] == "not sent: the step was stopped" and not set(SERVER_FIELDS) & set(row)


def test_server_fields_may_give_a_negative_wire() -> None:
    """A server clock that says more than the client waited: the wire goes negative, kept for the cross-check."""
    fields = server_fields(ServerTiming(queue_ms=40.0, ttft_ms=30.0), 50.0)
    assert fields["wire_ttft_ms"] == -20.0
    assert math.isnan(server_fields(ServerTiming(queue_ms=1.0, ttft_ms=2.0), None)["wire_ttft_ms"])
