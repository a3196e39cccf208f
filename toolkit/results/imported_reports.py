"""Importer for published "Speed test matrix" text reports (the format of reference-reports/).

Quirks of that format handled here: "- Key" / "- Value" line pairs (a value may lack its "- "),
the launch command running into "Prefill" without a newline, section intros glued to the first
entry or table header, cells glued together ("24.3136 ms TTFT"), and a footnote glued to the
last table row. The decode matrix and prefill list are cross-checked against "All measurements".
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, cast

from toolkit.base.api_keys import redact, scrub
from toolkit.base.errors import ReportFormatError
from toolkit.base.schema import PHASE_TITLES, STATUSES, Measurement, Phase, Status
from toolkit.method.contexts import MARGIN, format_context, parse_context
from toolkit.method.number_parse import MAX_NUMBER_CHARS, parse_int, parse_number

TITLE = "Speed test matrix"
BLOCKS = ("Hardware", "Engine", "Run")
HEADINGS = frozenset((TITLE, *BLOCKS, "Launch command", "Prefill", "Sustained decode", "All measurements"))
PREFILL_INTRO = "prompt tok/s by context length"
MAX_REPORT_BYTES = 1024 * 1024  # the published reports are about 8 KB
_NUMBER_COLUMNS: tuple[tuple[str, str, Callable[[str], float | int | None]], ...] = (
    ("Total tok/s", "total_tok_s", parse_number),
    ("Per request tok/s", "per_request_tok_s", parse_number),
    ("TTFT", "ttft_ms", partial(parse_number, unit="ms")),
    ("Time between tokens", "tbt_ms", partial(parse_number, unit="ms")),
    ("Average active requests", "avg_active", parse_number),
    ("Completed requests", "completed", parse_int),
    ("Output tokens", "output_tokens", parse_int),
    ("Measured for", "measured_s", partial(parse_number, unit="s")),
)
TABLE_COLUMNS = ("Phase", "Context", "Requests at once", "Status", *(c for c, _f, _p in _NUMBER_COLUMNS))
_PHASES = {title: phase for phase, title in PHASE_TITLES.items()}
_PREFILL_ENTRY = re.compile(r"(\d+K) context(.+)")
_MAX_MODEL_LEN = re.compile(r"--max-model-len[= ](\d+)")
_SEPARATOR = re.compile(r":?-{3,}:?")


@dataclass(frozen=True)
class ImportedReport:
    """Measurements of every "All measurements" row, and the report's run information."""

    measurements: list[Measurement]
    run_info: dict[str, Any]


class _Cursor:
    """Non-blank lines of the text with their 1-based numbers, read one at a time."""

    def __init__(self, text: str, source: str) -> None:
        physical = text.split("\n")
        self.lines = [(i, line.rstrip()) for i, line in enumerate(physical, 1) if line.strip()]
        self.source, self.pos, self.number, self.last = source, 0, 0, len(physical)

    def peek(self) -> str | None:
        return self.lines[self.pos][1] if self.pos < len(self.lines) else None

    def next(self, expected: str) -> str:
        if self.pos >= len(self.lines):
            raise self.error(f"expected {expected}, found the end of the text", self.last)
        self.number, line = self.lines[self.pos]
        self.pos += 1
        return line

    def expect(self, exact: str) -> None:
        line = self.next(repr(exact))
        if line != exact:
            raise self.error(f"expected {exact!r}, found {_short(line)!r}")

    def error(self, message: str, number: int | None = None) -> ReportFormatError:
        return ReportFormatError(f"{self.source}:{number or self.number}: {message}")


def _short(line: str) -> str:
    return line if len(line) <= 60 else line[:57] + "..."


def _block(cur: _Cursor, name: str) -> dict[str, str]:
    cur.expect(name)
    pairs: dict[str, str] = {}
    while (line := cur.peek()) is not None and line.startswith("- "):
        key = cur.next("a key")[2:].strip()
        value = cur.next(f"the value of {key!r}")
        if value in HEADINGS or key in pairs:
            raise cur.error(f"expected one value for {key!r} in {name}, found {_short(value)!r}")
        pairs[key] = scrub(value[2:].strip() if value.startswith("- ") else value.strip())  # a block may hold a URL
    if not pairs:
        raise cur.error(f"expected '- Key' / '- Value' lines under {name!r}", cur.number + 1)
    return pairs


def _launch_command(cur: _Cursor) -> str:
    cur.expect("Launch command")
    parts: list[str] = []
    while (line := cur.next("the launch command, then 'Prefill'")) != "Prefill" or not parts:
        following = cur.peek() or ""
        if line.endswith("Prefill") and following.startswith(PREFILL_INTRO):
            return "\n".join([*parts, line.removesuffix("Prefill")])
        if line in HEADINGS or line.startswith("|"):
            raise cur.error(f"expected the launch command, then 'Prefill', found {_short(line)!r}")
        parts.append(line)
    return "\n".join(parts)


