"""What a streamed completion means, without any I/O: the request, its SSE events, the `StreamResult` they fill.

`StreamAccount` takes the body of a 200 reply as it arrives, in pieces split anywhere, and keeps the result up to
date: token counts from the continuous `usage` of every chunk, the first text, prompt and cached tokens,
`[DONE]`, and the errors a stream can carry. `toolkit/loadgen/http_reply.py` feeds it the body;
`toolkit/loadgen/client.py` does the I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from toolkit.base.api_keys import excerpt, redact_and_cut
from toolkit.base.errors import ReplyError, SSEError
from toolkit.loadgen.images import IMAGE_TOKENS_MAX
from toolkit.loadgen.server_timing import ServerTiming, read_server_timing
from toolkit.loadgen.sse import SSEDecoder

Endpoint = Literal["chat", "completions"]
ENDPOINT_PATHS: dict[str, str] = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
STREAM_OPTIONS = {"include_usage": True, "continuous_usage_stats": True}
# A usage's prompt count is checked against the request sent: a token stands for at least one byte of its text
# (byte-level BPE; SentencePiece with byte fallback), and the JSON body holds the prompt's UTF-8 bytes, so the
# prompt counts at most the body's bytes plus what a chat template adds (role markers, a default system prompt: tens
# of tokens in the templates we know, a few hundred at most), and each image it carries up to its own most
# (toolkit.loadgen.images.IMAGE_TOKENS_MAX: a small image may count far more tokens than its bytes). A count above
# that is no count of this prompt.
TEMPLATE_TOKENS_MAX = 1024
# A reply kept as text (a conversation's history, re-sent at the next turn) keeps at most this many UTF-8 bytes a
# token asked for: a token's text is a few bytes, the longest in the vocabularies we know a few hundred (runs of
# spaces or symbols). A server that sends more is not sending the tokens it counts; the rest is not kept.
REPLY_BYTES_PER_TOKEN = 1024


def prompt_tokens_max(body_bytes: int, images: int = 0) -> int:
    """The most prompt tokens a request whose JSON body has `body_bytes` bytes and carries `images` images can count
    (`TEMPLATE_TOKENS_MAX`, `IMAGE_TOKENS_MAX`)."""
    return body_bytes + TEMPLATE_TOKENS_MAX + images * IMAGE_TOKENS_MAX


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
    max_tokens: int | None = None  # what the request asked for: a usage above it is refused
    prompt_tokens_max: int | None = None  # the most its prompt can count (`prompt_tokens_max`): above it, refused
    done: bool = False
    cancelled: bool = False
    error: str | None = None
    ended: float | None = None
    text: list[str] | None = None  # given a list, the reply's text pieces are kept in it (a conversation's history)
    text_bytes: int = 0  # the UTF-8 bytes of text the reply carried, while `text` is kept
    text_kept_bytes: int | None = None  # a reply cut to its bound (`reply_text_bound`): the bytes kept in `text`
    # given a list, the `function.arguments` pieces of the reply's first tool call are kept in it (a request that
    # carries tools), within `reply_text_bound`; `tool_name` is that call's function, `tool_index` its index
    tool_args: list[str] | None = None
    tool_name: str | None = None
    tool_index: int | None = None
    tool_args_bytes: int = 0
    tool_args_cut: bool = False  # the arguments outgrew the bound: not whole
    server_timing: ServerTiming | None = None  # the final chunk's `metrics` (toolkit.loadgen.server_timing)
    server_timing_note: str | None = None  # why a `metrics` object the server sent was not read

    @property
    def text_note(self) -> str | None:
        """Why the kept text is not the whole reply (None when it is)."""
        if self.text_kept_bytes is None:
            return None
        return (f"reply cut to its first {self.text_kept_bytes:,} bytes of {self.text_bytes:,} "
                f"({REPLY_BYTES_PER_TOKEN:,} bytes a token asked for)")  # fmt: skip

    @property
    def note(self) -> str | None:
        """What the record says of the reply beyond its figures: its text cut, its server timing not read."""
        notes = [n for n in (self.text_note, self.server_timing_note) if n]
        return "; ".join(notes) or None

    @property
    def ttft_s(self) -> float | None:
        """Start to first text; a reply whose only token printed no text falls back to that token."""
        first = self.first_token_at
        if first is None and self.token_events:
            first = self.token_events[0][0]
        return None if first is None else first - self.started


def build_request(
    endpoint: Endpoint,
    model: str,
    prompt: str,
    max_tokens: int,
    *,
    ignore_eos: bool = True,
    response_format: dict[str, Any] | None = None,
    tools: list[dict[str, Any]] | None = None,
    tool_choice: str | dict[str, Any] | None = None,
) -> tuple[str, dict[str, Any]]:
    """Path and JSON body of a streamed request as docs/method/matrix.md, Prompts, prescribes. With a
    `response_format` (toolkit.loadgen.structured) the body carries it and does not ignore EOS: once the JSON is
    whole the server stops constraining the tokens, and a reply that went on past it would not be JSON. With
    `tools` (chat only; toolkit.loadgen.tools) the body carries them and `tool_choice`, and does not ignore EOS
    either: a call's arguments are JSON constrained the same way (`required`, a named function), and a reply that
    went on past the call would not end it."""
    if tools is not None and endpoint != "chat":
        raise ValueError("tools: the completions endpoint takes none (chat only)")
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": STREAM_OPTIONS,
        "ignore_eos": ignore_eos and response_format is None and tools is None,
        "temperature": 0.0,
    }
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if response_format is not None:
        body["response_format"] = response_format
    if tools is not None:
        body["tools"] = tools
        if tool_choice is not None:
            body["tool_choice"] = tool_choice
    return ENDPOINT_PATHS[endpoint], body


class StreamAccount:
    """The body of a 200 streamed reply, fed as it arrives, accounted into `result`."""

    __slots__ = ("decoder", "result")

    def __init__(self, result: StreamResult) -> None:
        self.result = result
        self.decoder = SSEDecoder()

    @property
    def stopped(self) -> bool:
        """The stream reached `[DONE]` or failed: later bytes change nothing."""
        return self.result.done or self.result.error is not None

    def feed(self, body: bytes, now: float) -> None:
        """Body bytes that arrived at `now`; stops at `[DONE]` or at the first event that fails the stream."""
        result = self.result
        if result.done or result.error is not None:
            return
        try:
            events = self.decoder.feed(body)
        except SSEError as exc:
            result.error = str(exc)
            return
        for event in events:
            if event == b"[DONE]":
                result.done = True
                return
            if not apply_chunk(event, now, result):
                return

    def end(self) -> None:
        """The body is over: a stream that did not reach `[DONE]` (and had no other error) was cut."""
        result = self.result
        if not result.done and result.error is None:
            cut = " (cut mid-event)" if self.decoder.pending.strip() else ""
            result.error = "stream ended before [DONE]" + cut


def has_text(choice: dict[str, Any]) -> bool:
    """Whether a chunk's choice printed text (content or reasoning, chat or completions) or a tool call (a
    `delta.tool_calls` entry: the call's first piece is the reply's first token)."""
    delta = choice.get("delta")
    if delta is not None:
        if not isinstance(delta, dict):
            raise _Malformed("a choice's delta is not an object")
        return bool(delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
                    or delta.get("tool_calls"))  # fmt: skip
    return bool(choice.get("text"))


def reply_text(choice: dict[str, Any]) -> str:
    """The text a chunk's choice adds to the reply (chat content, or completions text; not reasoning)."""
    delta = choice.get("delta")
    found = delta.get("content") if isinstance(delta, dict) else choice.get("text")
    return found if isinstance(found, str) else ""


