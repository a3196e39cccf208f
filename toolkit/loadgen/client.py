"""Streaming client: one request, read to `[DONE]`, every chunk's arrival time and usage counts.

A small HTTP/1.1 client on asyncio (uvloop when the runner uses it), written so that the load generator is not
what a benchmark measures (numbers in ../benchmarks/README.md). This module does the I/O: keep-alive connections,
timeouts, one retry, cancellation. The whole per-token path runs in the socket's read callback, with no stream
reader, task wake-up or per-read timer in between: the bytes go to `HttpReply` (framing by llhttp,
toolkit/loadgen/http_reply.py), its body to `StreamAccount` (SSE events and usage,
toolkit/loadgen/stream_events.py). The arrival time of a chunk is the time the process read it
(`time.perf_counter()`); benchmarks/kernel_stamps.py has the kernel's receive timestamps instead, for the benchmark.

It speaks what the toolkit needs: POST with a JSON body, keep-alive, `Content-Length` / chunked / read-to-close
bodies, http and https. A `StreamResult` is filled while the stream runs, so a cancelled request still leaves
what it measured in the caller's hands.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from typing import Any
from urllib.parse import urlsplit

import orjson

from toolkit import __version__
from toolkit.base.api_keys import redact_and_cut, remember_key, scrub
from toolkit.base.errors import ConnectError, ParamsError, ToolkitError
from toolkit.loadgen.http_reply import HttpReply
from toolkit.loadgen.images import image_count
from toolkit.loadgen.stream_events import (
    ENDPOINT_PATHS,
    STREAM_OPTIONS,
    Endpoint,
    StreamResult,
    build_request,
    prompt_tokens_max,
)

__all__ = ["ENDPOINT_PATHS", "STREAM_OPTIONS", "ConnectError", "Endpoint", "StreamClient", "StreamResult",
           "build_request"]  # fmt: skip


# A request's whole reply must arrive within its deadline: the idle timeout (read_timeout_s, time without progress)
# plus this much per token asked for. A server trickling events, or one ignoring max_tokens, cannot hold it longer.
SECONDS_PER_TOKEN_ASKED = 2.0  # a stream slower than half a token a second is not being served


def reply_deadline_s(read_timeout_s: float, max_tokens: int | None) -> float:
    """How long one streamed reply may take in all (`SECONDS_PER_TOKEN_ASKED`)."""
    return read_timeout_s + SECONDS_PER_TOKEN_ASKED * max(1, max_tokens or 1)


def error_message(body: bytes) -> str:
    """What an error reply says: the `message` of an OpenAI-style `{"error": {...}}` (or a top-level `message` or
    `detail`) when the body is such JSON, else the body as text."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        data = None
    if isinstance(data, dict):
        error = data.get("error")
        found = error.get("message") if isinstance(error, dict) else error
        found = found if isinstance(found, str) else data.get("message") or data.get("detail")
        if isinstance(found, str) and found.strip():
            return found
    return body.decode("utf-8", "replace")


