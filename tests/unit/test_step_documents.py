"""A steps.jsonl line and an interleaved batch's comparison (batch.json's `compare`) as typed models: each written by
the toolkit's own writer reads back typed and writes back byte for byte; a line of an earlier sweep reads; a newer
producer's field is kept; a named field of another type is one line naming the file, line and field."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.rate_folders import write_rate_sweep
from toolkit.base.errors import RateSweepError
from toolkit.batch.index import paired_lines
from toolkit.batch.state import BatchState
from toolkit.reports.rate_tables import endpoint_share_line
from toolkit.results.documents.batch import BATCH_FILE, BatchDocument, CompareBlock, PairedComparison
from toolkit.results.documents.step import STEPS_FILE, RateStep, read_steps
from toolkit.results.rate_runs import load_rate_sweep

PEERS = Path(__file__).parents[1] / "fixtures" / "peers"


@pytest.mark.parametrize("run", ["toolkit-4rps", "toolkit-replay-4rps"])
def test_the_steps_of_an_earlier_sweep_read_typed_and_write_back_byte_for_byte(tmp_path: Path, run: str) -> None:
    path = PEERS / run / "rates" / STEPS_FILE
    steps = read_steps(path)
    assert [(s.step, s.offered_rate, s.searched) for s in steps] == [(0, 4.0, False)]
    assert isinstance(steps[0].requests, int) and steps[0]["ttft_p50_ms"] == json.loads(path.read_text())["ttft_p50_ms"]
    for step in steps:
        step.append(tmp_path / STEPS_FILE)
    assert (tmp_path / STEPS_FILE).read_bytes() == path.read_bytes()


def test_a_produced_step_is_written_as_json_and_reads_back_as_it_was_written(tmp_path: Path) -> None:
    produced = {"step": 0, "searched": np.bool_(False), "offered_rate": math.inf, "requests": np.int64(24),
                "ttft_p50_ms": np.float64(math.nan), "goodput": np.float64(2.5),
                "classes": {"chat": {"requests": np.int64(3), "slo_fraction": np.float64(1.0)}}}  # fmt: skip
    step = RateStep.of(produced)
    assert step.offered_rate == math.inf and step.requests == 24 and math.isnan(step["ttft_p50_ms"])  # held as made
    step.append(tmp_path / STEPS_FILE)
    written = (tmp_path / STEPS_FILE).read_text()
    assert written == ('{"step": 0, "searched": false, "offered_rate": "inf", "requests": 24, "ttft_p50_ms": null, '
                       '"goodput": 2.5, "classes": {"chat": {"requests": 3, "slo_fraction": 1.0}}}\n')  # fmt: skip
    (again,) = read_steps(tmp_path / STEPS_FILE)
    assert again.offered_rate == math.inf and again.line().decode() == written


def test_a_table_of_read_steps_has_a_column_per_key(tmp_path: Path) -> None:
    """`pd.DataFrame([step])` is one row with the step's keys as columns, as it was from the dict a step was (the
    gateway test's replica line read None when pandas took a step's keys as its values)."""
    line = '{"step": 0, "offered_rate": 4.0, "endpoint_generation_tokens": [150, 50], "searched": false}\n'
    (tmp_path / STEPS_FILE).write_text(line)
    table = pd.DataFrame(read_steps(tmp_path / STEPS_FILE))
    assert list(table.columns) == ["step", "offered_rate", "endpoint_generation_tokens", "searched"]
    assert table.to_dict("records") == [json.loads(line)]
    assert endpoint_share_line(table) == ("Generated tokens by /metrics endpoint (server_metrics, in order), over the "
                                          "steps: #0 75.0%, #1 25.0%.")  # fmt: skip


def test_a_field_of_a_newer_producer_is_kept_in_its_place(tmp_path: Path) -> None:
    line = '{"step": 0, "offered_rate": 2.0, "a_figure_of_a_later_toolkit": {"x": [1, 2]}, "searched": true}\n'
    (tmp_path / STEPS_FILE).write_text(line)
    (step,) = read_steps(tmp_path / STEPS_FILE)
    assert step["a_figure_of_a_later_toolkit"] == {"x": [1, 2]} and step.line().decode() == line


@pytest.mark.parametrize(("field", "value"), [("searched", "yes"), ("control_of", "step 1"), ("requests", [24])])
def test_a_named_field_of_another_type_is_one_line_naming_the_file_line_and_field(
    tmp_path: Path, field: str, value: object
) -> None:
    folder = write_rate_sweep(tmp_path / "run")
    path = folder / "rates" / STEPS_FILE
    lines = path.read_text().splitlines()
    lines[1] = json.dumps({**json.loads(lines[1]), field: value})
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(RateSweepError, match=rf"^{path}:2: {field}: ") as caught:
        load_rate_sweep(folder)
    assert "\n" not in str(caught.value)


def _interleaved(out: Path, detectable: dict[str, float] | None) -> Path:
    state = BatchState(out, ["a-round1", "b-round1"], "sweep.yaml", None)
    pair = PairedComparison(label="b", baseline="a", rounds=2, report="compare/b-vs-a.md",
                            overall={"total_tok_s": [1.052, 0.031, 2]}, detectable=detectable)  # fmt: skip
    state.set(compare=CompareBlock(state="done", labels=["a", "b"], interleaved=[pair]).as_dict())
    return out / BATCH_FILE


def test_an_interleaved_batchs_comparison_reads_typed_and_writes_back_byte_for_byte(tmp_path: Path) -> None:
    path = _interleaved(tmp_path, {"total_tok_s": 1.234})
    document = BatchDocument.read(path)
    assert document.compare is not None and document.compare.interleaved is not None
    (pair,) = document.compare.interleaved
    assert (pair.label, pair.rounds, pair.overall, pair.detectable) == ("b", 2, {"total_tok_s": [1.052, 0.031, 2]},
                                                                        {"total_tok_s": 1.234})  # fmt: skip
    assert "detects ±1.2 %" in paired_lines(document.compare)[0][1]
    document.write(tmp_path / "again.json")
    assert (tmp_path / "again.json").read_text() == path.read_text()


def test_an_interleaved_comparison_written_before_its_detectable_change_reads(tmp_path: Path) -> None:
    path = _interleaved(tmp_path, None)
    older = json.loads(path.read_text())
    del older["compare"]["interleaved"][0]["detectable"]
    path.write_text(json.dumps(older))
    compare = BatchDocument.read(path).compare
    assert compare is not None and compare.interleaved is not None and compare.interleaved[0].detectable is None
    assert paired_lines(compare) == [("compare/b-vs-a.md", "b / a over 2 interleaved rounds, paired: Total tok/s "
                                                            "1.05× ±0.03 (2 cells)")]  # fmt: skip


def test_a_paired_comparison_of_another_type_is_one_line_naming_the_file_and_field(tmp_path: Path) -> None:
    path = _interleaved(tmp_path, None)
    damaged = json.loads(path.read_text())
    damaged["compare"]["interleaved"][0]["rounds"] = "two"
    path.write_text(json.dumps(damaged))
    with pytest.raises(BatchDocument.error, match=rf"^{path}: compare.interleaved.0.rounds: "):
        BatchDocument.read(path)
