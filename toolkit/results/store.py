"""Persistence: results appended one JSON line at a time (fsync'd), run.json written atomically; a folder that
cannot be written is a one-line StoreError."""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.base.api_keys import scrub_tree
from toolkit.base.errors import ResultsError, StoreError
from toolkit.base.schema import COLUMNS, SCHEMA_VERSION, Measurement
from toolkit.results.json_text import MAX_LINE_CHARS, json_lines, parse_json
from toolkit.results.measurement_row import validated_measurement
from toolkit.results.validation import line_where

if TYPE_CHECKING:
    import pandas as pd

RESULTS_FILE = "results.jsonl"
RUN_FILE = "run.json"
# SCHEMA_VERSION (base.schema) is stamped in every result record and in every JSON document of a run folder (run.json,
# server.json, batch.json, rates/sweep.json); sweep.json's covers steps.jsonl and the request records. A document
# without it was written before documents were stamped: version 1, the layout of today.


class ResultStore:
    """The JSONL file of one run. A crash or a failed write loses at most the line being written."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.path = self.directory / RESULTS_FILE

    def append(self, measurement: Measurement) -> None:
        record = scrub_tree({k: _finite(v) for k, v in measurement.to_dict().items()})  # no secret reaches disk
        line = (json.dumps(record, allow_nan=False) + "\n").encode("utf-8")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            append_line(self.path, line)
        except OSError as exc:
            raise StoreError(
                f"out: cannot write {self.path}: {exc.strerror or exc}; the records written before "
                "are kept (rerun with --resume once it can be written)"
            ) from None

    def load(self) -> list[Measurement]:
        return load_measurements(self.path)


def nothing_to_resume(folder: Path, missing: str, kind: str) -> str:
    """The line a --resume prints, once it holds `folder`, where the folder has no `missing` to continue: a new
    `kind` starts there (a mistyped folder would otherwise be measured again without a word)."""
    return f"resume: {folder} holds no {missing}; nothing to continue, a new {kind} starts there"


def check_writable(directory: str | Path) -> None:
    """Create `directory` if needed and write a probe file in it: StoreError (one line) before any load if not."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-check-", dir=directory)
        try:
            _write_all(fd, b"x")
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as exc:
        raise StoreError(f"out: {directory} is not writable: {exc.strerror or exc}") from None


def append_line(path: Path, line: bytes) -> None:
    """Append one whole line and fsync it; a line cut short (by a crash before) is dropped first, and a failed
    write leaves no partial line behind (OSError)."""
    _drop_partial_tail(path)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)  # never a link's target
    try:
        end = os.lseek(fd, 0, os.SEEK_END)
        try:
            _write_all(fd, line)
            os.fsync(fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, end)  # no partial line left behind
            raise
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _finite(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _drop_partial_tail(path: Path) -> None:
    """Cut an unterminated last line (left by a kill mid-write) so the next append starts clean.

    The file is truncated in place (nothing before the cut is rewritten, so a full disk cannot lose it). A last
    line that lacks only its newline is a whole record (`load` counted it as finished): it is terminated, not cut.
    """
    if not path.exists():
        return
    with open(path, "r+b", buffering=0) as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return
        keep = size
        while keep > 0:  # back to the start of the last line, a block at a time
            start = max(0, keep - _TAIL_BLOCK)
            f.seek(start)
            block = f.read(keep - start)
            if keep == size and block.endswith(b"\n"):
                return
            at = block.rfind(b"\n")
            if at >= 0:
                keep = start + at + 1
                break
            keep = start
        f.seek(keep)
        try:
            json.loads(f.read())
        except ValueError:
            f.truncate(keep)
        else:
            _write_all(f.fileno(), b"\n")
        os.fsync(f.fileno())


_TAIL_BLOCK = 64 * 1024


def read_jsonl(path: str | Path) -> list[Any]:
    """The JSON values of a JSONL file the toolkit appends to; a last line cut short (a crash mid-write) is dropped
    with a one-line warning naming the file and line, any other bad line raises ResultsError naming them."""
    return [value for _, value in read_jsonl_lines(path)]


def read_jsonl_lines(path: str | Path, error: type[ResultsError] = ResultsError) -> list[tuple[int, Any]]:
    """(line number, JSON value) of every line of a JSONL file the toolkit appends to, read a line at a time: a
    last line cut short is dropped with a one-line warning; any other bad line raises `error` naming file and line."""
    path = Path(path)
    if not path.exists():
        return []
    out: list[tuple[int, Any]] = []
    cut: int | None = None  # a line that is not JSON: allowed only as the last
    try:
        for number, line in json_lines(path):
            if cut is not None:
                raise error(f"{path}:{cut}: not a JSON record")
            if line is None:
                raise error(f"{path}:{number}: a line longer than {MAX_LINE_CHARS} characters; not a record")
            try:
                out.append((number, parse_json(line)))
            except json.JSONDecodeError:
                cut = number
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror or exc}") from None
    if cut is not None:
        warnings.warn(f"{path}:{cut}: truncated last line ignored", stacklevel=3)
    return out