class StreamClient:
    """Keep-alive connections to one server; `stream()` runs one request and fills a `StreamResult`."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        connect_timeout_s: float = 10.0,
        read_timeout_s: float = 300.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        url = urlsplit(self.base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ParamsError(f"base_url: expected http(s)://host[:port][/prefix], got {base_url!r}")
        self._host = url.hostname
        self._tls = url.scheme == "https"
        self._port = url.port or (443 if self._tls else 80)
        self._prefix = url.path.rstrip("/")
        default_port = self._port == (443 if self._tls else 80)
        host = f"[{self._host}]" if ":" in self._host else self._host
        head = [
            f"Host: {host if default_port else f'{host}:{self._port}'}",
            "Content-Type: application/json",
            "Accept: text/event-stream",
            f"User-Agent: vllm-speed-toolkit/{__version__}",
        ]
        self._api_key = api_key
        if api_key:
            remember_key(api_key)  # a stream's error event is redacted before the client sees it: whole, not by pieces
            head.append(f"Authorization: Bearer {api_key}")
        self._headers = ("\r\n".join(head) + "\r\n").encode("latin-1")
        self._connect_timeout_s = connect_timeout_s
        self._read_timeout_s = read_timeout_s
        self._ssl: ssl.SSLContext | None = ssl.create_default_context() if self._tls else None
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()
        self._entered = False

    async def __aenter__(self) -> StreamClient:
        self._entered = True
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._entered = False
        for conn in list(self._open):
            conn.close()
        self._idle.clear()
        self._open.clear()

    async def stream(self, path: str, body: dict[str, Any], result: StreamResult | None = None) -> StreamResult:
        """Send one streamed request and read it to `[DONE]`; errors are recorded, never raised.

        Cancellation marks the result `cancelled` and propagates; the result keeps what was measured.
        """
        assert self._entered, "use StreamClient as an async context manager"
        result = result if result is not None else StreamResult()
        result.started = time.perf_counter()
        asked = body.get("max_tokens")
        result.max_tokens = asked if type(asked) is int else None
        allowed_s = reply_deadline_s(self._read_timeout_s, result.max_tokens)
        deadline = result.started + allowed_s
        payload = orjson.dumps(body)
        result.prompt_tokens_max = prompt_tokens_max(len(payload), image_count(body))
        request = (
            b"POST %s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n"
            % ((self._prefix + path).encode("latin-1"), self._headers, len(payload))
        ) + payload
        conn: _Connection | None = None
        try:
            for attempt in (0, 1):
                conn, reused = await self._acquire()
                reply = await conn.send(request, result)
                await self._wait(conn, deadline)
                # A kept-alive connection the server had just closed: nothing was received, so send again once.
                if conn.closed_before_response and reused and attempt == 0:
                    conn = None
                    continue
                break
            if reply.malformed:
                result.error = "malformed HTTP response from the server"
            elif not reply.head_done:
                result.error = "the server closed the connection before the response"
            elif reply.status != 200:
                text = redact_and_cut(error_message(bytes(reply.error_body)), 300, self._api_key)
                result.error = f"HTTP {reply.status}: {' '.join(text.split())}"
            else:
                reply.account.end()
        except asyncio.CancelledError:
            result.cancelled = True
            if conn is not None:
                conn.close()
            raise
        except _DeadlinePassed:
            if conn is not None:
                conn.close()
            result.error = (f"deadline: the reply went on past {allowed_s:g} s (read timeout + "
                            f"{SECONDS_PER_TOKEN_ASKED:g} s per token asked for)")  # fmt: skip
        except TimeoutError:
            if conn is not None:
                conn.close()
            result.error = f"read timeout: no data for {self._read_timeout_s:g} s"
        except ConnectError as exc:
            result.error = str(exc)
        except OSError as exc:
            if conn is not None:
                conn.close()
            result.error = f"{type(exc).__name__}: {exc}"
        finally:
            result.ended = time.perf_counter()
            if result.error:  # some servers echo the key they rejected, in a body or a stream's error event
                result.error = scrub(result.error, self._api_key)
            if conn is not None:
                conn.release()
        return result

    async def _acquire(self) -> tuple[_Connection, bool]:
        while self._idle:
            conn = self._idle.pop()
            if conn.usable:
                return conn, True
            conn.close()
        try:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation that arrives as
            # the connection completes (the stream then runs on after its cell ended) or drop a connection
            # made just as it was cancelled (left open when the loop closes).
            async with asyncio.timeout(self._connect_timeout_s):
                conn = await self._connect(asyncio.get_running_loop())
        except TimeoutError:
            where = f"{self._host}:{self._port}"
            raise ConnectError(f"connect timeout: {where} after {self._connect_timeout_s:g} s") from None
        except OSError as exc:
            raise ConnectError(f"cannot connect to {self._host}:{self._port}: {exc}") from None
        self._open.add(conn)
        return conn, False

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> _Connection:
        """A new connection to the server."""
        _, conn = await loop.create_connection(
            lambda: _Connection(self),
            self._host,
            self._port,
            ssl=self._ssl,
            server_hostname=self._host if self._tls else None,
        )
        return conn

    async def _wait(self, conn: _Connection, deadline: float) -> None:
        """Until the reply is complete (or `[DONE]`); TimeoutError after `read_timeout_s` without progress,
        `_DeadlinePassed` at `deadline` (perf_counter seconds) whatever the progress."""
        waiter = conn.waiter
        assert waiter is not None
        while not waiter.done():
            now = time.perf_counter()
            if now >= deadline:
                raise _DeadlinePassed
            remaining = conn.last_data + self._read_timeout_s - now
            if remaining <= 0:
                raise TimeoutError
            await asyncio.wait((waiter,), timeout=min(remaining, deadline - now))
        waiter.result()  # re-raises a connection error

    def _put_idle(self, conn: _Connection) -> None:
        if self._entered:
            self._idle.append(conn)
        else:
            conn.close()

    def _forget(self, conn: _Connection) -> None:
        self._open.discard(conn)
        if conn in self._idle:
            self._idle.remove(conn)


class _DeadlinePassed(ToolkitError):
    """A reply still arriving at its deadline (`reply_deadline_s`)."""


class _Connection(asyncio.Protocol):
    """One keep-alive connection, one request at a time; its reply is parsed as the bytes arrive."""

    def __init__(self, client: StreamClient) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.reply: HttpReply | None = None
        self.last_data = 0.0
        self.lost = False
        self.got_bytes = False
        self.returned = True  # the caller is done with the current request

    # -- the caller's side
    @property
    def usable(self) -> bool:
        """Idle and clean: the last reply ended and the server keeps the connection."""
        transport = self.transport
        return not self.lost and transport is not None and not transport.is_closing() and self._clean

    @property
    def _clean(self) -> bool:
        return self.reply is None or (self.reply.complete and self.reply.keep_alive)

    @property
    def closed_before_response(self) -> bool:
        return self.lost and not self.got_bytes

    async def send(self, request: bytes, result: StreamResult) -> HttpReply:
        """Start a request; its reply fills `result`, and `waiter` is woken when the caller may look."""
        self.reply = reply = HttpReply(result)
        self.returned = False
        self.got_bytes = False
        self.waiter = asyncio.get_running_loop().create_future()
        self.last_data = time.perf_counter()
        if self.lost:
            self.waiter.set_result(None)
        else:
            await self._write(request)
        return reply

    async def _write(self, request: bytes) -> None:
        assert self.transport is not None
        self.transport.write(request)

    def release(self) -> None:
        """The caller is done: keep the connection for the next request if its reply ends cleanly."""
        self.returned = True
        reply = self.reply
        if self.lost or reply is None or not reply.keep_alive:
            self.close()
        elif reply.complete:
            self.client._put_idle(self)
        elif not (reply.account.result.done and reply.account.result.error is None):
            self.close()
        # else: left at [DONE] before the terminating chunk; _message_complete keeps it when that arrives

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()
        self.lost = True
        self.client._forget(self)

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.client._open.add(self)  # known from its first moment, so the client's exit closes it whatever happens
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.client._forget(self)
        self._wake()

    def eof_received(self) -> bool | None:
        return False  # close the transport; connection_lost follows

    def data_received(self, data: bytes) -> None:
        """Bytes count for the idle timeout only when the reply moved on (its head, an event with data, its end, an
        error body): SSE comments, a server's keep-alives, would otherwise hold a stream open for ever."""
        now = time.perf_counter()
        before = self._progress()
        self._feed(data, now)
        if self._progress() != before:
            self.last_data = now

    def _progress(self) -> tuple[bool, bool, int, int, bool] | None:
        reply = self.reply
        if reply is None:
            return None
        result = reply.account.result
        return reply.head_done, reply.complete, result.chunks, len(reply.error_body), result.done

    def _feed(self, data: bytes, now: float) -> None:
        """Bytes of the reply that arrived at `now`."""
        self.got_bytes = True
        reply = self.reply
        if reply is None or reply.complete:  # bytes nobody asked for: not HTTP we can follow
            if reply is not None:
                reply.keep_alive = False
            if self.returned:
                self.close()
            return
        if reply.feed(data, now):
            if reply.complete:
                self._message_complete()
            else:
                self._wake()

    def _message_complete(self) -> None:
        if self.returned:  # the caller left at [DONE]; the connection is now clean
            if self.reply is not None and self.reply.keep_alive and not self.lost:
                self.client._put_idle(self)
            else:
                self.close()
        self._wake()
