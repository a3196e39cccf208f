"""Request traces replayed as one step: arrivals and lengths from a local file (pure; nothing is downloaded).

Mooncake JSONL: one object per line with `timestamp` (ms from the trace's start), `input_length`, `output_length`
and `hash_ids` (the prompt's blocks of `block_tokens` tokens, 512 in Mooncake's traces: requests whose lists start
alike share those blocks of prompt). Azure LLM inference CSV: a header with `TIMESTAMP` (a date and time),
`ContextTokens` and `GeneratedTokens`; its prompts share nothing. A window of the trace (`start_s`, `duration_s`
from its first arrival) is replayed `time_scale` times as fast.

The file is read in blocks, a line at a time: once, keeping the window's requests from the first line's arrival,
and once more only when a later line arrives before it (the window is then from the trace's first arrival). What
it holds is bounded by the limits below, each refused in one line naming the file (and line) before anything is
sent: a malformed line or a file past them is a `DatasetError`, a window past them a `ParamsError`. Memory is a
read block with its lines and the window's requests (their `hash_ids` cut to the blocks their prompt can hold):
about 100 MB at the limits, whatever the file's length.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import orjson

from toolkit.base.errors import DatasetError, ParamsError
from toolkit.params import MAX_SECONDS

TraceFormat = Literal["mooncake", "azure"]
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")

# A pass over a trace reads and checks about half a million lines a second here (lines of ~90 bytes): the file and
# line limits keep the two passes under a minute or so before the first request.
MAX_TRACE_BYTES = 2 * 1024**3
MAX_TRACE_LINES = 10_000_000
MAX_TRACE_LINE_BYTES = 1024 * 1024  # one request: the hash_ids of a 10M-token prompt's 512-token blocks are ~200 KB
MAX_REQUEST_TOKENS = 10_000_000  # one request's input or output length: what a rate sweep's lengths may be
MAX_TRACE_REQUESTS = 100_000  # in the replayed window: the step builds every prompt before it sends one
MAX_TRACE_PROMPT_TOKENS = 100_000_000  # the window's prompt tokens: the step holds their texts at once (~4 B a token)
MAX_REPLAY_S = MAX_SECONDS  # the window's last arrival, replayed: a step lasts at most as long as a duration_s may
# A hash_ids block's text starts with its own marker (about 20 tokens) and a prompt build may miss by 16: a block
# shorter than this is mostly marker, and many of them count more than the prompt they are to start.
MIN_TRACE_BLOCK_TOKENS = 64
MIN_UNIQUE_TOKENS = 16  # a prompt's own rest after what it shares (blocks, a prefix): its marker and some filler
# Building a window's prompts asks the server's /tokenize: a block at least 3 times (the prompt builder's fewest), a
# prompt's blocks together once. Past this many calls (a minute or more against a server), the window is refused.
MAX_TRACE_TOKENIZE_CALLS = 20_000
TOKENIZE_CALLS_PER_BLOCK = 3
READ_BYTES = 1024 * 1024  # the file is read in blocks of this size, split into lines


@dataclass(frozen=True)
class TraceRequest:
    """One request of a trace: arrival (seconds from the trace's first), lengths, and its prompt blocks."""

    at_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class TraceWindow:
    """Which part of a trace, how fast: `start_s` and `duration_s` (None: to the end) of the trace's own time."""

    start_s: float = 0.0
    duration_s: float | None = None
    time_scale: float = 1.0

    def between(self) -> str:
        """The window in words: "between 0 s and its end"."""
        end = "its end" if self.duration_s is None else f"{self.start_s + self.duration_s:g} s"
        return f"between {self.start_s:g} s and {end}"


def read_trace(path: str | Path, kind: TraceFormat) -> list[TraceRequest]:
    """The trace's requests in order of arrival, from its first; DatasetError when unreadable, malformed or empty,
    DatasetError or ParamsError past the limits."""
    return read_window(path, kind, TraceWindow())


def read_window(path: str | Path, kind: TraceFormat, chosen: TraceWindow) -> list[TraceRequest]:
    """The window's requests in order of arrival, their arrivals from its start divided by the time scale."""
    path = Path(path)
    kept, first, refused = _collect(path, kind, chosen, None)
    if first is None:
        raise DatasetError(f"trace: {path} holds no request")
    if kept is None:  # a line arrived before the first line: read again from the trace's first arrival
        kept, _, refused = _collect(path, kind, chosen, first)
    if refused is not None or kept is None:
        raise ParamsError(f"trace: {path}: the requests {chosen.between()} {refused}; choose trace_start_s and "
                          "trace_duration_s (or time_scale) to replay less")  # fmt: skip
    return sorted(kept, key=lambda r: r.at_s)


def _collect(
    path: Path, kind: TraceFormat, chosen: TraceWindow, first: float | None
) -> tuple[list[TraceRequest] | None, float | None, str | None]:
    """One pass over the file: the window's requests with arrivals from `first` (None: from the first line's, None
    when a later line arrives before it), the trace's first arrival, and what of the window is past the limits
    (then the requests are no longer kept). A window without an end past its limits ends the pass: one from an
    earlier first arrival holds every request this one does, later."""
    end = math.inf if chosen.duration_s is None else chosen.start_s + chosen.duration_s
    origin, lowest = first, math.inf
    kept: list[TraceRequest] | None = []
    refused: str | None = None
    tokens = 0
    for at_s, input_tokens, output_tokens, hash_ids in _requests(path, kind):
        origin = at_s if origin is None else origin
        lowest = min(lowest, at_s)
        if at_s < origin:
            kept, refused = None, None
        if kept is None or refused is not None or not chosen.start_s <= at_s - origin < end:
            continue
        due = (at_s - origin - chosen.start_s) / chosen.time_scale
        tokens += input_tokens
        refused = _past_limits(due, len(kept) + 1, tokens, chosen.time_scale)
        if refused is None:
            kept.append(TraceRequest(due, input_tokens, output_tokens, hash_ids))
        elif end == math.inf:
            break
    return kept, None if origin is None else lowest, refused


def _past_limits(due_s: float, requests: int, prompt_tokens: int, time_scale: float) -> str | None:
    """What of a window's requests so far is past its limit (None: nothing)."""
    if due_s > MAX_REPLAY_S:
        at = "" if time_scale == 1 else f" at {time_scale:g}x"
        return f"arrive over {due_s:,.0f} s{at}, more than the {MAX_REPLAY_S:,.0f} s a step may last"
    if requests > MAX_TRACE_REQUESTS:
        return f"are more than {MAX_TRACE_REQUESTS:,}, each a prompt built before the step sends"
    if prompt_tokens > MAX_TRACE_PROMPT_TOKENS:
        return f"ask for more than {MAX_TRACE_PROMPT_TOKENS:,} prompt tokens, whose texts the step holds at once"
    return None


def window(requests: list[TraceRequest], chosen: TraceWindow) -> list[TraceRequest]:
    """The requests inside the window, their arrivals from its start and divided by the time scale."""
    end = math.inf if chosen.duration_s is None else chosen.start_s + chosen.duration_s
    inside = [r for r in requests if chosen.start_s <= r.at_s < end]
    return [
        TraceRequest((r.at_s - chosen.start_s) / chosen.time_scale, r.input_tokens, r.output_tokens, r.hash_ids)
        for r in inside
    ]


def blocks_used(hash_ids: tuple[int, ...], input_tokens: int, block_tokens: int) -> tuple[int, ...]:
    """The trace blocks a prompt of `input_tokens` starts with: as many of its `hash_ids` as fit whole before
    its unique rest."""
    return hash_ids[: max(0, input_tokens - MIN_UNIQUE_TOKENS) // block_tokens]


def tokenize_calls_at_least(requests: Sequence[TraceRequest], block_tokens: int) -> int:
    """The fewest /tokenize calls that building these requests' blocks takes: each distinct block (an id after
    the same ids) `TOKENIZE_CALLS_PER_BLOCK` times, each distinct list of blocks once, and an empty text once."""
    nodes: dict[tuple[int, int], int] = {}
    heads: set[int] = set()
    for r in requests:
        node = -1
        for block in blocks_used(r.hash_ids, r.input_tokens, block_tokens):
            node = nodes.setdefault((node, block), len(nodes))
        if node >= 0:
            heads.add(node)
    return TOKENIZE_CALLS_PER_BLOCK * len(nodes) + len(heads) + (1 if nodes else 0)


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """The file's lines (numbered from 1), read in blocks; DatasetError when it cannot be read or is past the file
    limits."""
    try:
        size = path.stat().st_size
        if size > MAX_TRACE_BYTES:
            raise DatasetError(f"trace: {path}: {size:,} bytes, more than the {MAX_TRACE_BYTES:,} a trace may hold; "
                               "cut out the part to replay")  # fmt: skip
        with path.open("rb") as file:
            number, rest = 0, b""
            while block := file.read(READ_BYTES):
                lines = (rest + block).split(b"\n")
                rest = lines.pop()
                for line in lines if len(rest) <= MAX_TRACE_LINE_BYTES else [*lines, rest]:
                    number += 1
                    if number > MAX_TRACE_LINES:
                        raise DatasetError(f"trace: {path}: more than {MAX_TRACE_LINES:,} lines; cut out the part "
                                           "to replay")  # fmt: skip
                    if len(line) > MAX_TRACE_LINE_BYTES:
                        raise DatasetError(f"trace: {path}:{number}: a line longer than {MAX_TRACE_LINE_BYTES:,} "
                                           "bytes")  # fmt: skip
                    yield number, line
            if rest:
                yield number + 1, rest
    except OSError as exc:
        raise DatasetError(f"trace: cannot read {path}: {exc.strerror or exc}") from None


def _requests(path: Path, kind: TraceFormat) -> Iterator[tuple[float, int, int, tuple[int, ...]]]:
    """Every request of the file, checked, in the file's order: arrival (s), input and output tokens, blocks."""
    return _mooncake(path) if kind == "mooncake" else _azure(path)


def _count(path: Path, number: int, name: str, value: Any) -> int:
    if type(value) is int and 1 <= value <= MAX_REQUEST_TOKENS:
        return value
    if type(value) is not int or value < 1:
        raise DatasetError(f"trace: {path}:{number}: {name} is not a whole number >= 1 (got {value!r:.40})")
    raise DatasetError(f"trace: {path}:{number}: {name} is {value:,} tokens, more than the {MAX_REQUEST_TOKENS:,} "
                       "a request may ask for")  # fmt: skip


def _mooncake(path: Path) -> Iterator[tuple[float, int, int, tuple[int, ...]]]:
    for number, line in _lines(path):
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            if not line.strip():
                continue
            obj = None
        if type(obj) is not dict:
            raise DatasetError(f"trace: {path}:{number}: not a JSON object (the Mooncake layout has one per line)")
        stamp: Any = obj.get("timestamp")
        if type(stamp) not in (int, float) or not 0 <= stamp < math.inf:  # not a bool, NaN or infinity either
            raise DatasetError(f"trace: {path}:{number}: timestamp is not a number of milliseconds >= 0 "
                               f"(got {stamp!r:.40})")  # fmt: skip
        hashes = obj.get("hash_ids", [])
        if type(hashes) is not list or not {int}.issuperset(map(type, hashes)):
            raise DatasetError(f"trace: {path}:{number}: hash_ids is not a list of whole numbers")
        tokens = _count(path, number, "input_length", obj.get("input_length"))
        output = _count(path, number, "output_length", obj.get("output_length"))
        yield stamp / 1e3, tokens, output, tuple(hashes[: tokens // MIN_TRACE_BLOCK_TOKENS])


def _timestamp(where: str, value: str) -> float:
    """A TIMESTAMP as seconds since the epoch (the Azure traces write 7 digits of a second: 6 are kept)."""
    head, dot, fraction = value.strip().partition(".")
    try:
        moment = datetime.fromisoformat(head + (dot + fraction[:6] if dot else ""))
    except ValueError:
        raise DatasetError(f"trace: {where}: TIMESTAMP {value!r:.40} is not a date and time") from None
    return moment.timestamp()


def _azure(path: Path) -> Iterator[tuple[float, int, int, tuple[int, ...]]]:
    at: dict[str, int] = {}
    width = 0
    for number, line in _lines(path):
        try:
            row = next(csv.reader([line.decode("utf-8")]), [])
        except UnicodeDecodeError:
            raise DatasetError(f"trace: {path}:{number}: not UTF-8 text") from None
        if number == 1:
            if any(name not in row for name in AZURE_COLUMNS):
                raise DatasetError(f"trace: {path}:1: the Azure layout needs a header with {', '.join(AZURE_COLUMNS)}")
            at, width = {name: row.index(name) for name in AZURE_COLUMNS}, len(row)
            continue
        if not row or not "".join(row).strip():
            continue
        if len(row) != width:
            raise DatasetError(f"trace: {path}:{number}: {len(row)} fields, the header has {width}")
        counts = []
        for name in AZURE_COLUMNS[1:]:
            value = row[at[name]].strip()
            counts.append(_count(path, number, name, int(value) if value.isdigit() and len(value) < 20 else value))
        yield _timestamp(f"{path}:{number}", row[at["TIMESTAMP"]]), counts[0], counts[1], ()
    if not at:
        raise DatasetError(f"trace: {path}:1: the Azure layout needs a header with {', '.join(AZURE_COLUMNS)}")
