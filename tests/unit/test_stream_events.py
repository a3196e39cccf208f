"""The framing + SSE + accounting path (`HttpReply` -> `StreamAccount` -> `StreamResult`), fed byte by byte.

A realistic vLLM reply (chunked, continuous usage on every chunk, a usage-only chunk, `[DONE]`) must give the
same result however the bytes are split across reads; each token's time is the arrival of its event's last byte.
"""

from __future__ import annotations

import random
from dataclasses import asdict
from typing import Any

import orjson
import pytest

from toolkit.loadgen.http_reply import HttpReply
from toolkit.loadgen.stream_events import StreamAccount, StreamResult, build_request

HEAD = (b"HTTP/1.1 200 OK\r\ndate: Mon, 01 Dec 2025 03:00:00 GMT\r\nserver: uvicorn\r\n"
        b"content-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n")  # fmt: skip
PROMPT, CACHED = 12, 8


def chunk(content: str | None, completion: int, *, final: bool = False) -> bytes:
    """One vLLM chat chunk with continuous usage stats (`content=None`: the usage-only chunk)."""
    usage = {"prompt_tokens": PROMPT, "total_tokens": PROMPT + completion, "completion_tokens": completion,
             "prompt_tokens_details": {"cached_tokens": CACHED}}  # fmt: skip
    delta = {"role": "assistant", "content": ""} if completion == 0 else {"content": content}
    choices: list[dict[str, Any]] = [] if final else [
        {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]  # fmt: skip
    body = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1764558000, "model": "m",
            "choices": choices, "usage": usage}  # fmt: skip
    return b"data: " + orjson.dumps(body) + b"\n\n"


def http_chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


# (HTTP chunk, the SSE events in it); text events raise the count by one, the quoted "usage": is text, not a key
TOKENS = [" Hello", ",", ' say \\"usage\\": no', " world", "!"]
EVENTS = [chunk(None, 0)] + [chunk(t, i + 1) for i, t in enumerate(TOKENS)] + [chunk(None, 5, final=True)]
CHUNKS = [[EVENTS[0]], [EVENTS[1]], [EVENTS[2], EVENTS[3]], [EVENTS[4]], [EVENTS[5]], [EVENTS[6], b"data: [DONE]\n\n"]]


def build_reply() -> tuple[bytes, list[int]]:
    """The raw reply, and the offset of the last byte of every token's event (token k -> offsets[k - 1])."""
    raw = HEAD
    ends: list[int] = []
    for events in CHUNKS:
        data = b"".join(events)
        start = len(raw) + len(b"%x\r\n" % len(data))
        offset = 0
        for event in events:
            offset += len(event)
            ends.append(start + offset - 1)
        raw += http_chunk(data)
    raw += b"0\r\n\r\n"
    # events 1..5 carry the tokens (event 0 has none, the usage-only and [DONE] events add none)
    return raw, ends[1:6]


RAW, TOKEN_ENDS = build_reply()


def feed(pieces: list[bytes], times: list[float] | None = None) -> HttpReply:
    reply = HttpReply(StreamResult())
    for i, piece in enumerate(pieces):
        reply.feed(piece, 1.0 if times is None else times[i])
    return reply


def expected() -> dict[str, Any]:
    counts = {"prompt_tokens": PROMPT, "cached_tokens": CACHED, "completion_tokens": 5, "chunks": 7}
    return {**asdict(StreamResult()), **counts, "first_token_at": 1.0, "done": True,
            "token_events": [(1.0, k) for k in range(1, 6)]}  # fmt: skip


def test_whole_reply_in_one_read() -> None:
    reply = feed([RAW])
    assert asdict(reply.account.result) == expected()
    assert (reply.status, reply.head_done, reply.complete, reply.keep_alive, reply.malformed) == (
        200, True, True, True, False)  # fmt: skip
    assert reply.account.decoder.pending == b""


def test_split_at_every_position_gives_the_same_result() -> None:
    whole = asdict(feed([RAW]).account.result)
    for i in range(1, len(RAW)):
        reply = feed([RAW[:i], RAW[i:]])
        assert asdict(reply.account.result) == whole, f"split at {i}"
        assert reply.complete and reply.keep_alive and not reply.malformed, f"split at {i}"


def test_random_splits_into_many_reads_give_the_same_result() -> None:
    whole = asdict(feed([RAW]).account.result)
    rng = random.Random(13)
    for _ in range(200):
        cuts = sorted(rng.sample(range(1, len(RAW)), rng.randint(2, 40)))
        pieces = [RAW[a:b] for a, b in zip([0, *cuts], [*cuts, len(RAW)], strict=True)]
        assert asdict(feed(pieces).account.result) == whole, cuts


def test_byte_by_byte_each_token_is_stamped_when_its_event_ends() -> None:
    reply = feed([RAW[i : i + 1] for i in range(len(RAW))], times=[float(i) for i in range(len(RAW))])
    result = reply.account.result
    assert result.token_events == [(float(end), k) for k, end in enumerate(TOKEN_ENDS, 1)]
    assert result.first_token_at == TOKEN_ENDS[0]
    assert result.done and result.error is None and reply.complete


