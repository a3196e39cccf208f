"""The toolkit's streaming client as it was before the protocol-level rewrite (aiohttp `iter_any()` reader).

Kept only as a side-by-side reference for `client_overhead.py` (client kind `toolkit-aiohttp`); the toolkit
itself uses `toolkit/loadgen/client.py`. Same `StreamResult` filling, same error texts.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import orjson

from toolkit.base.api_keys import redact
from toolkit.loadgen.stream_events import StreamResult, has_text


class StreamClient:
    """One aiohttp session per run; `stream()` runs one request and fills a `StreamResult`."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        connect_timeout_s: float = 10.0,
        read_timeout_s: float = 300.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = {"Content-Type": "application/json"}
        self._api_key = api_key
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._timeout = aiohttp.ClientTimeout(total=None, connect=connect_timeout_s, sock_read=read_timeout_s)
        self._read_timeout_s = read_timeout_s
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> StreamClient:
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=None)
        self._session = aiohttp.ClientSession(
            connector=connector, timeout=self._timeout, headers=self._headers, auto_decompress=False
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def stream(self, path: str, body: dict[str, Any], result: StreamResult | None = None) -> StreamResult:
        """Send one streamed request and read it to `[DONE]`; errors are recorded, never raised.

        Cancellation marks the result `cancelled` and propagates; the result keeps what was measured.
        """
        assert self._session is not None, "use StreamClient as an async context manager"
        result = result if result is not None else StreamResult()
        result.started = time.perf_counter()
        try:
            async with self._session.post(self.base_url + path, data=orjson.dumps(body)) as response:
                if response.status != 200:
                    text = (await response.text())[:300]
                    # Some servers echo the key they rejected; an error is stored, the key must not be.
                    result.error = redact(f"HTTP {response.status}: {text.strip()}", self._api_key)
                    return result
                await self._read_events(response, result)
        except asyncio.CancelledError:
            result.cancelled = True
            raise
        except (TimeoutError, aiohttp.SocketTimeoutError):
            result.error = f"read timeout: no data for {self._read_timeout_s:g} s"
        except aiohttp.ClientError as exc:
            result.error = f"{type(exc).__name__}: {exc}"
        finally:
            result.ended = time.perf_counter()
        return result

    async def _read_events(self, response: aiohttp.ClientResponse, result: StreamResult) -> None:
        from toolkit.loadgen.sse import SSEDecoder

        decoder = SSEDecoder()
        async for raw in response.content.iter_any():
            now = time.perf_counter()
            for data in decoder.feed(raw):
                if data == b"[DONE]":
                    result.done = True
                    return
                if not _apply_chunk(data, now, result):
                    return
        result.error = "stream ended before [DONE]" + (" (cut mid-event)" if decoder.pending.strip() else "")


def _apply_chunk(data: bytes, now: float, result: StreamResult) -> bool:
    """Update `result` from one chunk; False (with `error` set) when the stream must stop."""
    try:
        chunk = orjson.loads(data)
    except orjson.JSONDecodeError:
        result.error = f"malformed SSE data: {data[:80]!r}"
        return False
    if not isinstance(chunk, dict):
        result.error = f"malformed SSE data: {data[:80]!r}"
        return False
    if "error" in chunk:
        err = chunk["error"]
        result.error = f"server error in stream: {err.get('message', err) if isinstance(err, dict) else err}"
        return False
    result.chunks += 1
    choices = chunk.get("choices") or ()
    if result.first_token_at is None and any(has_text(c) for c in choices):
        result.first_token_at = now
    usage = chunk.get("usage")
    if usage:
        result.prompt_tokens = usage.get("prompt_tokens", result.prompt_tokens)
        details = usage.get("prompt_tokens_details") or {}
        if details.get("cached_tokens") is not None:
            result.cached_tokens = details["cached_tokens"]
        count = usage.get("completion_tokens") or 0
        if count > result.completion_tokens:
            result.completion_tokens = count
            result.token_events.append((now, count))
    return True
