"""Reading run folders: one run (measured or imported) or many runs as one tidy DataFrame with a ``run`` column."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import pandas as pd

from toolkit.base.errors import ParamsError, ResultsError
from toolkit.base.schema import COLUMNS, Measurement
from toolkit.method.drift import (
    CELL_DRIFT_COLUMNS,
    ControlFit,
    cell_drift,
    cell_drift_columns,
    control_fit,
    run_drift,
)
from toolkit.results.documents.run_blocks import ControlBlock
from toolkit.results.rounds import combine_rounds
from toolkit.results.run_document import RunDocument
from toolkit.results.store import RESULTS_FILE, RUN_FILE, load_measurements, to_dataframe

__all__ = [
    "RESULTS_CSV",
    "RUN_COLUMN",
    "RUN_DRIFT",
    "default_label",
    "load_run",
    "load_runs",
    "run_control_fit",
    "unique_labels",
]

RESULTS_CSV = "results.csv"  # an imported report keeps its measurements here (no results.jsonl)
RUN_COLUMN = "run"
RUN_DRIFT = "run_drift"  # each row's run's control drift (toolkit.method.drift), for compare
_INT_FIELDS = frozenset(f.name for f in fields(Measurement) if str(f.type) in ("int", "int | None"))


def _cell(name: str, value: Any) -> Any:
    """A CSV value back to its schema type: NaN -> None, 7.0 -> 7 for integer fields."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if name in _INT_FIELDS and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _csv_measurements(path: Path) -> list[Measurement]:
    frame = pd.read_csv(path, dtype={"context": str, "spec_acceptance_by_position": str})
    records = frame.to_dict("records")
    return [Measurement.from_dict({str(k): _cell(str(k), v) for k, v in row.items()}) for row in records]


def load_run(directory: str | Path) -> tuple[pd.DataFrame, dict[str, Any]]:
    """One row per measurement of a run folder (the latest record; the median of its rounds when repeated, see
    toolkit.results.rounds), and its run.json as shown (RunDocument.shown).

    A measured run is read from results.jsonl; an imported report (no results.jsonl) from results.csv.
    Both give the same schema-typed DataFrame.
    """
    folder = Path(directory)
    if not (folder / RUN_FILE).exists():
        raise ResultsError(f"{folder}: not a run folder (no {RUN_FILE})")
    measurements = load_measurements(folder / RESULTS_FILE)
    if not measurements and (folder / RESULTS_CSV).exists():
        measurements = _csv_measurements(folder / RESULTS_CSV)
    return to_dataframe(combine_rounds(measurements)), RunDocument.load(folder).shown()


def default_label(run_info: dict[str, Any], directory: str | Path) -> str:
    """``<run_label or title> (<folder name>)``; just the folder name when the run names neither."""
    folder = Path(directory).resolve().name
    name = str(run_info.get("run_label") or run_info.get("title") or "").strip()
    return f"{name} ({folder})" if name and name != folder else folder


def unique_labels(labels: Sequence[str]) -> list[str]:
    """Labels with repeats numbered: ``a, a, b`` -> ``a, a #2, b``."""
    out: list[str] = []
    for label in labels:
        candidate, number = label, 1
        while candidate in out:
            number += 1
            candidate = f"{label} #{number}"
        out.append(candidate)
    return out


def run_control_fit(run_info: dict[str, Any] | None) -> ControlFit | None:
    """The line through a run's control readings (run.json's control block); None without two usable ones."""
    return control_fit(ControlBlock.of_run(run_info).measurements or [])


def load_runs(directories: Sequence[str | Path], labels: Sequence[str] | None = None) -> pd.DataFrame:
    """Many runs as one DataFrame: the ``run`` label column, the schema's columns, then ``run_drift`` (the run's
    control drift, None without one) and where each cell lies on its run's control line (CELL_DRIFT_COLUMNS,
    toolkit.method.drift.cell_drift); runs in the given order.

    Without ``labels`` each run is labelled by :func:`default_label`, made unique; given labels must be
    one per folder and distinct.
    """
    if labels is not None:
        labels = [str(label) for label in labels]
        if len(labels) != len(directories):
            raise ParamsError(f"labels: {len(labels)} labels for {len(directories)} run folders; give one per folder")
        if len(set(labels)) != len(labels):
            raise ParamsError(f"labels: {labels} has repeats; each run needs its own label")
    loaded = [load_run(directory) for directory in directories]
    if labels is None:
        labels = unique_labels([default_label(info, d) for (_, info), d in zip(loaded, directories, strict=True)])
    records = []
    for label, (frame, info) in zip(labels, loaded, strict=True):
        drift, line = run_drift(info), run_control_fit(info)
        records += [
            {
                RUN_COLUMN: label,
                **record,
                RUN_DRIFT: drift,
                **cell_drift_columns(cell_drift(line, record["started_at"])),
            }
            for record in frame.to_dict("records")
        ]
    return pd.DataFrame(records, columns=[RUN_COLUMN, *COLUMNS, RUN_DRIFT, *CELL_DRIFT_COLUMNS])