def keep_tool_call(choice: dict[str, Any], result: StreamResult) -> None:
    """Add what a chunk's choice carries of the reply's first tool call (its function's name, a piece of its
    arguments) to `result`; entries of another call, or of the wrong shape, are passed over."""
    assert result.tool_args is not None
    delta = choice.get("delta")
    calls = delta.get("tool_calls") if isinstance(delta, dict) else None
    if not isinstance(calls, list):
        return
    for call in calls:
        if not isinstance(call, dict):
            continue
        index = call.get("index", 0)
        if result.tool_index is None:
            result.tool_index = index
        elif index != result.tool_index:
            continue
        function = call.get("function")
        if not isinstance(function, dict):
            continue
        name = function.get("name")
        if result.tool_name is None and isinstance(name, str) and name:
            result.tool_name = name
        piece = function.get("arguments")
        if isinstance(piece, str) and piece and not result.tool_args_cut:
            size = len(piece) if piece.isascii() else len(piece.encode())
            if result.tool_args_bytes + size > reply_text_bound(result.max_tokens):
                result.tool_args_cut = True
                continue
            result.tool_args_bytes += size
            result.tool_args.append(piece)


def apply_chunk(data: bytes, now: float, result: StreamResult) -> bool:
    """Update `result` from one event's data; False (with `error` set) when the stream must stop.

    Once the first text has arrived, only the usage matters (unless the reply's text or its tool call is kept):
    when `"usage"` is the chunk's last key (as vLLM writes it), just that object is parsed (inside a JSON string the
    quotes would be escaped, so the match is the key). Any other shape, or a chunk that names `"metrics"` (the final
    chunk's server timing), takes the full parse. A field of the wrong type fails the stream; a malformed `metrics`
    object only goes unread.
    """
    try:
        if result.first_token_at is not None and result.text is None and result.tool_args is None:
            at = data.rfind(b'"usage":')
            if at > 0 and b'"metrics":' not in data:
                try:
                    usage = orjson.loads(data[at + 8 : -1])
                except orjson.JSONDecodeError:
                    usage = None
                if type(usage) is dict:
                    apply_usage(usage, now, result)
                    result.chunks += 1
                    return True
        return _apply_parsed(data, now, result)
    except _Malformed as exc:
        result.error = f"malformed SSE data: {exc}: {_shown(data)}"
        return False