def _prefill_entries(cur: _Cursor) -> list[tuple[int, str, str]]:
    line = cur.next(repr(PREFILL_INTRO))
    if not line.startswith(PREFILL_INTRO):
        raise cur.error(f"expected {PREFILL_INTRO!r}, found {_short(line)!r}")
    entries: list[tuple[int, str, str]] = []
    rest = line.removeprefix(PREFILL_INTRO)
    while rest != "Sustained decode":
        if rest:
            match = _PREFILL_ENTRY.fullmatch(rest)
            if match is None:
                raise cur.error(f"expected '<context> context<tok/s><TTFT> ms TTFT', found {_short(rest)!r}")
            entries.append((cur.number, match[1], match[2]))
        rest = cur.next("a prefill entry or 'Sustained decode'")
    return entries


def _row(cur: _Cursor, line: str, count: int | None) -> tuple[list[str], str]:
    parts = line.split("|")
    cells = [part.strip() for part in parts[1:-1]]
    if parts[0].strip() or len(cells) < 2 or (count is not None and len(cells) != count):
        cells_text = f"of {count} cells " if count else ""
        raise cur.error(f"expected a table row {cells_text}'| ... |', found {_short(line)!r}")
    return cells, parts[-1].strip()


def _table(cur: _Cursor, what: str) -> tuple[int, list[str], list[tuple[int, list[str]]]]:
    """Read a table whose header is glued to an intro sentence; stop after a glued footnote."""
    line = cur.next(f"the {what} table header")
    if "|" not in line:
        raise cur.error(f"expected the {what} table header '| ... |', found {_short(line)!r}")
    header_number = cur.number
    header, _ = _row(cur, line[line.index("|") :], None)
    separator, _ = _row(cur, cur.next(f"the {what} table separator"), len(header))
    if not all(_SEPARATOR.fullmatch(cell) for cell in separator):
        raise cur.error(f"expected the {what} table separator '|---|...|'")
    rows: list[tuple[int, list[str]]] = []
    while (peek := cur.peek()) is not None and peek.startswith("|"):
        cells, trailing = _row(cur, cur.next("a table row"), len(header))
        rows.append((cur.number, cells))
        if trailing:
            break
    if not rows:
        raise cur.error(f"expected at least one {what} table row", cur.number + 1)
    return header_number, header, rows


def _context_tokens(label: str, phase: str, max_model_len: int | None) -> int:
    """Label -> tokens; a prefill label that cannot fit as label × 1024 is ``max_model_len - 64``."""
    tokens = parse_context(label)
    if format_context(tokens) != label:
        raise ValueError(f"{label!r} is not a context label like 8K")
    if phase == "prefill" and max_model_len is not None and tokens + MARGIN > max_model_len:
        return max_model_len - MARGIN if format_context(max_model_len - MARGIN) == label else tokens
    return tokens


def _measurement(cur: _Cursor, number: int, cells: list[str], max_model_len: int | None) -> Measurement:
    title, label, concurrency, status, *texts = cells
    if title not in _PHASES:
        raise cur.error(f"unknown phase {title!r}, expected one of {', '.join(_PHASES)}", number)
    if status not in STATUSES:
        raise cur.error(f"unknown status {status!r}, expected one of {', '.join(STATUSES)}", number)
    values: dict[str, Any] = {}
    for text, (column, name, parse) in zip(texts, _NUMBER_COLUMNS, strict=True):
        try:
            values[name] = parse(text)
        except ValueError as exc:
            raise cur.error(f"{column}: {exc}", number) from None
    if status == "Over capacity" and any(value is not None for value in values.values()):
        raise cur.error("an Over capacity row must show — for every number", number)
    try:
        tokens, count = _context_tokens(label, _PHASES[title], max_model_len), parse_int(concurrency)
    except ValueError as exc:
        raise cur.error(str(exc), number) from None
    if count is None or count < 1:
        raise cur.error(f"Requests at once: {concurrency!r} is not a positive whole number", number)
    return Measurement(cast(Phase, _PHASES[title]), tokens, label, count, cast(Status, status), **values)


def _shows(cell: str, m: Measurement) -> bool:
    """Whether a cell like "24.3136 ms TTFT", "1,113.1Requests queued417 ms TTFT" or "Over capacity"
    shows the status, tok/s and TTFT of ``m`` (the numbers are glued, so try every split up to the longest
    number: linear in the cell's length)."""
    status = next((s for s in STATUSES if s != "Valid" and s in cell), "Valid")
    body = cell.replace(status, "") if status != "Valid" else cell
    if status != m.status or not body:
        return status == m.status and status != "Valid"
    for i in range(1, min(len(body.removesuffix(" ms TTFT")), MAX_NUMBER_CHARS + 1)):  # a number is short
        try:
            shown = (parse_number(body[:i]), parse_number(body[i:].removesuffix(" TTFT"), "ms"))
        except ValueError:
            continue
        if shown == (m.total_tok_s, m.ttft_ms):
            return True
    return False


