"""Synthetic OpenAI-compatible streaming server with a known token schedule (benchmark load target).

Raw asyncio protocol (uvloop when available) so that the server itself costs a few microseconds per token
and is not what a client benchmark measures. Endpoints:

- `POST /v1/completions`, `POST /v1/chat/completions`: vLLM-format SSE, `usage` on every chunk (continuous
  usage stats), then a usage-only chunk and `data: [DONE]`. One token per chunk, one chunk per write. Paced
  streams share ticks on a global grid (multiples of `interval`), like an engine's decode steps: a stream
  joins at the first tick at or after `arrival + ttft`, then gets one token per tick (a late tick is not
  skipped, so timer lateness never accumulates). `interval_ms = 0` is "max ingest": chunks are written as
  fast as the socket takes them, `burst` events per write.
  Per request overrides in the body: `interval_ms`, `ttft_ms`, `burst`.
- `GET /v1/models`, `GET /metrics` (running/waiting/generated tokens), `GET /health`.
- Benchmark hooks: `POST /bench/config` (set defaults), `GET /bench/stats` (CPU, tokens, lateness: when each
  tick's last token was written, after the tick time), `GET /bench/log?clear=1` (send time of every token
  of each request that carried a `"user"` id: `{"user": [t1, t2, ...]}`, `time.perf_counter()` seconds, i.e.
  CLOCK_MONOTONIC, comparable with the client's clock in another process on Linux; NaN where the write took
  over 0.2 ms, so its time is uncertain).

Run: `.venv/bin/python benchmarks/synthetic_server.py --port 8765 --interval-ms 5 --cpu 1`
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import signal
import sys
import time
from array import array
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

import orjson

MODEL = "synthetic"
REF_MAX_S = 200e-6  # a logged send time is trusted when its write() took less than this
MAX_MODEL_LEN = 131072


class Config:
    interval_s = 0.005
    ttft_s: float | None = None  # None: one interval
    burst = 16  # chunks per write in max-ingest mode
    log = True  # keep per-token send times for requests with a "user" id


CONFIG = Config()


class Stats:
    running = 0
    requests = 0
    tokens = 0
    prompt_tokens = 0
    lateness: array = array("d")  # per paced tick: last token written - tick time, s (reset by /bench/stats?clear=1)
    logs: dict[str, array] = {}  # noqa: RUF012


STATS = Stats()
STATS.lateness = array("d")
STATS.logs = {}

HEAD_SSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
    b"transfer-encoding: chunked\r\ncache-control: no-cache\r\nconnection: keep-alive\r\n\r\n"
)
TOKEN_TEXT = b" tok"


def _chunked(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


class Emitter:
    """One streamed reply: pre-rendered chunk templates, a schedule, and the transport to write to."""

    __slots__ = (
        "base",
        "burst",
        "chat",
        "done_tokens",
        "handle",
        "head",
        "head_len",
        "interval",
        "log",
        "max_tokens",
        "prompt_tokens",
        "proto",
        "t0",
        "tail_final",
        "tail_tok",
        "ticker",
    )  # fmt: skip

    def __init__(self, proto: HttpProtocol, body: dict[str, Any], chat: bool) -> None:
        self.proto = proto
        self.chat = chat
        self.max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        interval_ms = body.get("interval_ms")
        self.interval = CONFIG.interval_s if interval_ms is None else float(interval_ms) / 1000
        ttft_ms = body.get("ttft_ms")
        ttft = (CONFIG.ttft_s if CONFIG.ttft_s is not None else self.interval) if ttft_ms is None else ttft_ms / 1000
        self.burst = int(body.get("burst") or CONFIG.burst)
        if chat:
            text = "".join(str(m.get("content", "")) for m in body.get("messages") or [])
        else:
            prompt = body.get("prompt", "")
            text = prompt if isinstance(prompt, str) else str(prompt)
        self.prompt_tokens = max(1, len(text) // 4)
        user = body.get("user")
        self.log: array | None = None
        if CONFIG.log and isinstance(user, str) and user:
            self.log = STATS.logs.setdefault(user, array("d"))
        rid = os.urandom(8).hex()
        created = int(time.time())
        model = orjson.dumps(body.get("model") or MODEL)
        if chat:
            self.base = b'{"id":"chatcmpl-%s","object":"chat.completion.chunk","created":%d,"model":%s,' % (
                rid.encode(), created, model)  # fmt: skip
            self.tail_tok = (b'"choices":[{"index":0,"delta":{"content":"' + TOKEN_TEXT +
                             b'"},"logprobs":null,"finish_reason":%s}],')  # fmt: skip
        else:
            self.base = b'{"id":"cmpl-%s","object":"text_completion","created":%d,"model":%s,' % (
                rid.encode(), created, model)  # fmt: skip
            self.tail_tok = (b'"choices":[{"index":0,"text":"' + TOKEN_TEXT +
                             b'","logprobs":null,"finish_reason":%s,"stop_reason":null}],')  # fmt: skip
        self.tail_final = b'"usage":{"prompt_tokens":%d,"total_tokens":%%d,"completion_tokens":%%d}}' % (
            self.prompt_tokens)  # fmt: skip
        self.head = (b"data: " + self.base + (self.tail_tok % b"null") +
                     b'"usage":{"prompt_tokens":%d,"total_tokens":' % self.prompt_tokens)  # fmt: skip
        self.head_len = len(self.head)
        self.done_tokens = 0
        self.handle: asyncio.TimerHandle | asyncio.Handle | None = None
        self.ticker: Ticker | None = None
        self.t0 = time.perf_counter() + ttft
        STATS.running += 1
        STATS.requests += 1
        STATS.prompt_tokens += self.prompt_tokens

    def _event(self, k: int) -> bytes:
        if k < self.max_tokens:  # the hot path: one pre-rendered head, two numbers
            tail = b'%d,"completion_tokens":%d}}\n\n' % (self.prompt_tokens + k, k)
            return b"%x\r\n%s%s\r\n" % (self.head_len + len(tail), self.head, tail)
        payload = (b"data: " + self.base + (self.tail_tok % b'"length"') +
                   (self.tail_final % (self.prompt_tokens + k, k)) + b"\n\n")  # fmt: skip
        return b"%x\r\n%s\r\n" % (len(payload), payload)

    def _closing(self) -> bytes:
        usage = self.tail_final % (self.prompt_tokens + self.max_tokens, self.max_tokens)
        return _chunked(b"data: " + self.base + b'"choices":[],' + usage + b"\n\n") + _chunked(
            b"data: [DONE]\n\n") + b"0\r\n\r\n"  # fmt: skip

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        head = HEAD_SSE
        if self.chat:
            role = (b'"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,'
                    b'"finish_reason":null}],')  # fmt: skip
            head += _chunked(b"data: " + self.base + role + (self.tail_final % (self.prompt_tokens, 0)) + b"\n\n")
        self.proto.transport.write(head)
        if self.max_tokens <= 0:
            self._finish()
        elif self.interval > 0:
            Ticker.get(loop, self.interval).add(self)
        else:
            self.handle = loop.call_soon(self._flood)

    def emit(self, target: float) -> bool:
        """Paced: send the next token (its scheduled time is `target`); True when the reply is complete."""
        k = self.done_tokens + 1
        event = self._event(k)
        if self.log is None:
            self.proto.transport.write(event)
        else:
            # The kernel hands the bytes over inside write(); a write that took long (the server was preempted)
            # leaves its send time uncertain, so it is logged as NaN and left out of the client's error.
            before = time.perf_counter()
            self.proto.transport.write(event)
            sent = time.perf_counter()
            self.log.append(sent if sent - before < REF_MAX_S else math.nan)
        self.done_tokens = k
        STATS.tokens += 1
        if k >= self.max_tokens:
            self._finish()
            return True
        return False

    def _flood(self) -> None:
        """Max ingest: write bursts while the socket takes them; wait for resume_writing when it does not."""
        self.handle = None
        if self.proto.paused:
            self.proto.on_resume = self._flood
            return
        k0 = self.done_tokens
        k1 = min(self.max_tokens, k0 + self.burst)
        self.proto.transport.write(b"".join([self._event(k) for k in range(k0 + 1, k1 + 1)]))
        if self.log is not None:
            sent = time.perf_counter()
            self.log.extend([sent] * (k1 - k0))
        self.done_tokens = k1
        STATS.tokens += k1 - k0
        if k1 >= self.max_tokens:
            self._finish()
        else:
            self.handle = self.proto.loop.call_soon(self._flood)

    def _finish(self) -> None:
        self.proto.transport.write(self._closing())
        self.handle = None
        self.stop()
        self.proto.emitter = None
        self.proto.process()  # a pipelined next request, if any

    def stop(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None
        if self.proto.on_resume == self._flood:
            self.proto.on_resume = None
        if self.ticker is not None:
            self.ticker.remove(self)
            self.ticker = None
        STATS.running -= 1


def _loop_time(loop: asyncio.AbstractEventLoop, perf_t: float) -> float:
    """Convert a perf_counter time to the loop's clock (uvloop's clock is not perf_counter)."""
    return perf_t - time.perf_counter() + loop.time()


class Ticker:
    """One timer for every stream of the same interval: ticks on a global grid (multiples of the interval).

    Like an inference engine's decode step, a tick sends one token to every running stream, in a stable order
    (arrival). A stream joins at the first grid tick at or after `arrival + ttft`. A late tick is not skipped:
    the next ones follow at once until the grid is caught up, so every stream keeps its token count on schedule.
    """

    tickers: ClassVar[dict[float, Ticker]] = {}

    def __init__(self, loop: asyncio.AbstractEventLoop, interval: float) -> None:
        self.loop, self.interval = loop, interval
        self.members: dict[Emitter, float] = {}  # emitter -> its first tick
        self.next_t: float | None = None
        self.handle: asyncio.TimerHandle | None = None

    @classmethod
    def get(cls, loop: asyncio.AbstractEventLoop, interval: float) -> Ticker:
        ticker = cls.tickers.get(interval)
        if ticker is None:
            ticker = cls.tickers[interval] = Ticker(loop, interval)
        return ticker

    def add(self, emitter: Emitter) -> None:
        first = math.ceil(emitter.t0 / self.interval) * self.interval
        self.members[emitter] = first
        emitter.ticker = self
        if self.next_t is None or first < self.next_t:
            self.next_t = first
            if self.handle is not None:
                self.handle.cancel()
            self.handle = self.loop.call_at(_loop_time(self.loop, first), self._tick)

    def remove(self, emitter: Emitter) -> None:
        self.members.pop(emitter, None)

    def _tick(self) -> None:
        self.handle = None
        while self.members:
            t = self.next_t
            assert t is not None
            if t > time.perf_counter() + 50e-6:
                break
            for emitter, first in list(self.members.items()):
                if first <= t + 1e-9 and emitter in self.members:
                    emitter.emit(t)
            STATS.lateness.append(time.perf_counter() - t)  # when the tick's last token was written
            self.next_t = t + self.interval
        if not self.members:
            self.next_t = None
            return
        upcoming = min(self.members.values())
        if upcoming > self.next_t:  # nobody due before a later joiner's first tick
            self.next_t = upcoming
        self.handle = self.loop.call_at(_loop_time(self.loop, self.next_t), self._tick)


class HttpProtocol(asyncio.Protocol):
    """Minimal HTTP/1.1 with keep-alive: Content-Length request bodies, chunked streamed replies."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.buffer = b""
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.emitter: Emitter | None = None
        self.paused = False
        self.on_resume: Any = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            import socket

            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.emitter is not None:
            self.emitter.stop()
            self.emitter = None

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        callback, self.on_resume = self.on_resume, None
        if callback is not None:
            callback()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.emitter is None:
            self.process()

    def process(self) -> None:
        while self.emitter is None and not self.transport.is_closing():
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end].decode("latin-1").split("\r\n")
            method, target, _ = [*head[0].split(" "), "", ""][:3]
            headers = {}
            for line in head[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length") or 0)
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            self.handle(method, target, body, headers.get("connection", "").lower() == "close")

    def reply(self, status: str, payload: bytes, ctype: str = "application/json", close: bool = False) -> None:
        head = (f"HTTP/1.1 {status}\r\ncontent-type: {ctype}\r\ncontent-length: {len(payload)}\r\n"
                f"connection: {'close' if close else 'keep-alive'}\r\n\r\n")  # fmt: skip
        self.transport.write(head.encode() + payload)
        if close:
            self.transport.close()

    def handle(self, method: str, target: str, raw: bytes, close: bool) -> None:
        url = urlsplit(target)
        path = url.path.rstrip("/")
        query = parse_qs(url.query)
        try:
            if method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
                body = orjson.loads(raw or b"{}")
                chat = path.endswith("chat/completions")
                if not body.get("stream"):
                    return self.reply("400 Bad Request", b'{"error":{"message":"only stream=true is served"}}')
                self.emitter = Emitter(self, body, chat)
                self.emitter.start(self.loop)
            elif method == "GET" and path == "/v1/models":
                data = [{"id": MODEL, "object": "model", "owned_by": "synthetic", "max_model_len": MAX_MODEL_LEN}]
                self.reply("200 OK", orjson.dumps({"object": "list", "data": data}), close=close)
            elif method == "GET" and path == "/health":
                self.reply("200 OK", b"", close=close)
            elif method == "GET" and path == "/metrics":
                self.reply("200 OK", _metrics_text().encode(), "text/plain; version=0.0.4", close=close)
            elif method == "POST" and path == "/bench/config":
                for key, value in orjson.loads(raw or b"{}").items():
                    if key == "interval_ms":
                        CONFIG.interval_s = float(value) / 1000
                    elif key == "ttft_ms":
                        CONFIG.ttft_s = None if value is None else float(value) / 1000
                    elif key in ("burst", "log"):
                        setattr(CONFIG, key, type(getattr(CONFIG, key))(value))
                self.reply("200 OK", orjson.dumps(_config_dict()), close=close)
            elif method == "GET" and path == "/bench/stats":
                self.reply("200 OK", orjson.dumps(_stats(clear="1" in query.get("clear", []))), close=close)
            elif method == "GET" and path == "/bench/log":
                logs = {k: v.tolist() for k, v in STATS.logs.items()}
                if "1" in query.get("clear", []):
                    STATS.logs = {}
                self.reply("200 OK", orjson.dumps(logs), close=close)
            else:
                self.reply("404 Not Found", b'{"error":{"message":"not found"}}', close=close)
        except (ValueError, TypeError) as exc:
            self.reply("400 Bad Request", orjson.dumps({"error": {"message": str(exc)}}), close=close)


def _config_dict() -> dict[str, Any]:
    return {"interval_ms": CONFIG.interval_s * 1000, "ttft_ms": None if CONFIG.ttft_s is None else CONFIG.ttft_s * 1000,
            "burst": CONFIG.burst, "log": CONFIG.log}  # fmt: skip


def _stats(clear: bool) -> dict[str, Any]:
    late = sorted(STATS.lateness)

    def pct(q: float) -> float | None:
        return None if not late else late[min(len(late) - 1, int(q / 100 * len(late)))] * 1000

    times = os.times()
    out = {"cpu_s": time.process_time(), "user_s": times.user, "sys_s": times.system, "wall": time.perf_counter(),
           "tokens": STATS.tokens,
           "requests": STATS.requests, "running": STATS.running, "late_n": len(late), "late_p50_ms": pct(50),
           "late_p99_ms": pct(99), "late_max_ms": late[-1] * 1000 if late else None}  # fmt: skip
    if clear:
        STATS.lateness = array("d")
    return out


def _metrics_text() -> str:
    return (
        f'vllm:num_requests_running{{model_name="{MODEL}"}} {STATS.running}\n'
        f'vllm:num_requests_waiting{{model_name="{MODEL}"}} 0\n'
        f'vllm:generation_tokens_total{{model_name="{MODEL}"}} {STATS.tokens}\n'
        f'vllm:prompt_tokens_total{{model_name="{MODEL}"}} {STATS.prompt_tokens}\n'
        f'vllm:request_success_total{{model_name="{MODEL}"}} {STATS.requests - STATS.running}\n'
        f'vllm:kv_cache_usage_perc{{model_name="{MODEL}"}} 0.0\n'
    )


def pin(cpu: int | None) -> None:
    if cpu is None or not hasattr(os, "sched_setaffinity"):
        return
    with contextlib.suppress(OSError, ValueError):
        if cpu in os.sched_getaffinity(0) or cpu < (os.cpu_count() or 1):
            os.sched_setaffinity(0, {cpu})


async def serve(host: str, port: int, tls: tuple[str, str] | None = None) -> None:
    loop = asyncio.get_running_loop()
    context = None
    if tls:
        import ssl

        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(*tls)
    server = await loop.create_server(HttpProtocol, host, port, backlog=4096, reuse_address=True, ssl=context)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    print(f"synthetic server on http://{host}:{port} interval_ms={CONFIG.interval_s * 1000:g}", flush=True)
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument("--interval-ms", type=float, default=5.0, help="time between tokens; 0 = max ingest")
    ap.add_argument("--ttft-ms", type=float, default=None, help="delay to the first token (default: one interval)")
    ap.add_argument("--burst", type=int, default=16, help="chunks per write in max-ingest mode")
    ap.add_argument("--cpu", type=int, default=1, help="pin to this core (-1: do not pin)")
    ap.add_argument("--nice", type=int, default=0, help="change this process's nice value (negative needs root)")
    ap.add_argument("--tls", nargs=2, metavar=("CERTFILE", "KEYFILE"), help="serve https (for client tests)")
    ap.add_argument("--no-uvloop", action="store_true")
    args = ap.parse_args(argv)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        sys.exit("synthetic server: loopback addresses only")
    CONFIG.interval_s = args.interval_ms / 1000
    CONFIG.ttft_s = None if args.ttft_ms is None else args.ttft_ms / 1000
    CONFIG.burst = args.burst
    pin(None if args.cpu < 0 else args.cpu)
    if args.nice:
        with contextlib.suppress(OSError):
            os.nice(args.nice)
    if args.no_uvloop:
        asyncio.run(serve(args.host, args.port, args.tls))
    else:
        try:
            import uvloop
        except ImportError:
            asyncio.run(serve(args.host, args.port, args.tls))
        else:
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                runner.run(serve(args.host, args.port, args.tls))


if __name__ == "__main__":
    main()