def load_measurements(path: str | Path) -> list[Measurement]:
    """Read a results file, each line validated against the result schema (ResultsError naming file, line and
    field); a truncated last line is ignored with a warning, other bad lines raise."""
    path = Path(path)
    return [validated_measurement(value, line_where(path, number)) for number, value in read_jsonl_lines(path)]


def latest_by_key(measurements: list[Measurement]) -> dict[tuple[str, int, int], Measurement]:
    """The last record of each (phase, context, concurrency): a resumed cell replaces its Error."""
    return {m.key: m for m in measurements}


def to_dataframe(measurements: list[Measurement]) -> pd.DataFrame:
    """The measurements as a frame of `COLUMNS`, prefill first, then by context and concurrency (pandas imported
    here: a command that stops on bad input never pays for it)."""
    import pandas as pd

    frame = pd.DataFrame([m.to_dict() for m in measurements], columns=list(COLUMNS))
    order = {"prefill": 0, "decode": 1}
    if not frame.empty:
        frame = frame.sort_values(
            ["phase", "context_tokens", "concurrency"], key=lambda s: s.map(order) if s.name == "phase" else s
        ).reset_index(drop=True)
    return frame


def write_json_atomic(path: str | Path, data: dict[str, Any]) -> dict[str, Any]:
    """Write the document `data`, stamped with this toolkit's `schema_version`, every string scrubbed (no secret,
    no control character: toolkit.base.api_keys.scrub), to a unique temporary file beside `path`, fsync it,
    rename it over `path`, fsync the folder; the document as written.

    StoreError (one line) when it cannot be written; the old file is then untouched and no temporary file is left.
    """
    path = Path(path)
    given = {"schema_version": SCHEMA_VERSION, **{k: v for k, v in data.items() if k != "schema_version"}}
    stamped: dict[str, Any] = scrub_tree(json.loads(json.dumps(given, default=str)))  # every string: the one filter
    text = (json.dumps(stamped, indent=2, default=str) + "\n").encode("utf-8")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            try:
                os.fchmod(fd, 0o644)  # as open() would make it, not mkstemp's 0o600
                _write_all(fd, text)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        folder = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
    except OSError as exc:
        raise StoreError(f"out: cannot write {path}: {exc.strerror or exc}") from None
    return stamped


def read_json(path: str | Path, error: type[ResultsError] = ResultsError) -> dict[str, Any]:
    """A JSON document of the toolkit (run.json, server.json, batch.json, sweep.json); `error` in one line when it
    is damaged, not an object, or of a newer or unknown schema version."""
    try:
        document = parse_json(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise error(f"{path}: not a JSON document ({exc}); the file is damaged") from None
    if not isinstance(document, dict):
        raise error(f"{path}: not a JSON object but {type(document).__name__}; not a toolkit document")
    if problem := schema_problem(document):
        raise error(f"{path}: {problem}")
    return document


def schema_problem(document: dict[str, Any]) -> str | None:
    """Why this toolkit cannot read `document`'s layout (a newer or unknown `schema_version`), else None."""
    version = document.get("schema_version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        return f"schema_version {version!r} is not a version this toolkit knows (1 to {SCHEMA_VERSION})"
    if version > SCHEMA_VERSION:
        return (f"schema_version {version} is newer than this toolkit reads (up to {SCHEMA_VERSION}); "
                "upgrade vllm-speedtest to read it")  # fmt: skip
    return None