def _mismatch(cur: _Cursor, number: int, where: str, cell: str, m: Measurement) -> ReportFormatError:
    got = f"{m.status}, {m.total_tok_s} tok/s, {m.ttft_ms} ms TTFT"
    return cur.error(f"{where} shows {_short(cell)!r} but All measurements has {got}", number)


def _check_prefill(cur: _Cursor, entries: list[tuple[int, str, str]], rows: list[Measurement]) -> None:
    if [label for _n, label, _c in entries] != [m.context for m in rows]:
        number = entries[0][0] if entries else cur.number
        raise cur.error("the Prefill list and the All measurements Prefill rows differ in contexts", number)
    for (number, label, cell), m in zip(entries, rows, strict=True):
        if not _shows(cell, m):
            raise _mismatch(cur, number, f"Prefill {label}", cell, m)


def _check_matrix(
    cur: _Cursor,
    table: tuple[int, list[str], list[tuple[int, list[str]]]],
    decode: dict[tuple[str, int], Measurement],
) -> None:
    header_number, header, rows = table
    if header[0] != "Context":
        raise cur.error("expected the decode matrix header '| Context | 1 | 2 | ...'", header_number)
    try:
        levels = [parse_int(cell) or 0 for cell in header[1:]]
    except ValueError as exc:
        raise cur.error(f"decode matrix header: {exc}", header_number) from None
    seen: set[tuple[str, int]] = set()
    for number, (label, *cells) in rows:
        for level, cell in zip(levels, cells, strict=True):
            m = decode.get((label, level))
            if m is None or (label, level) in seen:
                raise cur.error(f"decode matrix {label} × {level} has no single All measurements row", number)
            seen.add((label, level))
            if not _shows(cell, m):
                raise _mismatch(cur, number, f"decode matrix {label} × {level}", cell, m)
    if missing := sorted(set(decode) - seen):
        raise cur.error(f"All measurements rows missing from the decode matrix: {missing}", rows[-1][0])


def parse_report(text: str, source: str = "<text>") -> ImportedReport:
    """Parse a published speed test matrix report; raises ``ReportFormatError`` on other input."""
    cur = _Cursor(text, source)
    cur.expect(TITLE)
    title, summary = cur.next("the model and hardware line"), cur.next("the summary line")
    blocks = {name.lower(): _block(cur, name) for name in BLOCKS}
    launch = _launch_command(cur)
    entries = _prefill_entries(cur)
    matrix = _table(cur, "decode matrix")
    while (line := cur.next("'All measurements'")) != "All measurements":
        if "|" in line or line in HEADINGS:
            raise cur.error(f"expected 'All measurements', found {_short(line)!r}")
    header_number, header, rows = _table(cur, "All measurements")
    if tuple(header) != TABLE_COLUMNS:
        raise cur.error(f"expected the All measurements columns {' | '.join(TABLE_COLUMNS)}", header_number)
    while (extra := cur.peek()) is not None:
        if cur.next("footnotes").startswith("|") or extra in HEADINGS:
            raise cur.error(f"expected only footnotes after the All measurements table, found {_short(extra)!r}")
    found = _MAX_MODEL_LEN.search(launch)
    max_model_len = int(found[1]) if found else None
    measurements: list[Measurement] = []
    lines: dict[tuple[str, int, int], int] = {}
    for number, cells in rows:
        m = _measurement(cur, number, cells, max_model_len)
        if m.key in lines:
            raise cur.error(f"duplicate of the row on line {lines[m.key]}", number)
        lines[m.key] = number
        measurements.append(m)
    _check_prefill(cur, entries, [m for m in measurements if m.phase == "prefill"])
    decode = {(m.context, m.concurrency): m for m in measurements if m.phase == "decode"}
    _check_matrix(cur, matrix, decode)
    info = {
        "title": title,
        "summary": _matrix_summary(summary, blocks.get("engine", {})),
        **blocks,
        "launch_command": redact(launch),  # a published report's command may hold a key: redacted like ours
        "source": "imported",
    }
    return ImportedReport(measurements, {**info, "max_model_len": max_model_len})


def import_report_file(path: str | Path) -> ImportedReport:
    """Read (at most `MAX_REPORT_BYTES`) and parse one report file; error messages start with the path."""
    with open(path, "rb") as f:
        data = f.read(MAX_REPORT_BYTES + 1)
    if len(data) > MAX_REPORT_BYTES:
        raise ReportFormatError(f"{path}: larger than {MAX_REPORT_BYTES:,} bytes, which no speed test matrix report is")
    return parse_report(data.decode("utf-8"), source=str(path))


def _matrix_summary(line: str, engine: dict[str, str]) -> str:
    """The "N contexts … · prefill at …" part of the summary line; the engine part is rebuilt from Engine."""
    prefix = " · ".join(engine[k] for k in ("Engine", "Version", "Quantization") if engine.get(k))
    return line[len(prefix) :].lstrip(" ·") if prefix and line.startswith(prefix) else line
