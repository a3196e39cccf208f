"""`check`: a run folder validated as a whole, one line per problem.

Every document parses and is of a layout this toolkit reads (results.store.schema_problem); every JSONL line is
whole and a record of its schema, each field of its type, finite and in its range (results.measurement_row,
results.step_row); a measured run's records are cells of its plan, and every cell of a phase it began has one; the
decode cells that ran have their traces; no text file and no text column of a Parquet file holds a key-shaped
string, and no numeric column an infinity. A link that leads out of the folder is named, not followed; every file
is read a line, a piece or a batch of rows at a time (results.folder_files). A batch folder is checked variant by
variant.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from toolkit.base.errors import ToolkitError
from toolkit.base.schema import Measurement
from toolkit.matrix.control import CONTROL_FILE
from toolkit.matrix.plan import make_plan
from toolkit.matrix.traces import TRACES_DIR, trace_path
from toolkit.params import RunParams
from toolkit.rates.files import RATES_DIR, STEPS_FILE, SWEEP_FILE, step_file
from toolkit.results.documents.base import Document
from toolkit.results.documents.batch import BATCH_FILE, BatchDocument
from toolkit.results.documents.server import LAUNCH_FILE, ServerRecord
from toolkit.results.documents.sweep import SweepDocument
from toolkit.results.folder_files import MAX_DOCUMENT_BYTES, inside, parquet_problems, secret_line, walk
from toolkit.results.json_text import MAX_LINE_CHARS, TOO_DEEP, TOO_MANY_DIGITS, json_lines, parse_json
from toolkit.results.measurement_row import validated_measurement
from toolkit.results.run_document import RunDocument
from toolkit.results.step_row import validated_step
from toolkit.results.store import RESULTS_FILE, RUN_FILE, read_json
from toolkit.results.validation import line_where

TEXT_SUFFIXES = {".json", ".jsonl", ".md", ".html", ".ipynb", ".csv", ".txt", ".log", ".yaml", ".yml"}
Key = tuple[str, int, int]
NOT_RUN = ("Over capacity", "Error")  # decided by the capacity rule without a window; failed before its trace


def check_folder(folder: str | Path, *secrets: str | None) -> list[str]:
    """The problems of a run or batch folder, one line each ("FILE[:LINE]: what"); empty when it is sound.

    `secrets` (the keys this process knows are added by redaction itself) are looked for in every text file and
    every text column of a Parquet file.
    """
    root = Path(folder)
    if not root.is_dir():
        return [f"{root}: not a folder"]
    files, links = walk(root)
    real = root.resolve()
    if _usable(real, root / BATCH_FILE):
        variants = sorted(p.parent for p in root.glob(f"*/{RUN_FILE}") if _usable(real, p))
        problems = _document_problems(root / BATCH_FILE, BatchDocument)
        problems += [line for variant in variants for line in _run_problems(variant, real)]
    elif _usable(real, root / RUN_FILE):
        problems = _run_problems(root, real)
    elif any((root / name).is_symlink() for name in (RUN_FILE, BATCH_FILE)):
        return links  # its run.json or batch.json is a link out of it: that line says why it is not read
    else:
        return [f"{root}: not a run folder (no {RUN_FILE}) nor a batch folder (no {BATCH_FILE})", *links]
    problems += links + [
        line for path in files if path.suffix == ".parquet" for line in parquet_problems(path, *secrets)
    ]
    return [" ".join(line.splitlines()) for line in problems + _secret_problems(files, secrets)]  # a name's newline


def _usable(root: Path, path: Path) -> bool:
    """Whether `path` is a file inside `root` (resolved) to read: a link out of it is named by `walk`, not read."""
    return path.is_file() and inside(root, path)


def _run_problems(folder: Path, root: Path) -> list[str]:
    run_file = folder / RUN_FILE
    if run_file.stat().st_size > MAX_DOCUMENT_BYTES:
        return [f"{run_file}: larger than {MAX_DOCUMENT_BYTES} bytes; not a toolkit run.json"]
    try:
        document = RunDocument.model_validate(read_json(run_file))
    except ToolkitError as exc:
        return [exc.line]
    except ValidationError as exc:
        return [f"{run_file}: not a toolkit run.json: {_first_error(exc)}"]
    if foreign := _foreign(document):
        return [f"{run_file}: {foreign}"]
    launch = folder / LAUNCH_FILE
    problems = _document_problems(launch, ServerRecord) if _usable(root, launch) else []
    records, record_problems = _records(folder / RESULTS_FILE, root)
    problems += record_problems + _records(folder / CONTROL_FILE, root)[1]
    if document.source == "toolkit" and records:  # a rate sweep's run.json holds its own params, and no cells
        problems += _plan_problems(folder, document, records)
    if (folder / TRACES_DIR).is_dir():
        ran = [(c, n) for (phase, c, n), m in records.items() if phase == "decode" and m.status not in NOT_RUN]
        problems += [f"{trace_path(folder, c, n)}: missing: decode {c} ×{n} ran but its trace is not there"
                     for c, n in ran if not trace_path(folder, c, n).exists()]  # fmt: skip
    if (folder / RATES_DIR).is_dir() and inside(root, folder / RATES_DIR):
        problems += _rate_problems(folder, root)
    return problems


def _foreign(document: RunDocument) -> str | None:
    """Why this run.json is not one of ours (another tool's file of the same name), else None."""
    ours = set(RunDocument.model_fields) - {"source", "schema_version"}
    if document.source not in ("toolkit", "imported"):
        return f"not a toolkit run.json: source {document.source!r} (expected 'toolkit' or 'imported')"
    if not ours & document.model_fields_set:
        extra = ", ".join(sorted(document.model_extra or {})[:5]) or "nothing"
        return f"not a toolkit run.json: none of its fields are the toolkit's (it holds {extra})"
    return None


def _document_problems(path: Path, document: type[Document]) -> list[str]:
    if path.stat().st_size > MAX_DOCUMENT_BYTES:
        return [f"{path}: larger than {MAX_DOCUMENT_BYTES} bytes; not a toolkit document"]
    try:
        document.read(path)
    except ToolkitError as exc:
        return [exc.line]
    return []


def _json_lines(path: Path) -> Iterator[tuple[int, Any, str | None]]:
    """(line number, value, problem) of every non-empty line of a JSONL file, read a line at a time."""
    try:
        for number, line in json_lines(path):
            if line is None:
                yield number, None, f"{path}:{number}: a line longer than {MAX_LINE_CHARS} characters; not a record"
                continue
            try:
                value = parse_json(line)
            except json.JSONDecodeError as exc:
                yield number, None, f"{path}:{number}: a cut or damaged line (not JSON{_why(exc)})"
                continue
            yield number, value, None if isinstance(value, dict) else f"{path}:{number}: not a JSON object"
    except OSError as exc:
        yield 0, None, f"{path}: cannot read: {exc.strerror or exc}"


def _why(exc: json.JSONDecodeError) -> str:
    """Why a line is not JSON, where it is more than cut: nested too deep, a number too long."""
    return f": {exc.msg}" if exc.msg in (TOO_DEEP, TOO_MANY_DIGITS) else ""


def _records(path: Path, root: Path) -> tuple[dict[Key, Measurement], list[str]]:
    """A results file's last record of each cell, and its problems (a line that is no result record of its
    schema: a field of another type, not finite, or out of its range)."""
    records: dict[Key, Measurement] = {}
    problems: list[str] = []
    if not _usable(root, path):
        return records, problems
    for number, value, problem in _json_lines(path):
        if problem:
            problems.append(problem)
            continue
        try:
            m = validated_measurement(value, line_where(path, number))
        except ToolkitError as exc:
            problems.append(exc.line)
            continue
        records[m.key] = m
    return records, problems


def _plan_problems(folder: Path, document: RunDocument, records: dict[Key, Measurement]) -> list[str]:
    """Records outside the run's plan, and the cells of a phase the run began that have no record."""
    path = folder / RESULTS_FILE
    try:
        params = RunParams.model_validate(document.params.as_dict() if document.params is not None else None)
        plan = make_plan(params, (document.server.max_model_len if document.server is not None else None) or 0)
    except (ValidationError, ToolkitError, ValueError, TypeError) as exc:
        reason = _first_error(exc) if isinstance(exc, ValidationError) else str(exc)
        return [f"{folder / RUN_FILE}: its params give no plan to check the records against ({reason})"]
    planned = plan.keys(("prefill", "decode"))
    begun = {phase for phase, _, _ in records}
    problems = [f"{path}: {_cell(k)} is not a cell of the run's plan" for k in records if k not in planned]
    missing = [k for k in planned if k[0] in begun and k not in records]
    if missing:
        shown = ", ".join(_cell(k) for k in missing[:4]) + (", …" if len(missing) > 4 else "")
        problems.append(f"{path}: {len(missing)} planned cells have no record ({shown}); --resume measures them")
    return problems


def _cell(key: Key) -> str:
    phase, context, n = key
    return f"{phase} {context} ×{n}"


def _rate_problems(folder: Path, root: Path) -> list[str]:
    sweep = folder / RATES_DIR / SWEEP_FILE
    problems = _document_problems(sweep, SweepDocument) if _usable(root, sweep) else []
    steps = folder / RATES_DIR / STEPS_FILE
    if not _usable(root, steps):
        return problems
    for number, row, problem in _json_lines(steps):
        if problem:
            problems.append(problem)
            continue
        try:
            step = validated_step(row, line_where(steps, number)).step
        except ToolkitError as exc:
            problems.append(exc.line)
            continue
        if not step_file(folder, step).is_file():
            problems.append(f"{steps}:{number}: step {step}'s records {step_file(folder, step).name} are missing")
    return problems


def _secret_problems(files: list[Path], secrets: tuple[str | None, ...]) -> list[str]:
    """Text files that hold a key-shaped string: the first such line of each."""
    found = [(path, secret_line(path, *secrets)) for path in files if path.suffix in TEXT_SUFFIXES]
    return [f"{path}:{line}: holds a key-shaped string (a key, token or password)" for path, line in found if line]


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    return f"{'.'.join(map(str, error['loc'])) or 'document'}: {error['msg']}"
