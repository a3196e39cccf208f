"""Persistence: results appended one JSON line at a time (fsync'd), run.json written atomically."""

from __future__ import annotations

import json
import math
import os
import warnings
from pathlib import Path
from typing import Any

import pandas as pd

from toolkit.schema import COLUMNS, Measurement

RESULTS_FILE = "results.jsonl"
RUN_FILE = "run.json"


class ResultStore:
    """The JSONL file of one run. A crash loses at most the line being written."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.path = self.directory / RESULTS_FILE

    def append(self, measurement: Measurement) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        _drop_partial_tail(self.path)
        record = {k: _finite(v) for k, v in measurement.to_dict().items()}
        line = json.dumps(record, allow_nan=False) + "\n"
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def load(self) -> list[Measurement]:
        return load_measurements(self.path)


def _finite(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _drop_partial_tail(path: Path) -> None:
    """Cut an unterminated last line (left by a kill mid-write) so the next append starts clean.

    A last line that lacks only its newline is a whole record (`load` counted it as finished): it is
    terminated, not cut.
    """
    if not path.exists() or path.stat().st_size == 0:
        return
    data = path.read_bytes()
    if not data.endswith(b"\n"):
        keep = data.rfind(b"\n") + 1
        try:
            json.loads(data[keep:])
        except ValueError:
            path.write_bytes(data[:keep])
        else:
            with open(path, "ab") as f:
                f.write(b"\n")


def load_measurements(path: str | Path) -> list[Measurement]:
    """Read a results file; a truncated last line is ignored with a warning, other bad lines raise."""
    path = Path(path)
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    out = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(Measurement.from_dict(json.loads(line)))
        except json.JSONDecodeError:
            if number == len(lines):
                warnings.warn(f"{path}:{number}: truncated last line ignored", stacklevel=2)
                continue
            raise ValueError(f"{path}:{number}: not a JSON record") from None
    return out


def latest_by_key(measurements: list[Measurement]) -> dict[tuple[str, int, int], Measurement]:
    """The last record of each (phase, context, concurrency): a resumed cell replaces its Error."""
    return {m.key: m for m in measurements}


def to_dataframe(measurements: list[Measurement]) -> pd.DataFrame:
    frame = pd.DataFrame([m.to_dict() for m in measurements], columns=list(COLUMNS))
    order = {"prefill": 0, "decode": 1}
    if not frame.empty:
        frame = frame.sort_values(
            ["phase", "context_tokens", "concurrency"], key=lambda s: s.map(order) if s.name == "phase" else s
        ).reset_index(drop=True)
    return frame


def write_json_atomic(path: str | Path, data: dict[str, Any]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_json(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text(encoding="utf-8"))
