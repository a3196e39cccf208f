"""Streaming client: one request, read to `[DONE]`, every chunk's arrival time and usage counts.

A small HTTP/1.1 client on asyncio (uvloop when the runner uses it), written so that the load generator is not
what a benchmark measures (numbers in ../benchmarks/README.md):
- The whole per-token path runs in the socket's read callback: chunked decoding, SSE events and the
  `StreamResult` update, with no stream reader, task wake-up or per-read timer in between; after the first
  text only the `usage` object of a chunk is parsed. Against the aiohttp reader it replaced: 1.3x the ingest
  rate, about 30 % less CPU per token.
- Optionally (`StreamClient.rx_timestamps`), the arrival time is the kernel's receive timestamp (`SO_TIMESTAMPNS`,
  plain http on Linux); by default it is the time the process read the bytes (see the class attribute).
- While a client is open, the objects that existed before are frozen out of the cyclic GC's full passes,
  which otherwise stall the loop for tens of milliseconds on a large heap.
It speaks what the toolkit needs: POST with a JSON body, keep-alive, `Content-Length` / chunked / read-to-close
bodies, http and https.

A `StreamResult` is filled while the stream runs, so a cancelled request still leaves what it measured in the
caller's hands.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
import ssl
import struct
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

import orjson

from toolkit import __version__
from toolkit.secrets import redact
from toolkit.sse import SSEDecoder

Endpoint = Literal["chat", "completions"]
ENDPOINT_PATHS: dict[str, str] = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
STREAM_OPTIONS = {"include_usage": True, "continuous_usage_stats": True}
MAX_ERROR_BODY = 64 * 1024
# recvmsg allocates its buffer on every call; below glibc's mmap threshold (128 KiB) that is a plain malloc
# (in isolation 256 KiB cost an mmap/munmap pair per read: 28 vs 6 us per 300-byte read).
READ_SIZE = 64 * 1024
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_RX_TIMESTAMPS = sys.platform.startswith("linux") and hasattr(socket.socket, "recvmsg")
_TIMESPEC = struct.Struct("@qq")


@dataclass
class StreamResult:
    """What one streamed request measured. Times are `time.perf_counter()` seconds."""

    started: float = 0.0
    first_token_at: float | None = None
    # (arrival time, cumulative completion tokens) for every chunk that raised the count.
    token_events: list[tuple[float, int]] = field(default_factory=list)
    chunks: int = 0
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int = 0
    done: bool = False
    cancelled: bool = False
    error: str | None = None
    ended: float | None = None

    @property
    def ttft_s(self) -> float | None:
        """Start to first text; a reply whose only token printed no text falls back to that token."""
        first = self.first_token_at
        if first is None and self.token_events:
            first = self.token_events[0][0]
        return None if first is None else first - self.started


def build_request(
    endpoint: Endpoint, model: str, prompt: str, max_tokens: int, *, ignore_eos: bool = True
) -> tuple[str, dict[str, Any]]:
    """Path and JSON body of a streamed request as docs/METHOD.md, Prompts, prescribes."""
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": STREAM_OPTIONS,
        "ignore_eos": ignore_eos,
        "temperature": 0.0,
    }
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return ENDPOINT_PATHS[endpoint], body


def _has_text(choice: dict[str, Any]) -> bool:
    delta = choice.get("delta")
    if delta is not None:
        return bool(delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning"))
    return bool(choice.get("text"))


class StreamClient:
    """Keep-alive connections to one server; `stream()` runs one request and fills a `StreamResult`."""

    # True: arrival times from the kernel's receive timestamps (plain http on Linux). Off by default: the kernel
    # stamps CLOCK_REALTIME, and a step of that clock (seen on this VM) would move tokens out of their window;
    # the default is the read time in the process, on perf_counter like every other time.
    rx_timestamps: bool = False

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
            raise ValueError(f"base_url: expected http(s)://host[:port][/prefix], got {base_url!r}")
        self._host = url.hostname
        self._tls = url.scheme == "https"
        self._port = url.port or (443 if self._tls else 80)
        self._prefix = url.path.rstrip("/")
        default_port = self._port == (443 if self._tls else 80)
        host = f"[{self._host}]" if ":" in self._host else self._host
        head = [f"Host: {host if default_port else f'{host}:{self._port}'}", "Content-Type: application/json",
                "Accept: text/event-stream", f"User-Agent: vllm-speed-toolkit/{__version__}"]  # fmt: skip
        self._api_key = api_key
        if api_key:
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
        _freeze_heap()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._entered = False
        for conn in list(self._open):
            conn.close()
        self._idle.clear()
        self._open.clear()
        _unfreeze_heap()

    async def stream(self, path: str, body: dict[str, Any], result: StreamResult | None = None) -> StreamResult:
        """Send one streamed request and read it to `[DONE]`; errors are recorded, never raised.

        Cancellation marks the result `cancelled` and propagates; the result keeps what was measured.
        """
        assert self._entered, "use StreamClient as an async context manager"
        result = result if result is not None else StreamResult()
        result.started = time.perf_counter()
        payload = orjson.dumps(body)
        request = (b"POST %s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n" % (
            (self._prefix + path).encode("latin-1"), self._headers, len(payload))) + payload  # fmt: skip
        conn: _Connection | None = None
        try:
            for attempt in (0, 1):
                conn, reused = await self._acquire()
                await conn.send(request, result)
                await self._wait(conn)
                # A kept-alive connection the server had just closed: nothing was received, so send again once.
                if conn.closed_before_response and reused and attempt == 0:
                    conn = None
                    continue
                break
            assert conn is not None
            if conn.bad_head:
                result.error = "malformed HTTP response from the server"
            elif not conn.head_done:
                result.error = "the server closed the connection before the response"
            elif conn.status != 200:
                text = bytes(conn.error_body).decode("utf-8", "replace")[:300]
                # Some servers echo the key they rejected; an error is stored, the key must not be.
                result.error = redact(f"HTTP {conn.status}: {text.strip()}", self._api_key)
            elif not result.done and result.error is None:
                cut = " (cut mid-event)" if conn.decoder.pending.strip() else ""
                result.error = "stream ended before [DONE]" + cut
        except asyncio.CancelledError:
            result.cancelled = True
            if conn is not None:
                conn.close()
            raise
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
            if conn is not None:
                conn.release()
        return result

    async def _acquire(self) -> tuple[_Connection, bool]:
        while self._idle:
            conn = self._idle.pop()
            if conn.usable:
                return conn, True
            conn.close()
        loop = asyncio.get_running_loop()
        try:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation that arrives as
            # the connection completes (the stream then runs on after its cell ended) or drop a connection
            # made just as it was cancelled (left open when the loop closes).
            async with asyncio.timeout(self._connect_timeout_s):
                if self.rx_timestamps and not self._tls and _RX_TIMESTAMPS:
                    conn = _Connection(self)
                    await conn.open_socket(loop, self._host, self._port)
                else:
                    _, conn = await loop.create_connection(
                        lambda: _Connection(self), self._host, self._port, ssl=self._ssl,
                        server_hostname=self._host if self._tls else None,
                    )  # fmt: skip
        except TimeoutError:
            where = f"{self._host}:{self._port}"
            raise ConnectError(f"connect timeout: {where} after {self._connect_timeout_s:g} s") from None
        except OSError as exc:
            raise ConnectError(f"cannot connect to {self._host}:{self._port}: {exc}") from None
        self._open.add(conn)
        return conn, False

    async def _wait(self, conn: _Connection) -> None:
        """Until the reply is complete (or `[DONE]`); TimeoutError after `read_timeout_s` without any data."""
        waiter = conn.waiter
        assert waiter is not None
        while not waiter.done():
            remaining = conn.last_data + self._read_timeout_s - time.perf_counter()
            if remaining <= 0:
                raise TimeoutError
            await asyncio.wait((waiter,), timeout=remaining)
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


class ConnectError(Exception):
    """A connection to the server could not be opened (refused, unreachable, timed out)."""


_frozen = 0


def _freeze_heap() -> None:
    """Keep the objects alive before a run out of the cyclic GC's full passes while clients are open.

    A full collection walks every tracked object (a notebook's heap: hundreds of thousands); measured here,
    that stalled the event loop 50-110 ms, so several tokens of every stream came in one read and lost their
    own arrival times. Frozen objects are still freed by reference counting; `__aexit__` unfreezes them.
    """
    global _frozen
    if _frozen == 0:
        gc.collect()
        gc.freeze()
    _frozen += 1


def _unfreeze_heap() -> None:
    global _frozen
    _frozen = max(0, _frozen - 1)
    if _frozen == 0:
        gc.unfreeze()


class _Connection(asyncio.Protocol):
    """One keep-alive connection, one request at a time; parses the reply as bytes arrive."""

    def __init__(self, client: StreamClient) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.sock: socket.socket | None = None  # socket mode: read here with recvmsg (kernel timestamps)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.result: StreamResult | None = None
        self.last_data = 0.0
        self.lost = False
        self.returned = True  # the caller is done with the current request
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.buf = b""
        self.head_done = False
        self.mode = ""  # "chunked" | "length" | "close"
        self.remaining = 0  # length mode: bytes left; chunked mode: bytes left of the current chunk (+2 for CRLF)
        self.keep_alive = True
        self.complete = False
        self.got_bytes = False
        self.error_body = bytearray()
        self.bad_head = False
        self.decoder = SSEDecoder()

    # -- the caller's side
    @property
    def usable(self) -> bool:
        if self.sock is not None:
            return not self.lost and self.complete
        return not self.lost and self.transport is not None and not self.transport.is_closing() and self.complete

    @property
    def closed_before_response(self) -> bool:
        return self.lost and not self.got_bytes

    async def send(self, request: bytes, result: StreamResult) -> None:
        self._reset()
        self.result = result
        self.returned = False
        loop = asyncio.get_running_loop()
        self.waiter = loop.create_future()
        self.last_data = time.perf_counter()
        if self.lost:
            self.waiter.set_result(None)
        elif self.sock is not None:
            try:
                sent = self.sock.send(request)
                if sent < len(request):
                    await loop.sock_sendall(self.sock, request[sent:])
            except (BlockingIOError, InterruptedError):
                await loop.sock_sendall(self.sock, request)
            except OSError:
                self._socket_lost()
        elif self.transport is not None:
            self.transport.write(request)
        else:
            self.waiter.set_result(None)

    # -- socket mode: recvmsg with the kernel's receive timestamp
    async def open_socket(self, loop: asyncio.AbstractEventLoop, host: str, port: int) -> None:
        error: OSError | None = None
        for family, kind, proto, _, addr in await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM):
            sock = socket.socket(family, kind, proto)
            sock.setblocking(False)
            try:
                await loop.sock_connect(sock, addr)
            except OSError as exc:
                sock.close()
                error = exc
                continue
            except BaseException:
                sock.close()
                raise
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            self.sock, self.loop = sock, loop
            self.client._open.add(self)
            loop.add_reader(sock.fileno(), self._readable)
            return
        raise error or OSError(f"no address for {host}")

    def _readable(self) -> None:
        sock = self.sock
        if sock is None:
            return
        try:
            data, ancillary, _, _ = sock.recvmsg(READ_SIZE, 64)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._socket_lost()
            return
        if not data:
            self._socket_lost()
            return
        now = None
        for level, kind, cdata in ancillary:
            if kind == SO_TIMESTAMPNS and level == socket.SOL_SOCKET and len(cdata) >= 16:
                sec, nsec = _TIMESPEC.unpack_from(cdata)
                # The kernel stamps arrival on CLOCK_REALTIME; carry it to the perf_counter scale of all other
                # times: now (perf_counter) minus how long ago it arrived (realtime, exact in integer ns).
                now = time.perf_counter() + (sec * 1_000_000_000 + nsec - time.time_ns()) * 1e-9
        self._feed(data, time.perf_counter() if now is None else now)

    def _socket_lost(self) -> None:
        if self.sock is not None:
            if self.loop is not None:
                self.loop.remove_reader(self.sock.fileno())
            self.sock.close()
            self.sock = None
            self.connection_lost(None)

    def release(self) -> None:
        """The caller is done: keep the connection for the next request if its reply ends cleanly."""
        result, self.result = self.result, None
        self.returned = True
        if self.lost or not self.keep_alive:
            self.close()
        elif self.complete:
            self.client._put_idle(self)
        elif not (result is not None and result.done and result.error is None):
            self.close()
        # else: left at [DONE] before the terminating chunk; _message_complete keeps it when that arrives

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()
        if self.sock is not None:
            if self.loop is not None and not self.loop.is_closed():
                self.loop.remove_reader(self.sock.fileno())
            self.sock.close()
            self.sock = None
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
        if self.mode == "close" and self.head_done and not self.complete:
            self._message_complete()
        self.client._forget(self)
        self._wake()

    def eof_received(self) -> bool | None:
        return False  # close the transport; connection_lost follows

    def data_received(self, data: bytes) -> None:
        self._feed(data, time.perf_counter())

    def _feed(self, data: bytes, now: float) -> None:
        """Bytes of the reply that arrived at `now`."""
        self.last_data = time.perf_counter()
        self.got_bytes = True
        if self.complete:  # bytes after the end of the reply: not HTTP we can follow
            self.keep_alive = False
            if self.returned:
                self.close()
            return
        buf = self.buf + data if self.buf else data
        self.buf = b""
        if self.mode == "chunked":  # the streaming case, first
            self._chunked(buf, now)
            return
        while not self.head_done:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                self.buf = buf
                return
            if not self._parse_head(buf[:end]):
                self.bad_head = True
                self.keep_alive = False
                self._message_complete()
                return
            buf = buf[end + 4 :]  # after a 1xx interim reply, the real head follows
        if self.mode == "chunked":
            self._chunked(buf, now)
        elif self.mode == "length":
            piece = buf[: self.remaining]
            self.remaining -= len(piece)
            if piece:
                self._body(piece, now)
            if self.remaining == 0 and not self.complete:
                self._message_complete()
        elif buf:
            self._body(buf, now)

    # -- HTTP/1.1 framing
    def _parse_head(self, head: bytes) -> bool:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            return False
        self.status = int(parts[1])
        if 100 <= self.status < 200:
            self.status = 0
            return True
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        self.keep_alive = parts[0] != "HTTP/1.0" and headers.get("connection", "").lower() != "close"
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self.mode, self.remaining = "chunked", -1
        elif "content-length" in headers:
            self.mode, self.remaining = "length", int(headers["content-length"])
        else:
            self.mode, self.keep_alive = "close", False
        self.head_done = True
        if self.mode == "length" and self.remaining == 0:
            self._message_complete()
        return True

    def _chunked(self, buf: bytes, now: float) -> None:
        body = self._dechunk(buf)
        if body:
            self._body(body, now)
        if self.remaining == -3:
            self._message_complete()

    def _dechunk(self, buf: bytes) -> bytes:
        """Chunked transfer coding: the body bytes in `buf`; the rest of a partial size line is kept.

        `remaining`: -1 = a size line is next, -2 = the trailers are next, -3 = the reply is complete,
        n > 0 = bytes left of the current chunk, its closing CRLF included.
        """
        pos, size = 0, len(buf)
        remaining = self.remaining
        pieces = []
        while pos < size:
            if remaining == -1:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    break
                try:
                    n = int(buf[pos:eol].split(b";", 1)[0], 16)
                except ValueError:
                    self.bad_head = True
                    self.keep_alive = False
                    remaining = -3
                    break
                pos = eol + 2
                remaining = n + 2 if n else -2
            elif remaining >= 0:
                take = size - pos if size - pos < remaining else remaining
                data_len = take if take < remaining - 2 else remaining - 2
                if data_len > 0:
                    pieces.append(buf[pos : pos + data_len])
                pos += take
                remaining = remaining - take if take < remaining else -1
            elif remaining == -2:
                if buf.startswith(b"\r\n", pos):
                    pos += 2
                else:
                    end = buf.find(b"\r\n\r\n", pos)
                    if end < 0:
                        break
                    pos = end + 4
                remaining = -3
            else:  # -3: bytes after the end of the reply
                self.keep_alive = False
                pos = size
        self.remaining = remaining
        if pos < size:
            self.buf = buf[pos:]
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def _body(self, data: bytes, now: float) -> None:
        result = self.result
        if result is None:
            return
        if self.status != 200:
            if len(self.error_body) < MAX_ERROR_BODY:
                self.error_body += data
            return
        if result.done or result.error:
            return
        for event in self.decoder.feed(data):
            if event == b"[DONE]":
                result.done = True
                self._wake()
                return
            if not _apply_chunk(event, now, result):
                self.keep_alive = False
                self._wake()
                return

    def _message_complete(self) -> None:
        self.complete = True
        self.buf = b""
        if self.returned:  # the caller left at [DONE]; the connection is now clean
            if self.keep_alive and not self.lost:
                self.client._put_idle(self)
            else:
                self.close()
        self._wake()


def _apply_chunk(data: bytes, now: float, result: StreamResult) -> bool:
    """Update `result` from one chunk; False (with `error` set) when the stream must stop.

    Once the first text has arrived, only the usage matters: when `"usage"` is the chunk's last key (as vLLM
    writes it), just that object is parsed (inside a JSON string the quotes would be escaped, so the match
    is the key). Any other shape takes the full parse.
    """
    if result.first_token_at is not None:
        at = data.rfind(b'"usage":')
        if at > 0:
            try:
                usage = orjson.loads(data[at + 8 : -1])
            except orjson.JSONDecodeError:
                usage = None
            if type(usage) is dict:
                result.chunks += 1
                _apply_usage(usage, now, result)
                return True
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
    if result.first_token_at is None and any(_has_text(c) for c in chunk.get("choices") or ()):
        result.first_token_at = now
    usage = chunk.get("usage")
    if usage:
        _apply_usage(usage, now, result)
    return True


def _apply_usage(usage: dict[str, Any], now: float, result: StreamResult) -> None:
    result.prompt_tokens = usage.get("prompt_tokens", result.prompt_tokens)
    details = usage.get("prompt_tokens_details")
    if details and details.get("cached_tokens") is not None:
        result.cached_tokens = details["cached_tokens"]
    count = usage.get("completion_tokens") or 0
    if count > result.completion_tokens:
        result.completion_tokens = count
        result.token_events.append((now, count))