def _shown(data: bytes, limit: int = 83) -> str:
    """An event's bytes as repr() shows them, redacted, then cut to `limit` characters."""
    return excerpt(data, limit)


def _apply_parsed(data: bytes, now: float, result: StreamResult) -> bool:
    try:
        chunk = orjson.loads(data)
    except orjson.JSONDecodeError:
        chunk = None
    if not isinstance(chunk, dict):
        result.error = f"malformed SSE data: {_shown(data)}"
        return False
    if "error" in chunk:
        err = chunk["error"]
        text = err.get("message", err) if isinstance(err, dict) else err
        result.error = f"server error in stream: {redact_and_cut(str(text), 300)}"
        return False
    choices = chunk.get("choices")
    choices = [] if choices is None else choices
    if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
        raise _Malformed("choices is not a list of objects")
    if result.first_token_at is None and any([has_text(c) for c in choices]):
        result.first_token_at = now
    if result.text is not None and choices:
        piece = reply_text(choices[0])
        if piece:
            keep_text(result, piece)
    if result.tool_args is not None and choices:
        keep_tool_call(choices[0], result)
    usage = chunk.get("usage")
    if usage is not None:
        apply_usage(usage, now, result)
    metrics = chunk.get("metrics")
    if metrics is not None:
        apply_server_timing(metrics, result)
    result.chunks += 1
    return True


def apply_server_timing(metrics: Any, result: StreamResult) -> None:
    """Read a chunk's `metrics` into `result.server_timing`; a malformed one leaves it unset and says why."""
    try:
        timing = read_server_timing(metrics)
    except ReplyError as exc:
        result.server_timing, result.server_timing_note = None, f"server timing not read: {exc}"
        return
    if timing is not None:
        result.server_timing = timing


def reply_text_bound(max_tokens: int | None) -> int:
    """The most UTF-8 bytes of a reply's text kept (`REPLY_BYTES_PER_TOKEN` a token asked for, at least one)."""
    return REPLY_BYTES_PER_TOKEN * max(1, max_tokens or 1)


def keep_text(result: StreamResult, piece: str) -> None:
    """Add a piece of the reply's text to `result.text`, up to `reply_text_bound`; past it, count it only."""
    assert result.text is not None
    size = len(piece) if piece.isascii() else len(piece.encode())
    kept = result.text_bytes if result.text_kept_bytes is None else result.text_kept_bytes
    result.text_bytes += size
    if result.text_kept_bytes is not None:
        return
    room = reply_text_bound(result.max_tokens) - kept
    if size <= room:
        result.text.append(piece)
        return
    head = piece.encode()[:room].decode("utf-8", "ignore")  # a character cut in two is left out whole
    if head:
        result.text.append(head)
    result.text_kept_bytes = kept + len(head.encode())


def apply_usage(usage: Any, now: float, result: StreamResult) -> None:
    """Prompt and cached tokens, and a token event when the completion count rose (`_Malformed` on wrong types)."""
    if not isinstance(usage, dict):
        raise _Malformed("usage is not an object")
    prompt = _count(usage, "prompt_tokens")
    details = usage.get("prompt_tokens_details")
    if details is not None and not isinstance(details, dict):
        raise _Malformed("usage.prompt_tokens_details is not an object")
    cached = _count(details, "prompt_tokens_details.cached_tokens") if details else None
    count = _count(usage, "completion_tokens") or 0
    most = result.prompt_tokens_max
    if prompt is not None and most is not None and prompt > most:
        raise _Malformed(f"usage.prompt_tokens is {prompt}, more than the {most:,} its request can hold (a token a "
                         f"byte of its body, {TEMPLATE_TOKENS_MAX:,} more for a chat template)")  # fmt: skip
    held = prompt if prompt is not None else result.prompt_tokens if result.prompt_tokens is not None else most
    if cached is not None and held is not None and cached > held:
        raise _Malformed(f"usage.prompt_tokens_details.cached_tokens is {cached}, more than the {held:,} prompt tokens")
    if prompt is not None:
        result.prompt_tokens = prompt
    if cached is not None:
        result.cached_tokens = cached
    if result.max_tokens is not None and count > result.max_tokens:
        raise _Malformed(f"usage.completion_tokens is {count}, more than the {result.max_tokens} asked for")
    if count > result.completion_tokens:
        result.completion_tokens = count
        result.token_events.append((now, count))


def _count(fields: dict[str, Any], name: str) -> int | None:
    """A token count (`name`: its path under usage; the last part is the key): absent/null, or a whole number >= 0."""
    value = fields.get(name.rpartition(".")[2])
    if value is None or (type(value) is int and value >= 0):
        return value
    raise _Malformed(f"usage.{name} is not a token count ({excerpt(value, 42)})")


class _Malformed(ReplyError):
    """A field of a stream's event has the wrong type or value."""
