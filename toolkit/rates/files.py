"""The sweep's files in a run folder, written so that a stop at any moment keeps every finished step.

    <out>/run.json                 server discovery and environment, as the matrix writes it
    <out>/rates/sweep.json         the parameters as run (no secrets), and "search" once a search ran
    <out>/rates/steps.jsonl        one JSON line per finished step, appended (fsync'd) as the step ends
    <out>/rates/step-NNN.parquet   the step's per-request records (`RECORD_COLUMNS`), written before its line

JSON holds no NaN or infinity: a missing figure is null, and a rate of `inf` (all at once) is the string "inf".
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

from toolkit.base.api_keys import scrub
from toolkit.method.embeddings import complete_embedding_records
from toolkit.method.goodput import RECORD_COLUMNS
from toolkit.results.documents.step import STEPS_FILE, RateStep
from toolkit.results.documents.step import json_safe as json_safe  # its home before steps had a model
from toolkit.results.documents.step import read_steps as read_step_lines
from toolkit.results.documents.sweep import SweepDocument
from toolkit.results.rate_runs import RATES_DIR, SWEEP_FILE
from toolkit.results.rate_runs import step_file as step_name
from toolkit.results.step_row import StepRow
from toolkit.results.store import StoreError


def rates_dir(out: Path) -> Path:
    return Path(out) / RATES_DIR


def step_file(out: Path, step: int) -> Path:
    return rates_dir(out) / step_name(step)


def step_line(row: RateStep | dict[str, Any]) -> bytes:
    """One steps.jsonl line (RateStep.line): an infinite rate as "inf", other non-finite numbers as null."""
    return RateStep.of(row).line()


def write_sweep(out: Path, sweep: dict[str, Any]) -> None:
    """sweep.json, validated as `SweepDocument` (RateSweepError in one line when a field does not fit), a server's
    strings (the model id) scrubbed, as every document is (write_json_atomic)."""
    path = rates_dir(out) / SWEEP_FILE
    SweepDocument.written(sweep, path).write(path)


def read_sweep(out: Path) -> SweepDocument:
    """sweep.json as written (RateSweepError in one line when it is missing, damaged or newer)."""
    return SweepDocument.read(rates_dir(out) / SWEEP_FILE)


def as_written(sweep: dict[str, Any]) -> dict[str, Any]:
    """`sweep` as sweep.json will read back (tuples as lists, other objects as text), to compare with one read."""
    loaded: dict[str, Any] = json.loads(json.dumps(sweep, default=str))
    return loaded


def update_sweep(out: Path, **fields: Any) -> None:
    write_sweep(out, {**read_sweep(out).as_dict(), **fields})


def records_frame(records: list[dict[str, Any]], step: int, offered_rate: float) -> pd.DataFrame:
    """A step's records as a frame with exactly `RECORD_COLUMNS` (and an embeddings step's `items`)."""
    rows = [{"step": step, "offered_rate": offered_rate, **r} for r in records]
    columns = list(RECORD_COLUMNS) + (["items"] if rows and "items" in rows[0] else [])
    frame = pd.DataFrame(rows, columns=columns)
    frame = frame.astype({"step": "int64", "request": "int64", "input_tokens": "int64", "output_tokens": "int64"})
    return complete_embedding_records(frame)  # a field the sender did not set has its default


def scrubbed(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with every text cell scrubbed (toolkit.base.api_keys.scrub): no secret reaches a parquet file."""
    types = pd.api.types
    text = [c for c in frame.columns if types.is_object_dtype(frame[c]) or types.is_string_dtype(frame[c])]
    return frame.assign(**{c: frame[c].map(lambda v: scrub(v) if isinstance(v, str) else v) for c in text})


def write_step(out: Path, step: int, frame: pd.DataFrame, row: RateStep | dict[str, Any]) -> None:
    """The step's records (atomically), then its line in steps.jsonl: a line always has its records."""
    path, line = step_file(out, step), RateStep.of(row)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        scrubbed(frame).to_parquet(tmp, index=False)
        os.replace(tmp, path)
        line.append(rates_dir(out) / STEPS_FILE)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise StoreError(
            f"out: cannot write step {step} in {path.parent}: {exc.strerror or exc}; the steps written before are kept"
        ) from None


def read_steps(out: Path, model: type[StepRow] = StepRow) -> list[RateStep]:
    """The finished steps, in order ("inf" rates back as infinity), each validated as `model` (SweepStep: every
    field a resumed sweep reads back); RateSweepError naming the file, line and field of the first that is not one."""
    return read_step_lines(rates_dir(out) / STEPS_FILE, model)


def read_step_records(out: Path, step: int) -> pd.DataFrame:
    """One finished step's records."""
    return complete_embedding_records(pd.read_parquet(step_file(out, step)))


def read_records(out: Path) -> pd.DataFrame:
    """Every finished step's records, one frame (a step's line is written after its file: the lines decide)."""
    frames = [read_step_records(out, row.step) for row in read_steps(out)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(RECORD_COLUMNS))
