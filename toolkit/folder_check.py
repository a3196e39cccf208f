"""`check`: a run folder validated as a whole, one line per problem.

Every document parses and is of a layout this toolkit reads (results.store.schema_problem); every JSONL line is
whole; a measured run's records are cells of its plan, and every cell of a phase it began has one; the decode cells
that ran have their traces; no file holds a key-shaped string. A batch folder is checked variant by variant.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import ValidationError

from toolkit.base.api_keys import holds_secret
from toolkit.base.errors import ToolkitError
from toolkit.base.schema import Measurement
from toolkit.matrix.control import CONTROL_FILE
from toolkit.matrix.plan import make_plan
from toolkit.matrix.traces import TRACES_DIR, trace_path
from toolkit.params import RunParams
from toolkit.rates.files import RATES_DIR, STEPS_FILE, SWEEP_FILE, step_file
from toolkit.results.run_document import RunDocument
from toolkit.results.store import RESULTS_FILE, RUN_FILE, read_json
from toolkit.servers.launch import LAUNCH_FILE

BATCH_FILE = "batch.json"  # toolkit.batch.state.STATE_FILE (a layer above)
TEXT_SUFFIXES = {".json", ".jsonl", ".md", ".html", ".ipynb", ".csv", ".txt", ".log", ".yaml", ".yml"}
Key = tuple[str, int, int]
NOT_RUN = ("Over capacity", "Error")  # decided by the capacity rule without a window; failed before its trace


def check_folder(folder: str | Path, *secrets: str | None) -> list[str]:
    """The problems of a run or batch folder, one line each ("FILE[:LINE]: what"); empty when it is sound.

    `secrets` (the keys this process knows are added by redaction itself) are looked for in every text file.
    """
    root = Path(folder)
    if not root.is_dir():
        return [f"{root}: not a folder"]
    if (root / BATCH_FILE).exists():
        variants = sorted(p.parent for p in root.glob(f"*/{RUN_FILE}"))
        problems = _document_problems(root / BATCH_FILE)
        problems += [line for variant in variants for line in _run_problems(variant)]
    elif (root / RUN_FILE).exists():
        problems = _run_problems(root)
    else:
        return [f"{root}: not a run folder (no {RUN_FILE}) nor a batch folder (no {BATCH_FILE})"]
    return problems + _secret_problems(root, secrets)


def _run_problems(folder: Path) -> list[str]:
    try:
        document = RunDocument.model_validate(read_json(folder / RUN_FILE))
    except ToolkitError as exc:
        return [exc.line]
    except ValidationError as exc:
        return [f"{folder / RUN_FILE}: not a toolkit run.json: {_first_error(exc)}"]
    if foreign := _foreign(document):
        return [f"{folder / RUN_FILE}: {foreign}"]
    problems = _document_problems(folder / LAUNCH_FILE) if (folder / LAUNCH_FILE).exists() else []
    records, record_problems = _records(folder / RESULTS_FILE)
    problems += record_problems + _records(folder / CONTROL_FILE)[1]
    if document.source == "toolkit" and records:  # a rate sweep's run.json holds its own params, and no cells
        problems += _plan_problems(folder, document, records)
    if (folder / TRACES_DIR).is_dir():
        ran = [(c, n) for (phase, c, n), m in records.items() if phase == "decode" and m.status not in NOT_RUN]
        problems += [f"{trace_path(folder, c, n)}: missing: decode {c} ×{n} ran but its trace is not there"
                     for c, n in ran if not trace_path(folder, c, n).exists()]  # fmt: skip
    if (folder / RATES_DIR).is_dir():
        problems += _rate_problems(folder)
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


def _document_problems(path: Path) -> list[str]:
    try:
        read_json(path)
    except ToolkitError as exc:
        return [exc.line]
    return []


def _json_lines(path: Path) -> Iterator[tuple[int, Any, str | None]]:
    """(line number, value, problem) of every non-empty line of a JSONL file."""
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            yield number, None, f"{path}:{number}: a cut or damaged line (not JSON)"
            continue
        yield number, value, None if isinstance(value, dict) else f"{path}:{number}: not a JSON object"


def _records(path: Path) -> tuple[dict[Key, Measurement], list[str]]:
    """A results file's last record of each cell, and its problems."""
    records: dict[Key, Measurement] = {}
    problems: list[str] = []
    if not path.exists():
        return records, problems
    for number, value, problem in _json_lines(path):
        if problem:
            problems.append(problem)
            continue
        try:
            m = Measurement.from_dict(value)
        except ToolkitError as exc:
            problems.append(f"{path}:{number}: {exc.line}")
            continue
        except TypeError as exc:
            problems.append(f"{path}:{number}: not a result record ({exc})")
            continue
        records[m.key] = m
    return records, problems


def _plan_problems(folder: Path, document: RunDocument, records: dict[Key, Measurement]) -> list[str]:
    """Records outside the run's plan, and the cells of a phase the run began that have no record."""
    path = folder / RESULTS_FILE
    try:
        params = RunParams.model_validate(document.params)
        plan = make_plan(params, int((document.server or {}).get("max_model_len") or 0))
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


def _rate_problems(folder: Path) -> list[str]:
    problems = _document_problems(folder / RATES_DIR / SWEEP_FILE)
    steps = folder / RATES_DIR / STEPS_FILE
    if not steps.exists():
        return problems
    for number, row, problem in _json_lines(steps):
        if problem:
            problems.append(problem)
            continue
        records = step_file(folder, int(row.get("step", -1)))
        try:
            pd.read_parquet(records)
        except (OSError, ValueError) as exc:
            problems.append(f"{steps}:{number}: step {row.get('step')}'s records {records.name} unreadable: {exc}")
    return problems


def _secret_problems(root: Path, secrets: tuple[str | None, ...]) -> list[str]:
    """Text files that hold a key-shaped string: the first such line of each."""
    problems = []
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES):
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if holds_secret(line, *secrets):
                problems.append(f"{path}:{number}: holds a key-shaped string (a key, token or password)")
                break
    return problems


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    return f"{'.'.join(map(str, error['loc'])) or 'document'}: {error['msg']}"
