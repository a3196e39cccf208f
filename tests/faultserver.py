"""A small fault-injecting OpenAI-compatible server that mimics vLLM enough for the toolkit's runner.

It stands in only for the faults a real vLLM cannot be made to show: HTTP 5xx, 401 mid-run, a stream
cut mid-way, a stream kept open by SSE keep-alive comments without a token or by trickling events that carry none,
an error quoting the key whole and in part past any cut ("echo-500"), more tokens than asked for, prompt or cached
token counts no prompt sent can hold ("huge-prompt-usage", "huge-cached-usage"), 100 events of 1 MB for the few
tokens asked ("huge-events"), malformed SSE (bad JSON, fields of the wrong type, an event without its end), a stalled
stream, an error event in the stream, `/metrics` gone, NaN, a gateway's own, trickling, a gzip bomb, or a generation
counter that goes back or jumps by a million at every scrape, other endpoints answering 200 with what vLLM never
sends, and a final chunk's per-request `metrics` that is malformed or contradicts the client's clock.
Everything else is tested against the embedded vLLM.

    with FaultServer() as server:             # aiohttp in a background thread, free 127.0.0.1 port
        server.set_fault("500", after=1)      # the 2nd completion request from now on fails, and all later
        server.set_fault("cut", after=1, times=1)  # only the 2nd one is cut
        server.set_metrics_fault("404")       # /metrics answers 404 ("drop": connection closed, no answer;
                                              # "gateway": 200 with a gateway's own metrics, none of vLLM's;
                                              # "trickle": a byte every 0.5 s; "gzip": a gzip bomb;
                                              # "nan": the running gauge reads NaN; "counter-back" /
                                              # "counter-jump": the generation counter moves by
                                              # -/+ COUNTER_STEP at every scrape)
        server.set_metrics_fault("drop", after=3)  # ... once 3 more streamed requests have started
        server.clear_fault()
        server.set_reply("/version", "<html>gateway</html>", "text/html")  # a canned 200 reply for a path
        server.set_fault("metrics-malformed", times=2)  # 2 streams end in `"metrics": {"queue_time_ms": "soon"}`
        server.completion_requests()          # the request log, filtered

The same controls are reachable over HTTP: `POST /_fault {"kind": ..., "after": K, "times": M}`,
`POST /_metrics_fault {"kind": one of METRICS_FAULTS or null, "after": K}`, `GET /_log`.

With `FaultServer(per_request_metrics=True)` (vLLM's `--enable-per-request-metrics`) every stream's final usage
chunk carries a `metrics` object: the request's queue, TTFT from scheduling and generation time, as this server
measured them on its own clock (`time.perf_counter()`, the client's clock too: the client's TTFT holds the queue and
the server's TTFT). The "metrics-*" fault kinds put their own object there, with or without it. With
`timing_histograms=True`, `/metrics` also holds vLLM's queue, prefill and decode time histograms of the finished
requests. With `external_tier=True` it stands for vLLM with a KV connector's external tier (LMCache, offloading; the
embedded vLLM has none): `/metrics` also holds `vllm:external_prefix_cache_queries/hits` and
`vllm:prompt_tokens_by_source`, and every request finds the first `server.external_hit_tokens` tokens (default 0) of
what the GPU cache missed in that tier, at most all but its last token, counted in its usage's `cached_tokens` too.

A stream's text is " tok" a token, unless `server.reply_text` is set (or `FaultServer(reply_text=...)`): then the
tokens of every reply spell that text, split into as many pieces as the request asked for tokens (structured
output: a JSON reply, valid or not). The log records each completion request's body as sent (`body`, its text) and
`response_format` (None: none), and of a streamed one the text it spelled (`reply_text`, None: " tok"), the tool
call it streamed (`tool_call`, None: none) and whether it reached `[DONE]` (`done`).
With `server.tool_call = (NAME, ARGUMENTS)` (or `FaultServer(tool_call=...)`) a chat request that carries `tools`
streams one tool call as vLLM does: the first token's chunk holds `delta.tool_calls[0]` with its id, type and
`function.name` and empty arguments, the next tokens ARGUMENTS split into as many pieces. The log records each
request's `tools` and `tool_choice`, and its `priority` (None: none).

With `FaultServer(embeddings=True)` it also serves `POST /v1/embeddings` as vLLM's pooling runner does (without it,
404 as a generating vLLM answers): each input (a list of texts) a vector of `EMBEDDING_DIMENSIONS`, its tokens counted
as a prompt's and added to `vllm:prompt_tokens_total`, after `embedding_delay_s`; the "500" fault applies to it. With
`generation=False` as well it serves embeddings only, as a pooling vLLM: its completion routes answer 404.

Token counts (`/tokenize` and the usage of a stream) are whitespace-split words of the prompt, or of
the messages' contents (of content parts, the text parts': an image counts none), plus `TEMPLATE_TOKENS`; the
toolkit's prompt builder converges on that exactly.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import gzip
import hashlib
import json
import socket
import threading
import time
import uuid
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

MODEL = "fault-model"
EMBEDDING_DIMENSIONS = 8
TEMPLATE_TOKENS = 8
FAULT_KINDS = ("500", "401", "cut", "malformed", "stall", "usage-not-object", "choices-object", "string-count",
               "unterminated", "error-event", "keepalive", "echo-500", "trickle", "absurd-usage",
               "echo-encoded", "huge-prompt-usage", "huge-cached-usage", "huge-events", "metrics-malformed",
               "metrics-contradicting")  # fmt: skip
# "echo-encoded": each hit echoes the key presented in the next of these spellings, which a plain scan for the key
# does not find: UTF-16 and UTF-32 bodies, NULs between its characters in a JSON message, every byte
# percent-encoded, base64 inside `user:KEY`, a response header, and an in-stream error event with NULs.
ECHO_ENCODINGS = ("utf-16", "utf-32", "nul-json", "percent", "base64", "header", "sse-nul")
ECHO_PAD = 200  # "echo-500" puts the key this far into its message: past where a cut-then-redact client cut
_LOG_ENTRY: ContextVar[dict[str, Any]] = ContextVar("log_entry")  # the request being handled: its log entry
# Events of the wrong-typed stream faults, sent after two good tokens.
WRONG_EVENTS = {
    "usage-not-object": {"choices": [{"index": 0, "delta": {"content": " x"}}], "usage": "many"},
    "choices-object": {"choices": {"index": 0, "delta": {"content": " x"}}, "usage": None},
    "string-count": {"choices": [{"index": 0, "delta": {"content": " x"}}],
                     "usage": {"prompt_tokens": 9, "completion_tokens": "3"}},
}  # fmt: skip
UNTERMINATED_BYTES = 4 * 1024 * 1024  # sent as one event without its blank line, then nothing
# The usage of every event of the stream, else a normal stream: counts no prompt sent can hold.
USAGE_FAULTS: dict[str, dict[str, int]] = {"huge-prompt-usage": {"prompt_tokens": 2**62},
                                           "huge-cached-usage": {"cached_tokens": 2**63 - 1}}  # fmt: skip
# A normal stream whose final chunk's `metrics` (vLLM's per-request timing) is malformed, or says the request queued
# for `CONTRADICTING_QUEUE` times its real TTFT and `CONTRADICTING_EXTRA_MS` more: more than the client can have
# waited however loaded the machine (ten times alone was not: a request's client TTFT exceeded it in a flake hunt).
TIMING_FAULTS = ("metrics-malformed", "metrics-contradicting")
MALFORMED_TIMING = "soon"  # "metrics-malformed": the queue_time_ms it gives
CONTRADICTING_QUEUE = 10
CONTRADICTING_EXTRA_MS = 60_000.0  # a minute: longer than any request of the tests waits
HUGE_EVENTS, HUGE_EVENT_BYTES = 100, 1_000_000  # "huge-events": this many events of this much text, usage unchanged
METRICS_FAULTS = ("404", "drop", "nan", "gateway", "trickle", "gzip", "counter-back", "counter-jump")
MAX_BODY_BYTES = 512 * 1024 * 1024  # request bodies it reads (aiohttp's default 1 MiB; vLLM sets none)
COUNTER_STEP = 1_000_000  # "counter-back" / "counter-jump": the generation counter's move at every scrape
COUNTER_BASE = 10**9  # "counter-back" starts this high, so that the counter it reports stays >= 0
# What a gateway or proxy in front of vLLM answers on /metrics: its own metrics, none of vLLM's.
GATEWAY_METRICS = ("# HELP gateway_requests_total Requests proxied.\n# TYPE gateway_requests_total counter\n"
                   "gateway_requests_total 12.0\nprocess_cpu_seconds_total 3.25\n")  # fmt: skip


@functools.cache
def gzip_bomb() -> bytes:
    """64 MiB of metrics text in about 64 KiB: a client that inflates it holds it all (made once, when armed)."""
    return gzip.compress(b"# " + b"x" * (64 * 1024 * 1024) + b"\n", compresslevel=9)


@dataclass
class Fault:
    """A fault for completion requests: the first `after` pass, then `times` of them fail (None: all). With
    `while_busy`, only a request that arrives while another stream is running gets it (a cell of concurrency 2
    and more, not one of concurrency 1, whose requests follow each other on one keep-alive connection)."""

    kind: str
    after: int = 0
    times: int | None = None
    while_busy: bool = False
    seen: int = 0  # completion requests since the fault was armed
    hit: int = 0  # requests the fault was applied to

    def take(self, running: int) -> bool:
        """Count one completion request, arriving while `running` others stream; True when it gets the fault."""
        self.seen += 1
        if self.seen <= self.after or (self.times is not None and self.hit >= self.times):
            return False
        if self.while_busy and running == 0:
            return False
        self.hit += 1
        return True


@dataclass
class ServerState:
    """Counters behind `/metrics`, and the request log."""

    running: int = 0
    generation_tokens: int = 0
    prompt_tokens: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    external_queries: int = 0  # with `external_tier`: the tokens the GPU cache missed, looked up in the tier
    external_hits: int = 0
    computed_tokens: int = 0  # prompt tokens neither tier held (vllm:prompt_tokens_by_source, local_compute)
    requests_total: int = 0
    # Of the finished streams, on the server's clock (seconds): vLLM's queue, prefill and decode time histograms.
    queue_s: float = 0.0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    timed: int = 0
    seen_prompts: set[str] = field(default_factory=set)
    log: list[dict[str, Any]] = field(default_factory=list)


def count_tokens(body: dict[str, Any]) -> int:
    """Words of the prompt (or of the messages' contents: a list of parts, its text parts) plus the template's
    tokens; an image part counts none."""
    if "messages" in body:
        text = " ".join(_message_text(m.get("content")) for m in body["messages"])
    else:
        prompt = body.get("prompt", "")
        text = prompt if isinstance(prompt, str) else " ".join(map(str, prompt))
    return len(text.split()) + TEMPLATE_TOKENS


def _message_text(content: Any) -> str:
    if isinstance(content, list):  # OpenAI content parts: text beside images
        return " ".join(str(p.get("text") or "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return str(content or "")


class FaultServer:
    """The fault server, run on its own event loop in a daemon thread. Use as a context manager."""

    def __init__(
        self,
        *,
        api_key: str | None = None,
        max_model_len: int = 4096,
        kv_cache_size_tokens: int = 1_000_000,
        token_interval_s: float = 0.02,
        tokens_per_chunk: int = 1,
        model: str = MODEL,
        port: int = 0,
        per_request_metrics: bool = False,
        timing_histograms: bool = False,
        external_tier: bool = False,
        reply_text: str | None = None,
        tool_call: tuple[str, str] | None = None,
        embeddings: bool = False,
        embedding_delay_s: float = 0.005,
        adapters: tuple[str, ...] = (),
        generation: bool = True,
    ) -> None:
        self.api_key = api_key
        self.max_model_len = max_model_len
        self.kv_cache_size_tokens = kv_cache_size_tokens
        self.token_interval_s = token_interval_s
        self.tokens_per_chunk = tokens_per_chunk
        self.model = model
        self.per_request_metrics = per_request_metrics  # a `metrics` object on every final usage chunk
        self.timing_histograms = timing_histograms  # vLLM's request timing histograms on /metrics
        self.external_tier = external_tier  # a KV connector's external tier: its counters on /metrics
        self.reply_text = reply_text  # the text every reply spells over its tokens (None: " tok" a token)
        self.tool_call = tool_call  # (name, arguments): the tool call a request with tools streams (None: text)
        self.embeddings = embeddings  # POST /v1/embeddings served (else 404)
        self.embedding_delay_s = embedding_delay_s  # the time each embeddings request takes
        # LoRA adapters served beside the model: listed in /v1/models as vLLM lists them (parent: the model, no
        # max_model_len of their own), and answered as the model is
        self.adapters = adapters
        self.generation = generation  # the completion routes served (else 404, as a pooling vLLM has none)
        self.external_hit_tokens = 0  # with it: the tokens each request finds there (of those the GPU cache missed)
        self.state = ServerState()
        self.fault: Fault | None = None
        self.metrics_fault: str | None = None
        self.replies: dict[str, tuple[str, str]] = {}  # path -> (body, content type) of a canned 200 reply
        self._metrics_fault_from = 0
        self._counter_offset = 0  # what "counter-back" / "counter-jump" add to the generation counter
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", port))
        self.port: int = self._sock.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}"

    # ---- control (thread-safe) -------------------------------------------------------------------

    def set_fault(self, kind: str, *, after: int = 0, times: int | None = None, while_busy: bool = False) -> None:
        if kind not in FAULT_KINDS:
            raise ValueError(f"fault kind {kind!r}; allowed: {', '.join(FAULT_KINDS)}")
        with self._lock:
            self.fault = Fault(kind, after, times, while_busy)

    def clear_fault(self) -> None:
        with self._lock:
            self.fault = None

    def set_reply(self, path: str, body: str | None, content_type: str = "application/json") -> None:
        """Answer every request for `path` with 200 and `body` (None: the normal handler again)."""
        if body is None:
            self.replies.pop(path, None)
        else:
            self.replies[path] = (body, content_type)

    def set_metrics_fault(self, kind: str | None, *, after: int = 0) -> None:
        """Make `/metrics` fail ("404", "drop" or "nan"), from `after` completion requests on; None heals it."""
        if kind is not None and kind not in METRICS_FAULTS:
            raise ValueError(f"metrics fault {kind!r}; allowed: {', '.join(METRICS_FAULTS)} or None")
        self._metrics_fault_from = self.state.requests_total + after
        self._counter_offset = COUNTER_BASE if kind == "counter-back" else 0
        if kind == "gzip":
            gzip_bomb()  # made now, not while a client waits for it
        self.metrics_fault = kind

    def _metrics_failing(self) -> str | None:
        return self.metrics_fault if self.state.requests_total >= self._metrics_fault_from else None

    @property
    def log(self) -> list[dict[str, Any]]:
        return list(self.state.log)

    def completion_requests(self) -> list[dict[str, Any]]:
        """The completion requests sent (POSTs: a GET asks whether the route exists, toolkit.matrix.embeddings)."""
        paths = ("/v1/chat/completions", "/v1/completions")
        return [e for e in self.log if e["path"] in paths and e["method"] == "POST"]

    def _take_fault(self) -> str | None:
        with self._lock:
            if self.fault is not None and self.fault.take(self.state.running):
                return self.fault.kind
        return None

    # ---- lifecycle -------------------------------------------------------------------------------

    def start(self) -> FaultServer:
        ready = threading.Event()
        errors: list[BaseException] = []

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._start_site())
            except BaseException as exc:  # reported to start()
                errors.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

        self._thread = threading.Thread(target=serve, name=f"faultserver-{self.port}", daemon=True)
        self._thread.start()
        ready.wait(10)
        if errors:
            raise errors[0]
        return self

    async def _start_site(self) -> None:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/version", self._version)
        app.router.add_get("/health", self._health)
        app.router.add_post("/tokenize", self._tokenize)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_post("/v1/chat/completions", self._completions)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_post("/_fault", self._control_fault)
        app.router.add_post("/_metrics_fault", self._control_metrics)
        app.router.add_get("/_log", self._control_log)
        app.middlewares.append(self._middleware)
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.SockSite(self._runner, self._sock).start()

    def stop(self) -> None:
        if self._loop is None or self._thread is None:
            return
        if self._runner is not None:
            future = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop)
            with contextlib.suppress(Exception):
                future.result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._sock.close()
        self._loop = self._thread = None

    def __enter__(self) -> FaultServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- handlers --------------------------------------------------------------------------------

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        entry = {"method": request.method, "path": request.path, "time": time.time(), "status": None}
        self.state.log.append(entry)
        _LOG_ENTRY.set(entry)  # the handler adds to it (middleware and handler run in one task)
        # Like vLLM's --api-key: only the /v1 routes are protected.
        authorized = request.headers.get("Authorization") == f"Bearer {self.api_key}"
        if self.api_key and request.path.startswith("/v1") and not authorized:
            entry["status"] = 401
            return web.json_response({"error": "Unauthorized"}, status=401)
        if (canned := self.replies.get(request.path)) is not None:
            entry["status"] = 200
            return web.Response(text=canned[0], content_type=canned[1])
        if not self.generation and request.path in ("/v1/chat/completions", "/v1/completions"):
            entry["status"] = 404  # no such route, whatever the method (FastAPI's answer)
            return web.json_response({"detail": "Not Found"}, status=404)
        try:
            response = await handler(request)
        except web.HTTPException as exc:  # aiohttp's own answers: 405 for a GET of a POST route
            entry["status"] = exc.status
            raise
        entry["status"] = response.status
        return response

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="")

    async def _models(self, request: web.Request) -> web.Response:
        card = {"id": self.model, "object": "model", "created": int(time.time()), "owned_by": "vllm",
                "root": self.model, "parent": None, "max_model_len": self.max_model_len}  # fmt: skip
        cards = [card, *({**card, "id": name, "root": name, "parent": self.model, "max_model_len": None}
                         for name in self.adapters)]  # fmt: skip
        return web.json_response({"object": "list", "data": cards})

    async def _version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": "0.0.0-faultserver"})

    async def _tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        count = count_tokens(body)
        return web.json_response({"count": count, "max_model_len": self.max_model_len, "tokens": list(range(count))})

    async def _metrics(self, request: web.Request) -> web.StreamResponse:
        failing = self._metrics_failing()
        if failing == "404":
            return web.Response(status=404, text="404: Not Found")
        if failing == "gateway":
            return web.Response(text=GATEWAY_METRICS, content_type="text/plain")
        if failing == "gzip":
            return web.Response(body=gzip_bomb(), headers={"Content-Encoding": "gzip", "Content-Type": "text/plain"})
        if failing == "trickle":  # a byte every 0.5 s for a minute
            response = web.StreamResponse(headers={"Content-Type": "text/plain"})
            await response.prepare(request)
            for _ in range(120):
                await response.write(b"#")
                await asyncio.sleep(0.5)
            return response
        if failing == "drop":
            assert request.transport is not None
            request.transport.abort()  # no answer at all: the client sees the connection closed
            raise asyncio.CancelledError
        s, labels = self.state, f'{{model_name="{self.model}"}}'
        if failing in ("counter-back", "counter-jump"):
            self._counter_offset += COUNTER_STEP if failing == "counter-jump" else -COUNTER_STEP
        generated = s.generation_tokens + self._counter_offset
        lines = [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{labels} {'NaN' if failing == 'nan' else float(s.running)}",
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{labels} 0.0",
            "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f"vllm:kv_cache_usage_perc{labels} {min(1.0, s.running * 0.01)}",
            "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{labels} {float(generated)}",
            "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
            "# TYPE vllm:prompt_tokens_total counter",
            f"vllm:prompt_tokens_total{labels} {float(s.prompt_tokens)}",
            "# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.",
            "# TYPE vllm:prefix_cache_queries_total counter",
            f"vllm:prefix_cache_queries_total{labels} {float(s.prefix_queries)}",
            "# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.",
            "# TYPE vllm:prefix_cache_hits_total counter",
            f"vllm:prefix_cache_hits_total{labels} {float(s.prefix_hits)}",
            "# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.",
            "# TYPE vllm:num_preemptions_total counter",
            f"vllm:num_preemptions_total{labels} 0.0",
            "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
            "# TYPE vllm:cache_config_info gauge",
            f'vllm:cache_config_info{{block_size="16",enable_prefix_caching="True",'
            f'kv_cache_size_tokens="{self.kv_cache_size_tokens}",'
            f'num_gpu_blocks="{self.kv_cache_size_tokens // 16}"}} 1.0',
        ]
        if self.timing_histograms:
            lines += _timing_histograms(s, labels)
        if self.external_tier:
            lines += _external_tier(s, self.model)
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        arrived = time.perf_counter()  # the request's queueing starts (its timing's clock: the client's too)
        _LOG_ENTRY.get()["body"] = await request.text()  # as sent, for the tests
        body = await request.json()
        _LOG_ENTRY.get()["prompt"] = body.get("prompt", body.get("messages"))  # what was asked, for the tests
        _LOG_ENTRY.get()["response_format"] = body.get("response_format")
        _LOG_ENTRY.get()["tools"] = body.get("tools")
        _LOG_ENTRY.get()["tool_choice"] = body.get("tool_choice")
        _LOG_ENTRY.get()["priority"] = body.get("priority")
        _LOG_ENTRY.get()["model"] = body.get("model")
        chat = request.path.endswith("/chat/completions")
        if body.get("model") != self.model and body.get("model") not in self.adapters:
            return _error(404, f"The model `{body.get('model')}` does not exist.", "NotFoundError")
        prompt_tokens = count_tokens(body)
        max_tokens = int(body.get("max_tokens") or 16)
        if prompt_tokens + max_tokens > self.max_model_len:
            return _error(400, f"This model's maximum context length is {self.max_model_len} tokens. However, you "
                               f"requested {prompt_tokens + max_tokens} tokens.", "BadRequestError")  # fmt: skip
        fault = self._take_fault()
        if fault == "500":
            return _error(500, "EngineCore encountered an issue (injected fault)", "InternalServerError")
        if fault == "echo-500":  # a long error quoting the Authorization header, whole and in part, past any cut
            presented = request.headers.get("Authorization", "").removeprefix("Bearer ")
            message = f"{'.' * ECHO_PAD} bad gateway for {presented}; masked {presented[2:-2]}; head {presented[:20]}"
            return _error(500, message, "InternalServerError")
        if fault == "echo-encoded":
            encoding = ECHO_ENCODINGS[(self.fault.hit - 1) % len(ECHO_ENCODINGS)] if self.fault else "utf-16"
            presented = request.headers.get("Authorization", "").removeprefix("Bearer ")
            if encoding != "sse-nul":
                return _echo(encoding, presented)
            fault = encoding
        if fault == "401":
            # Like some gateways, echo the key presented, so a leak through error messages would show.
            presented = request.headers.get("Authorization", "").removeprefix("Bearer ")
            return _error(401, f"Incorrect API key provided: {presented}", "AuthenticationError")
        if not body.get("stream"):
            return _error(400, "the fault server only streams", "BadRequestError")
        return await self._stream(request, body, chat, prompt_tokens, max_tokens, fault, arrived)

    async def _embeddings(self, request: web.Request) -> web.Response:
        if not self.embeddings:
            return _error(404, "Not Found", "NotFoundError")
        body = await request.json()
        inputs = body.get("input")
        _LOG_ENTRY.get()["input"] = inputs
        if body.get("model") != self.model:
            return _error(404, f"The model `{body.get('model')}` does not exist.", "NotFoundError")
        if not isinstance(inputs, list) or not all(isinstance(text, str) for text in inputs):
            return _error(400, "input: a list of texts", "BadRequestError")
        if self._take_fault() == "500":
            return _error(500, "EngineCore encountered an issue (injected fault)", "InternalServerError")
        tokens = sum(count_tokens({"prompt": text}) for text in inputs)
        self.state.requests_total += 1
        await asyncio.sleep(self.embedding_delay_s)
        self.state.prompt_tokens += tokens
        data = [{"index": i, "object": "embedding", "embedding": [0.125] * EMBEDDING_DIMENSIONS}
                for i in range(len(inputs))]  # fmt: skip
        usage = {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0}
        return web.json_response({"object": "list", "model": self.model, "data": data, "usage": usage})

    async def _stream(self, request: web.Request, body: dict[str, Any], chat: bool, prompt_tokens: int,
                      max_tokens: int, fault: str | None, arrived: float) -> web.StreamResponse:  # fmt: skip
        s = self.state
        key = hashlib.sha256(repr(body.get("messages") or body.get("prompt")).encode()).hexdigest()
        cached = prompt_tokens if key in s.seen_prompts else 0
        s.seen_prompts.add(key)
        s.prefix_queries += prompt_tokens
        s.prefix_hits += cached
        external = 0
        if self.external_tier and prompt_tokens > cached:  # vLLM computes at least the last token
            external = max(0, min(self.external_hit_tokens, prompt_tokens - cached - 1))
            s.external_queries += prompt_tokens - cached
            s.external_hits += external
        s.computed_tokens += prompt_tokens - cached - external
        s.prompt_tokens += prompt_tokens - cached
        s.requests_total += 1
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        created = int(time.time())
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
        override = USAGE_FAULTS.get(fault or "", {})
        timing_fault = fault if fault in TIMING_FAULTS else None
        fault = None if override or timing_fault else fault
        scheduled = time.perf_counter()
        first_at = last_at = None
        spelled = self.reply_text
        pieces = None if spelled is None else [spelled[len(spelled) * i // max_tokens : len(spelled) * (i + 1) //
                                                       max_tokens] for i in range(max_tokens)]  # fmt: skip
        call = self.tool_call if chat and body.get("tools") else None
        entry = _LOG_ENTRY.get()
        entry["reply_text"], entry["tool_call"], entry["done"] = spelled, call, False
        if call is not None:  # token 0: the call's header; tokens 1..: its arguments in pieces
            rest = max(1, max_tokens - 1)
            args = [call[1][len(call[1]) * i // rest : len(call[1]) * (i + 1) // rest] for i in range(rest)]
            pieces = ["", *args][:max_tokens] if max_tokens > 1 else [call[1]]
        s.running += 1
        try:
            await response.prepare(request)

            def usage(completion: int) -> dict[str, Any]:
                u: dict[str, Any] = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion,
                                     "completion_tokens": completion}  # fmt: skip
                if cached or external:
                    u["prompt_tokens_details"] = {"cached_tokens": cached + external}
                if "prompt_tokens" in override:
                    u["prompt_tokens"] = u["total_tokens"] = override["prompt_tokens"]
                if "cached_tokens" in override:
                    u["prompt_tokens_details"] = {"cached_tokens": override["cached_tokens"]}
                return u

            def chunk(text: str | None, completion: int, finish: str | None = None, role: bool = False,
                      tool: dict[str, Any] | None = None) -> bytes:  # fmt: skip
                if chat:
                    delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {"content": text}
                    if tool is not None:
                        delta = {"tool_calls": [tool]}
                    choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
                    obj = "chat.completion.chunk"
                else:
                    choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish,
                              "stop_reason": None}  # fmt: skip
                    obj = "text_completion"
                event = {"id": rid, "object": obj, "created": created, "model": self.model,
                         "choices": [choice], "usage": usage(completion)}  # fmt: skip
                return b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"

            if chat:
                await response.write(chunk(None, 0, role=True))
            await asyncio.sleep(0.002 + prompt_tokens * 1e-6)  # "prefill"
            produced, due = 0, None
            if fault == "huge-events":  # megabytes of text, the usage as asked
                for i in range(HUGE_EVENTS):
                    count = min(i + 1, max_tokens)
                    s.generation_tokens += count - produced
                    produced = count
                    await response.write(chunk("x" * HUGE_EVENT_BYTES, produced))
                fault = None
                max_tokens = produced
            while produced < max_tokens:
                if fault is not None and produced >= min(2, max_tokens - 1):
                    await self._misbehave(request, response, fault)
                    return response
                step = min(self.tokens_per_chunk, max_tokens - produced)
                produced += step
                s.generation_tokens += step
                finish = "length" if produced == max_tokens else None
                last_at = time.perf_counter()
                first_at = first_at or last_at
                text = " tok" * step if pieces is None else "".join(pieces[produced - step : produced])
                tool = None
                if call is not None:
                    tool = {"index": 0, "function": {"arguments": text}}
                    if produced - step == 0:
                        tool = {"id": f"chatcmpl-tool-{rid[-8:]}", "type": "function", "index": 0,
                                "function": {"name": call[0], "arguments": text}}  # fmt: skip
                await response.write(chunk(text, produced, finish, tool=tool))
                if produced < max_tokens:
                    due = await self._next_token(due, first_at or last_at)
            final: dict[str, Any] = {"id": rid, "object": "chat.completion.chunk" if chat else "text_completion",
                                     "created": created, "model": self.model, "choices": [],
                                     "usage": usage(produced)}  # fmt: skip
            if first_at is not None and last_at is not None:
                timing = (scheduled - arrived, first_at - scheduled, last_at - first_at)
                s.queue_s += timing[0]
                s.prefill_s += timing[1]
                s.decode_s += timing[2]
                s.timed += 1
                if self.per_request_metrics or timing_fault:
                    final["metrics"] = per_request_metrics(*timing, produced, timing_fault)
            await response.write(b"data: " + json.dumps(final, separators=(",", ":")).encode() + b"\n\n")
            await response.write(b"data: [DONE]\n\n")
            entry["done"] = True
            await response.write_eof()
            return response
        except ConnectionResetError:  # the client went away (a cancelled stream): nothing to answer
            return response
        finally:
            s.running -= 1

    async def _next_token(self, due: float | None, first_at: float) -> float:
        """Wait for the next token's time on a fixed grid of `token_interval_s` from the first token: a late wake-up
        (a busy machine) shortens the next wait instead of adding to every later token, so the stream keeps its
        rate under load. A stall of more than one interval (a paused process) moves the grid: no burst after it."""
        due = (first_at if due is None else due) + self.token_interval_s
        now = time.perf_counter()
        if due < now - self.token_interval_s:
            due = now
        await asyncio.sleep(max(0.0, due - now))
        return due

    async def _misbehave(self, request: web.Request, response: web.StreamResponse, fault: str) -> None:
        if fault == "malformed":
            await response.write(b"data: {not json\n\n")
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        elif fault == "cut":
            await response.write(b'data: {"id":"x","choi')  # half an event, then the connection is gone
            await asyncio.sleep(0.01)
            assert request.transport is not None
            request.transport.abort()
            raise asyncio.CancelledError
        elif fault in WRONG_EVENTS:
            await response.write(b"data: " + json.dumps(WRONG_EVENTS[fault]).encode() + b"\n\n")
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        elif fault == "unterminated":
            await response.write(b'data: {"choices": "')
            for _ in range(UNTERMINATED_BYTES // 65536):
                await response.write(b"x" * 65536)
                await asyncio.sleep(0.001)
            await asyncio.sleep(3600)
        elif fault == "stall":
            await asyncio.sleep(3600)  # keeps the connection open, sends nothing; cancelled on disconnect
        elif fault == "keepalive":  # bytes but no token: an SSE comment every 0.1 s, for an hour
            for _ in range(36_000):
                await response.write(b": keep-alive\n\n")
                await asyncio.sleep(0.1)
        elif fault == "trickle":  # events with data but no new token, every 0.2 s, for an hour
            for _ in range(18_000):
                await response.write(b'data: {"choices":[{"index":0,"text":"","finish_reason":null}]}\n\n')
                await asyncio.sleep(0.2)
        elif fault == "absurd-usage":  # more tokens than asked for
            event = {"choices": [{"index": 0, "text": " x", "finish_reason": None}],
                     "usage": {"prompt_tokens": 9, "completion_tokens": 2**63 - 1}}  # fmt: skip
            await response.write(b"data: " + json.dumps(event).encode() + b"\n\n")
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        elif fault == "sse-nul":  # an error inside the stream, the key presented with NULs between its characters
            presented = request.headers.get("Authorization", "").removeprefix("Bearer ")
            event = {"error": {"message": "rejected key " + "\0".join(presented), "code": 401}}
            await response.write(b"data: " + json.dumps(event).encode() + b"\n\n")
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        elif fault == "error-event":  # an error inside the stream, echoing the key presented like the 401 fault
            presented = request.headers.get("Authorization", "").removeprefix("Bearer ")
            event = {"error": {"message": f"engine failed for key {presented}", "code": 500}}
            await response.write(b"data: " + json.dumps(event).encode() + b"\n\n")
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()

    # ---- control endpoints -----------------------------------------------------------------------

    async def _control_fault(self, request: web.Request) -> web.Response:
        body = await request.json()
        if body.get("kind") is None:
            self.clear_fault()
        else:
            self.set_fault(body["kind"], after=int(body.get("after", 0)), times=body.get("times"))
        return web.json_response({"ok": True})

    async def _control_metrics(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.set_metrics_fault(body.get("kind"), after=int(body.get("after", 0)))
        return web.json_response({"ok": True})

    async def _control_log(self, request: web.Request) -> web.Response:
        return web.json_response(self.log)


def per_request_metrics(
    queue_s: float, prefill_s: float, decode_s: float, tokens: int, fault: str | None = None
) -> dict[str, Any]:
    """A final chunk's `metrics` as vLLM 0.32 writes it, from a request's queue, prefill and decode on the server's
    clock; "metrics-malformed": a queue time that is no number, "metrics-contradicting": a queue time
    `CONTRADICTING_QUEUE` times the request's whole TTFT on the server plus `CONTRADICTING_EXTRA_MS`."""
    queue_ms, ttft_ms, generation_ms = queue_s * 1e3, prefill_s * 1e3, decode_s * 1e3
    metrics: dict[str, Any] = {
        "time_to_first_token_ms": round(ttft_ms, 6),
        "generation_time_ms": round(generation_ms, 6),
        "queue_time_ms": round(queue_ms, 6),
        "mean_itl_ms": round(generation_ms / (tokens - 1), 6) if tokens > 1 else None,
        "tokens_per_second": round(tokens / (prefill_s + decode_s), 3) if prefill_s + decode_s > 0 else None,
    }
    if fault == "metrics-malformed":
        metrics["queue_time_ms"] = MALFORMED_TIMING
    elif fault == "metrics-contradicting":
        metrics["queue_time_ms"] = round(CONTRADICTING_QUEUE * (queue_ms + ttft_ms) + CONTRADICTING_EXTRA_MS, 6)
    return metrics


def _external_tier(s: ServerState, model: str) -> list[str]:
    """vLLM 0.32's lines for a KV connector's external tier and the prompt tokens by source (v1/metrics/loggers.py)."""
    labels = f'model_name="{model}",engine="0"'
    lines = [
        "# HELP vllm:external_prefix_cache_queries_total External prefix cache queries from KV connector "
        "cross-instance cache sharing, in terms of number of queried tokens.",
        "# TYPE vllm:external_prefix_cache_queries_total counter",
        f"vllm:external_prefix_cache_queries_total{{{labels}}} {float(s.external_queries)}",
        "# HELP vllm:external_prefix_cache_hits_total External prefix cache hits from KV connector "
        "cross-instance cache sharing, in terms of number of cached tokens.",
        "# TYPE vllm:external_prefix_cache_hits_total counter",
        f"vllm:external_prefix_cache_hits_total{{{labels}}} {float(s.external_hits)}",
        "# HELP vllm:prompt_tokens_by_source_total Number of prompt tokens by source.",
        "# TYPE vllm:prompt_tokens_by_source_total counter",
    ]
    for source, tokens in (("local_compute", s.computed_tokens), ("local_cache_hit", s.prefix_hits),
                           ("external_kv_transfer", s.external_hits)):  # fmt: skip
        lines.append(f'vllm:prompt_tokens_by_source_total{{{labels},source="{source}"}} {float(tokens)}')
    return lines


def _timing_histograms(state: ServerState, labels: str) -> list[str]:
    """vLLM's request queue, prefill and decode time histograms (one +Inf bucket, its sum and count)."""
    lines = []
    for name, total in (("queue", state.queue_s), ("prefill", state.prefill_s), ("decode", state.decode_s)):
        family = f"vllm:request_{name}_time_seconds"
        inf_labels = labels[:-1] + ',le="+Inf"}'
        lines += [f"# HELP {family} Histogram of time spent in {name.upper()} phase for request.",
                  f"# TYPE {family} histogram", f"{family}_bucket{inf_labels} {float(state.timed)}",
                  f"{family}_sum{labels} {total}", f"{family}_count{labels} {float(state.timed)}"]  # fmt: skip
    return lines


def _echo(encoding: str, key: str) -> web.Response:
    """A 401 that echoes `key` in one of ECHO_ENCODINGS (but the in-stream one)."""
    text = f"Incorrect API key provided: {key}"
    if encoding in ("utf-16", "utf-32"):
        return web.Response(status=401, body=text.encode(encoding), content_type="text/plain")
    if encoding == "nul-json":
        return _error(401, "Incorrect API key provided: " + "\0".join(key), "AuthenticationError")
    if encoding == "percent":
        return _error(401, "key=" + "".join(f"%{b:02X}" for b in key.encode()), "AuthenticationError")
    if encoding == "base64":
        return _error(401, "credentials " + base64.b64encode(f"user:{key}".encode()).decode(), "AuthenticationError")
    return web.Response(status=401, text="unauthorized", headers={"WWW-Authenticate": f'Bearer error="{key}"'})


def _error(status: int, message: str, kind: str) -> web.Response:
    return web.json_response({"error": {"message": message, "type": kind, "param": None, "code": status}},
                             status=status)  # fmt: skip


def closed_port() -> int:
    """A 127.0.0.1 port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


if __name__ == "__main__":  # manual use: python tests/faultserver.py
    with FaultServer() as srv:
        print(srv.base_url, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()
