"""Run folders: measured (results.jsonl) and imported (results.csv) load alike; many runs get labels."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from toolkit.base.schema import COLUMNS, Measurement
from toolkit.method.drift import CELL_DRIFT_COLUMNS
from toolkit.results.runs import RESULTS_CSV, default_label, load_run, load_runs, unique_labels
from toolkit.results.store import RUN_FILE, ResultStore, to_dataframe, write_json_atomic

CELLS = [
    Measurement("prefill", 8192, "8K", 1, "Valid", total_tok_s=17_731.6, ttft_ms=462.0, completed=1),
    Measurement("decode", 8192, "8K", 1, "Valid", 24.3, 25.5, 136.0, 39.2, 1.0, 0, 728, 29.9, prompt_tokens=8190),
    Measurement("decode", 8192, "8K", 2, "Requests queued", 47.9, 25.0, 258.0, 40.0, 1.9, 3, 1_434, 30.0),
    Measurement("decode", 8192, "8K", 4, "Over capacity", kv_budget_tokens=20_000),
    Measurement("decode", 8192, "8K", 8, "Error", error="HTTP 500: boom", client_saturated=False),
]


def measured_run(folder: Path, measurements: list[Measurement], **info: Any) -> Path:
    store = ResultStore(folder)
    for m in measurements:
        store.append(m)
    write_json_atomic(folder / RUN_FILE, {"source": "toolkit", **info})
    return folder


def imported_run(folder: Path, measurements: list[Measurement], **info: Any) -> Path:
    folder.mkdir(parents=True)
    to_dataframe(measurements).to_csv(folder / RESULTS_CSV, index=False)
    write_json_atomic(folder / RUN_FILE, {"source": "imported", **info})
    return folder


def test_measured_and_imported_runs_load_to_the_same_frame(tmp_path: Path) -> None:
    measured, info = load_run(measured_run(tmp_path / "a", CELLS, run_label="demo"))
    imported, _ = load_run(imported_run(tmp_path / "b", CELLS, title="X"))
    assert info == {"source": "toolkit", "run_label": "demo"}
    assert list(imported.columns) == list(COLUMNS)
    pd.testing.assert_frame_equal(measured, imported)
    row = imported[(imported["phase"] == "decode") & (imported["concurrency"] == 2)].iloc[0]
    assert (row["status"], row["completed"], row["output_tokens"]) == ("Requests queued", 3, 1_434)
    error = imported[imported["status"] == "Error"].iloc[0]
    assert error["error"] == "HTTP 500: boom"


def test_csv_values_come_back_with_schema_types(tmp_path: Path) -> None:
    frame, _ = load_run(imported_run(tmp_path / "b", CELLS))
    prefill = frame[frame["phase"] == "prefill"].iloc[0]
    assert prefill["context"] == "8K" and prefill["completed"] == 1
    assert pd.isna(frame[frame["status"] == "Over capacity"].iloc[0]["total_tok_s"])


def test_a_measured_run_keeps_the_latest_record_of_each_cell(tmp_path: Path) -> None:
    redone = Measurement("decode", 8192, "8K", 8, "Valid", 180.0, 22.0, 400.0, 45.0, 8.0, 0, 5_400, 30.0)
    frame, _ = load_run(measured_run(tmp_path / "a", [*CELLS, redone]))
    assert len(frame) == len(CELLS)
    assert frame[frame["concurrency"] == 8].iloc[0]["status"] == "Valid"


def test_load_run_reads_imported_runs_too(tmp_path: Path) -> None:
    frame, info = load_run(imported_run(tmp_path / "b", CELLS, title="X"))
    assert len(frame) == len(CELLS) and info["title"] == "X"


def test_a_folder_without_run_json_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"not a run folder \(no run.json\)"):
        load_run(tmp_path)


@pytest.mark.parametrize(
    ("info", "folder", "label"),
    [
        ({"run_label": "demo", "title": "tiny on CPU"}, "20250101T000000Z", "demo (20250101T000000Z)"),
        ({"title": "Kimi on H200"}, "kimi", "Kimi on H200 (kimi)"),
        ({"run_label": "kimi"}, "kimi", "kimi"),
        ({}, "lonely", "lonely"),
    ],
)
def test_default_label(info: dict[str, Any], folder: str, label: str) -> None:
    assert default_label(info, Path("/x") / folder) == label


def test_unique_labels_numbers_repeats() -> None:
    assert unique_labels(["a", "a", "b", "a"]) == ["a", "a #2", "b", "a #3"]


def test_load_runs_stacks_runs_with_a_run_column(tmp_path: Path) -> None:
    one = measured_run(tmp_path / "x" / "r1", CELLS[:2], run_label="demo")
    two = imported_run(tmp_path / "y" / "r1", CELLS[1:], run_label="demo")
    frame = load_runs([one, two])
    assert list(frame.columns) == ["run", *COLUMNS, "run_drift", *CELL_DRIFT_COLUMNS]
    assert frame["run_drift"].isna().all() and frame["drift_before"].isna().all()  # no control measured
    assert list(dict.fromkeys(frame["run"])) == ["demo (r1)", "demo (r1) #2"]
    assert frame.groupby("run", sort=False).size().tolist() == [2, 4]
    labelled = load_runs([one, two], labels=["A", "B"])
    assert list(dict.fromkeys(labelled["run"])) == ["A", "B"]


@pytest.mark.parametrize(("labels", "message"), [(["A"], "1 labels for 2 run folders"), (["A", "A"], "has repeats")])
def test_load_runs_rejects_bad_labels(tmp_path: Path, labels: list[str], message: str) -> None:
    one = measured_run(tmp_path / "a", CELLS)
    with pytest.raises(ValueError, match=message):
        load_runs([one, one], labels=labels)
