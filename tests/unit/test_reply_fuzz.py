"""Fuzz of the reply path: random bytes, random splits and wrong-typed fields never raise out of the toolkit.

Seeded (`random.Random(seed)`), a few hundred cases each, well under a second: the streaming path
(`HttpReply` -> `StreamAccount`) records what went wrong in its `StreamResult`; `ServerAPI` raises only
`ServerAPIError`. Anything else (AttributeError, TypeError, KeyError ...) is a bug this test finds.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

import httpx
import orjson

from toolkit.loadgen.http_reply import HttpReply
from toolkit.loadgen.stream_events import StreamResult
from toolkit.matrix.prometheus import MetricsSnapshot
from toolkit.matrix.server_api import ServerAPI, ServerAPIError

SEEDS = range(300)
HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
# Values of every JSON type and shape, and counts vLLM never sends.
ODD = [None, True, False, 0, -1, 3, 2**63 - 1, 1.5, float("-0"), "", "3", "x", [], [1], ["x"], {}, {"a": 1},
       {"content": 1}, [{"delta": 1}], [{"delta": {"content": ["x"]}}], {"cached_tokens": "2"}]  # fmt: skip


def good_event(completion: int) -> dict[str, Any]:
    return {"id": "c", "object": "chat.completion.chunk", "model": "m",
            "choices": [{"index": 0, "delta": {"content": " t"}, "finish_reason": None}],
            "usage": {"prompt_tokens": 9, "completion_tokens": completion, "total_tokens": 9 + completion,
                      "prompt_tokens_details": {"cached_tokens": 0}}}  # fmt: skip


def mutate(rng: random.Random, value: Any, depth: int = 0) -> Any:
    """`value` with one field somewhere replaced by an odd value (or the whole value, at random)."""
    if depth > 3 or rng.random() < 0.2 or not isinstance(value, dict | list) or not value:
        return rng.choice(ODD)
    if isinstance(value, dict):
        key = rng.choice(list(value))
        return {**value, key: mutate(rng, value[key], depth + 1)}
    at = rng.randrange(len(value))
    return [*value[:at], mutate(rng, value[at], depth + 1), *value[at + 1 :]]


def each_seed(check: Callable[[random.Random], None], seeds: range = SEEDS) -> None:
    """`check` with a generator of every seed; a failure names its seed (rerun it alone to debug)."""
    for seed in seeds:
        try:
            check(random.Random(seed))
        except Exception as exc:
            raise AssertionError(f"seed {seed}: {type(exc).__name__}: {exc}") from exc


def random_splits(rng: random.Random, raw: bytes) -> list[bytes]:
    cuts = sorted(rng.sample(range(1, len(raw)), min(len(raw) - 1, rng.randint(0, 12)))) if len(raw) > 1 else []
    return [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]


def chunked(body: bytes) -> bytes:
    return b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body) if body else b"0\r\n\r\n"


def feed(pieces: list[bytes]) -> StreamResult:
    """Every piece into one reply: nothing may raise; the result keeps its types."""
    reply = HttpReply(StreamResult())
    for i, piece in enumerate(pieces):
        if reply.feed(piece, float(i)):
            break
    if reply.status == 200:
        reply.account.end()
    result = reply.account.result
    assert type(result.completion_tokens) is int and result.completion_tokens >= 0
    assert result.prompt_tokens is None or type(result.prompt_tokens) is int
    assert result.cached_tokens is None or type(result.cached_tokens) is int
    assert result.error is None or isinstance(result.error, str)
    counts = [count for _t, count in result.token_events]
    assert all(type(c) is int for c in counts) and counts == sorted(set(counts))
    return result


def test_random_bytes_after_a_good_head_and_random_splits() -> None:
    def check(rng: random.Random) -> None:
        body = rng.randbytes(rng.randint(0, 400))
        if rng.random() < 0.5:  # SSE-looking noise: data lines, blank lines, CRs
            words = [b"data: ", b"\n", b"\n\n", b"\r\n", b"{", b"}", b'"usage":', b"[DONE]", b"data:{}", body[:20]]
            body = b"".join(rng.choice(words) for _ in range(rng.randint(1, 40)))
        raw = HEAD + (chunked(body) if rng.random() < 0.7 else body)
        feed(random_splits(rng, raw))

    each_seed(check)


def test_entirely_random_replies() -> None:
    def check(rng: random.Random) -> None:
        raw = rng.randbytes(rng.randint(1, 300))
        if rng.random() < 0.5:
            raw = b"HTTP/1.1 " + raw
        feed(random_splits(rng, raw))

    each_seed(check)


def test_wrong_typed_fields_fail_the_stream_with_a_message() -> None:
    def check(rng: random.Random) -> None:
        events = [good_event(k) for k in range(1, rng.randint(2, 5))]
        bad_at = rng.randrange(len(events))
        events[bad_at] = mutate(rng, events[bad_at])
        body = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events) + b"data: [DONE]\n\n"
        result = feed(random_splits(rng, HEAD + chunked(body)))
        assert result.done or (result.error or "").startswith(("malformed SSE data", "server error in stream"))

    each_seed(check)


def test_a_wrong_type_after_good_tokens_is_caught_on_the_fast_path_too() -> None:
    events = [good_event(1), {**good_event(2), "usage": {"completion_tokens": "2"}}]
    body = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events)
    result = feed([HEAD + chunked(body)])
    assert (result.error or "").startswith("malformed SSE data: usage.completion_tokens is not a token count ('2')")
    assert result.completion_tokens == 1 and not result.done


def random_response(rng: random.Random, request: httpx.Request) -> httpx.Response:
    kind = rng.random()
    if kind < 0.3:
        content = rng.randbytes(rng.randint(0, 200))
    elif kind < 0.8:
        shapes = [{"count": rng.choice(ODD)}, {"data": rng.choice(ODD)}, {"data": [rng.choice(ODD)]},
                  {"version": rng.choice(ODD)}, {"data": [{"id": rng.choice(ODD)}]}, rng.choice(ODD)]  # fmt: skip
        content = orjson.dumps(rng.choice(shapes))
    else:
        lines = [b"vllm:num_requests_running ", b"NaN", b"+Inf", b"1.0", b"\n", b"# TYPE vllm:x gauge\n", b"{",
                 b'model="m"}', rng.randbytes(8)]  # fmt: skip
        content = b"".join(rng.choice(lines) for _ in range(rng.randint(1, 12)))
    return httpx.Response(rng.choice([200, 200, 200, 404, 500]), content=content)


def test_server_api_raises_only_its_own_error_on_any_reply() -> None:
    async def run_all() -> None:
        current = random.Random(0)
        async with ServerAPI("http://127.0.0.1:9") as api:
            await api._client.aclose()  # the same client, its replies drawn at random
            api._client = httpx.AsyncClient(base_url=api.base_url, transport=httpx.MockTransport(
                lambda request: random_response(current, request)))  # fmt: skip
            for seed in SEEDS:
                current.seed(seed)
                try:
                    await api_calls(api, current)
                except Exception as exc:
                    raise AssertionError(f"seed {seed}: {type(exc).__name__}: {exc}") from exc

    asyncio.run(run_all())


async def api_calls(api: ServerAPI, rng: random.Random) -> None:
    """Every call of the API on random replies: typed values or ServerAPIError naming the URL."""
    try:
        models = await api.models()
        assert all(isinstance(m, dict) for m in models)
        version = await api.version()
        assert version is None or isinstance(version, str)
        count = await api.count_tokens("m", "text", chat=rng.random() < 0.5)
        assert type(count) is int and count >= 0
    except ServerAPIError as exc:
        assert str(exc).startswith("http://127.0.0.1:9/"), exc
    snapshot = await api.metrics_or_none()
    assert snapshot is None or isinstance(snapshot, MetricsSnapshot)
    counts = await api.running_waiting()
    assert counts is None or all(type(n) is int for n in counts)
