"""Embeddings requests: one non-streaming JSON POST to `/v1/embeddings` each, timed from its send to the whole reply.

An embeddings reply has no tokens to stream: what a request measures is its end-to-end latency, the prompt tokens
the server counted (`usage.prompt_tokens`) and whether every input came back as a vector. `read_reply` judges a
reply without any I/O; `EmbeddingClient` does the I/O (httpx: keep-alive connections, a whole-reply deadline, a
bound on the bytes read, the key redacted from any error); `send_embeddings` sends a step open-loop on the same
schedule as streamed requests (`toolkit.loadgen.open_loop.on_schedule`); `probe_embeddings` asks first whether the
server embeds at all.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from toolkit import __version__
from toolkit.base.api_keys import redact_and_cut, remember_key
from toolkit.base.errors import ReplyError
from toolkit.base.tls import tls_context
from toolkit.loadgen.client import error_message
from toolkit.loadgen.open_loop import PlannedRequest, on_schedule

EMBEDDINGS_PATH = "/v1/embeddings"
# A reply holds a vector per input: thousands of floats as JSON text, ~20 bytes each. A reply past this is no
# embedding of the inputs sent (and is not held).
MAX_REPLY_BYTES = 256 * 1024 * 1024
PROBE_INPUT = "Does this server embed text?"  # the one input of the request that asks, before a sweep


def embeddings_body(model: str, inputs: Sequence[str]) -> dict[str, Any]:
    """The JSON body of one embeddings request."""
    return {"model": model, "input": list(inputs)}


@dataclass
class EmbeddingResult:
    """What one embeddings request measured. Times are `time.perf_counter()` seconds."""

    started: float | None = None  # None: never sent (cancelled before its due time or its slot)
    ended: float | None = None  # the whole reply read (or the request failed)
    prompt_tokens: int | None = None
    error: str | None = None


def read_reply(status: int, body: bytes, inputs: int) -> tuple[int | None, str | None]:
    """A reply's prompt tokens (`usage.prompt_tokens`) and None, or None and why it is no embedding of `inputs`
    inputs (its status and message, a vector missing, a count that is not one)."""
    if status != 200:
        return None, f"HTTP {status}: {' '.join(error_message(body).split())}"
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None, "the reply is not JSON"
    vectors = data.get("data") if isinstance(data, dict) else None
    if not isinstance(vectors, list) or len(vectors) != inputs:
        got = len(vectors) if isinstance(vectors, list) else "no list of"
        return None, f"the reply holds {got} embeddings for {inputs} inputs"
    usage = data.get("usage")
    tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    if type(tokens) is not int or tokens < 0:
        return None, f"the reply's usage.prompt_tokens is {str(tokens)[:40]!r}, not a count"
    return tokens, None


class EmbeddingClient:
    """Keep-alive connections to one server; `post()` runs one embeddings request into an `EmbeddingResult`."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        connect_timeout_s: float = 10.0,
        read_timeout_s: float = 300.0,
    ) -> None:
        headers = {"Content-Type": "application/json", "Accept-Encoding": "identity",
                   "User-Agent": f"vllm-speed-toolkit/{__version__}"}  # fmt: skip
        if api_key:
            remember_key(api_key)
            headers["Authorization"] = f"Bearer {api_key}"
        self._key = api_key
        self._read_timeout_s = read_timeout_s
        # trust_env=False: no proxy from the environment sees the key; no cap on connections (open loop)
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers=headers,
            timeout=httpx.Timeout(read_timeout_s, connect=connect_timeout_s),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=None),
            trust_env=False,
            verify=tls_context(),
        )

    async def __aenter__(self) -> EmbeddingClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._client.aclose()

    async def post(self, body: dict[str, Any], result: EmbeddingResult | None = None) -> EmbeddingResult:
        """Send one request and read its whole reply within `read_timeout_s`; errors are recorded, never raised
        (a cancellation propagates, the result keeping its send time)."""
        result = result if result is not None else EmbeddingResult()
        payload = orjson.dumps(body)
        result.started = time.perf_counter()
        try:
            async with (
                asyncio.timeout(self._read_timeout_s),
                self._client.stream("POST", EMBEDDINGS_PATH, content=payload) as response,
            ):
                reply = bytearray()
                async for piece in response.aiter_raw():
                    reply += piece
                    if len(reply) > MAX_REPLY_BYTES:
                        raise _TooLong
            result.ended = time.perf_counter()
            result.prompt_tokens, result.error = read_reply(response.status_code, bytes(reply), len(body["input"]))
        except asyncio.CancelledError:
            result.error = "cancelled"
            raise
        except TimeoutError:
            result.error = f"deadline: no whole reply within {self._read_timeout_s:g} s"
        except _TooLong:
            result.error = f"the reply went past {MAX_REPLY_BYTES:,} bytes"
        except httpx.HTTPError as exc:
            result.error = f"{type(exc).__name__}: {exc}"
        finally:
            if result.ended is None:
                result.ended = time.perf_counter()
            if result.error:  # some servers echo the key they rejected
                result.error = redact_and_cut(result.error, 300, self._key)
        return result


class _TooLong(ReplyError):
    """A reply past MAX_REPLY_BYTES."""


async def probe_embeddings(client: EmbeddingClient, model: str) -> str | None:
    """Why the server does not serve embeddings of `model` (one request of one input: its error), None when it
    does: asked before a sweep measures anything."""
    return (await client.post(embeddings_body(model, [PROBE_INPUT]))).error


def embedding_record(
    index: int, due: float, result: EmbeddingResult, planned: PlannedRequest, start: float
) -> dict[str, Any]:
    """The request's record, in the fields a rate step stores (`toolkit.method.goodput.RECORD_COLUMNS` and
    `items`, less the step's own); times from `start`. `last_token_s` is when the whole reply was read (its
    end-to-end latency is that less `sent_s`); it has no first token, chunks or output tokens."""
    failed = result.error is not None or result.started is None
    return {
        "request": index,
        "scheduled_s": due,
        "sent_s": math.nan if result.started is None else result.started - start,
        "first_token_s": math.nan,
        "last_token_s": math.nan if failed or result.ended is None else result.ended - start,
        "chunk_times_s": [],
        "input_tokens": result.prompt_tokens or 0,
        "output_tokens": 0,
        "error": "not sent: the step was stopped" if result.started is None else result.error,
        "items": len(planned.body["input"]),
    }


async def send_embeddings(
    client: EmbeddingClient,
    requests: Sequence[PlannedRequest],
    due: Sequence[float],
    *,
    max_in_flight: int | None = None,
    start: float | None = None,
) -> list[dict[str, Any]]:
    """Send `requests[i]` at `start + due[i]` (due ascending; `start` defaults to now), read every reply, return
    their records in order."""
    if len(requests) != len(due):
        raise ValueError(f"{len(requests)} requests for {len(due)} due times")
    t0 = time.perf_counter() if start is None else start
    results = [EmbeddingResult() for _ in requests]

    async def one(i: int) -> None:
        await client.post(requests[i].body, results[i])

    await on_schedule(due, t0, one, max_in_flight)
    return [embedding_record(i, when, results[i], requests[i], t0) for i, when in enumerate(due)]