def test_done_before_the_terminating_chunk_stops_the_wait() -> None:
    """`[DONE]` lets the caller go on; the terminating chunk arrives later and completes the reply."""
    end = RAW.index(b"data: [DONE]\n\n") + len(b"data: [DONE]\n\n")
    reply = HttpReply(StreamResult())
    assert reply.feed(RAW[:end], 1.0) is True
    assert reply.account.result.done and not reply.complete
    assert reply.feed(RAW[end:], 2.0) is True
    assert reply.complete and reply.keep_alive


def test_many_events_in_one_http_chunk() -> None:
    raw = HEAD + http_chunk(b"".join(EVENTS) + b"data: [DONE]\n\n") + b"0\r\n\r\n"
    assert asdict(feed([raw]).account.result) == expected()


def test_a_malformed_event_fails_the_stream_and_later_events_are_ignored() -> None:
    raw = HEAD + http_chunk(EVENTS[0] + EVENTS[1]) + http_chunk(b"data: {not json\n\n" + EVENTS[2])
    reply = HttpReply(StreamResult())
    assert reply.feed(raw, 1.0) is True  # the caller stops waiting
    result = reply.account.result
    assert result.error == "malformed SSE data: b'{not json'"
    assert result.completion_tokens == 1 and not result.done


def test_a_json_value_that_is_not_an_object_is_malformed() -> None:
    result = StreamResult()
    StreamAccount(result).feed(b"data: [1, 2]\n\n", 1.0)
    assert result.error == "malformed SSE data: b'[1, 2]'"


def test_an_error_event_fails_the_stream_with_its_message() -> None:
    error = {"error": {"object": "error", "message": "context too long", "type": "BadRequestError", "code": 400}}
    raw = HEAD + http_chunk(EVENTS[0]) + http_chunk(b"data: " + orjson.dumps(error) + b"\n\n")
    reply = feed([raw])
    assert reply.account.result.error == "server error in stream: context too long"
    string = StreamResult()
    StreamAccount(string).feed(b'data: {"error": "overloaded"}\n\n', 1.0)
    assert string.error == "server error in stream: overloaded"


@pytest.mark.parametrize(("cut_at", "message"), [
    (b'"content":" world"', "stream ended before [DONE] (cut mid-event)"),
    (b"data: [DONE]", "stream ended before [DONE]"),
])  # fmt: skip
def test_a_cut_stream_keeps_what_it_measured(cut_at: bytes, message: str) -> None:
    raw = RAW[: RAW.index(cut_at)]
    for pieces in ([raw], [raw[i : i + 7] for i in range(0, len(raw), 7)]):
        reply = feed(pieces)
        account = reply.account
        assert not reply.complete and not account.result.done and account.result.error is None
        assert (account.decoder.pending.strip() != b"") == message.endswith("(cut mid-event)")
        account.end()
        assert account.result.error == message
        assert account.result.completion_tokens == (3 if b"world" in cut_at else 5)


def test_end_after_done_or_error_changes_nothing() -> None:
    reply = feed([RAW])
    reply.account.end()
    assert reply.account.result.error is None
    failed = StreamResult(error="HTTP 500: boom")
    StreamAccount(failed).end()
    assert failed.error == "HTTP 500: boom"


def test_completions_text_counts_as_first_text() -> None:
    event = {"choices": [{"index": 0, "text": " a"}], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}
    result = StreamResult()
    StreamAccount(result).feed(b"data: " + orjson.dumps(event) + b"\n\n", 2.5)
    assert (result.first_token_at, result.token_events, result.prompt_tokens) == (2.5, [(2.5, 1)], 3)


def test_build_request() -> None:
    path, body = build_request("chat", "m", "hi", 16)
    assert path == "/v1/chat/completions" and body["messages"] == [{"role": "user", "content": "hi"}]
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert (body["max_tokens"], body["ignore_eos"], body["temperature"], body["stream"]) == (16, True, 0.0, True)
    path, body = build_request("completions", "m", "hi", 4, ignore_eos=False)
    assert path == "/v1/completions" and body["prompt"] == "hi" and body["ignore_eos"] is False


def test_real_vllm_chat_stream_shapes_are_accepted() -> None:
    """Events as vLLM 0.32 (CPU) sends them: a role chunk, text chunks, then `"choices": []` with the usage. When
    no text came before the usage (byte-level BPE holds back a partial UTF-8 character: common for a one-token
    prefill request), the usage event takes the full parse; its empty choices once failed every real prefill as
    "choices is not a list of objects"."""
    head = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "tiny-llama"}
    role = {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
    text = {**head, "choices": [{"index": 0, "delta": {"content": " ab"}, "finish_reason": None}]}
    held_back = {**head, "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "length"}]}
    usage = {
        **head,
        "choices": [],
        "usage": {"prompt_tokens": 7, "total_tokens": 9, "completion_tokens": 2, "prompt_tokens_details": None},
    }
    for events in ([role, text, held_back, usage], [role, held_back, usage]):
        result = StreamResult(started=0.0)
        account = StreamAccount(result)
        for t, event in enumerate(events):
            account.feed(b"data: " + orjson.dumps(event) + b"\n\n", float(t))
        account.feed(b"data: [DONE]\n\n", 9.0)
        assert result.error is None, result.error
        assert result.completion_tokens == 2 and result.prompt_tokens == 7 and result.done
