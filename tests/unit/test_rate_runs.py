"""A rate sweep read back from its run folder; every missing or malformed file is one line naming it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from tests.rate_folders import LEVEL, write_rate_sweep
from toolkit.method.goodput import RECORD_COLUMNS, ServiceLevel
from toolkit.results.rate_runs import (
    STEP_FLAGS,
    STEP_NUMBERS,
    RateSweepError,
    has_rates,
    load_rate_sweep,
    load_rate_sweeps,
    step_file,
)
from toolkit.results.store import RUN_FILE, write_json_atomic


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return write_rate_sweep(tmp_path / "run", searched=(6.0,), lag_flagged=(2,), requests=10)


def test_a_sweep_loads_its_parameters_steps_and_every_record(folder: Path) -> None:
    sweep = load_rate_sweep(folder)
    assert sweep.folder == folder and sweep.sweep["rates"] == [1.0, 2.0, 4.0, 8.0]
    assert sweep.level == LEVEL and sweep.search == {"highest_rate": 4.0, "bracket": [4.0, 6.0]}
    assert list(sweep.steps["step"]) == [0, 1, 2, 3, 4]
    assert list(sweep.steps["offered_rate"]) == [1.0, 2.0, 4.0, 8.0, 6.0]
    assert list(sweep.steps["searched"]) == [False, False, False, False, True]
    assert list(sweep.steps["lag_flagged"]) == [False, False, True, False, False]
    assert set(STEP_NUMBERS) | set(STEP_FLAGS) <= set(sweep.steps.columns)
    assert tuple(sweep.records.columns) == RECORD_COLUMNS and len(sweep.records) == 5 * 10
    assert sweep.records.groupby("step")["request"].count().tolist() == [10] * 5
    assert len(sweep.records.loc[sweep.records["step"] == 3, "chunk_times_s"].iloc[0]) == 8  # 8 + 0 % 5 chunks


def test_has_rates_and_the_runs_of_many_folders_that_hold_one(folder: Path, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    write_json_atomic(plain / RUN_FILE, {"source": "toolkit", "run_label": "matrix"})
    assert has_rates(folder) and not has_rates(plain) and not has_rates(tmp_path / "nowhere")
    assert list(load_rate_sweeps([plain, folder])) == ["rates (run)"]  # runs.default_label's form
    assert list(load_rate_sweeps([folder, plain], ["A", "B"])) == ["A"]


def test_a_sweep_that_did_not_search_has_no_search(tmp_path: Path) -> None:
    sweep = load_rate_sweep(write_rate_sweep(tmp_path / "run"))
    assert sweep.sweep["search"] is False and sweep.search is None


def test_missing_step_columns_read_as_missing_numbers(folder: Path) -> None:
    path = folder / "rates" / "steps.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    lines = [{k: v for k, v in line.items() if not k.startswith("server_")} for line in lines]
    del lines[2]["lag_flagged"], lines[3]["searched"]  # the flagged step loses its flag
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    steps = load_rate_sweep(folder).steps
    assert steps["server_waiting_mean"].isna().all() and steps["server_waiting_mean"].dtype == float
    assert list(steps["lag_flagged"]) == [False] * 5 and list(steps["searched"]) == [False] * 4 + [True]


def _write(relative: str, text: str) -> Callable[[Path], str]:
    def damage(folder: Path) -> str:
        (folder / relative).write_text(text)
        return str(folder / relative)

    return damage


def _remove(relative: str) -> Callable[[Path], str]:
    def damage(folder: Path) -> str:
        (folder / relative).unlink()
        return str(folder / relative)

    return damage


def _edit_steps(edit: Callable[[list[str]], list[str]]) -> Callable[[Path], str]:
    def damage(folder: Path) -> str:
        path = folder / "rates" / "steps.jsonl"
        path.write_text("\n".join(edit(path.read_text().splitlines())) + "\n")
        return str(path)

    return damage


def _records(edit: Callable[[pd.DataFrame], pd.DataFrame]) -> Callable[[Path], str]:
    def damage(folder: Path) -> str:
        path = folder / "rates" / step_file(1)
        edit(pd.read_parquet(path)).to_parquet(path)
        return str(path)

    return damage


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (_remove("rates/sweep.json"), "{}: missing; not a rate sweep folder"),
        (_write("rates/sweep.json", '{"rates": [1, 2'), "{}: not a JSON document (Expecting"),
        (_write("rates/sweep.json", "[1, 2]"), "{}: not a JSON object"),
        (_write("rates/sweep.json", '{"goodput_target": 99}'), "sweep.json: service level: target: 99 is not a"),
        (_remove("rates/steps.jsonl"), "{}: missing; the sweep recorded no step"),
        (_write("rates/steps.jsonl", "\n"), "{}: no step recorded"),
        (_edit_steps(lambda lines: [lines[0], lines[1][:40], *lines[2:]]), "{}:2: not a JSON record"),
        (_edit_steps(lambda lines: [lines[0], '{"offered_rate": 2}']), "{}:2: a step line needs an integer 'step'"),
        (_edit_steps(lambda lines: [lines[0], '{"step": 1}']), "{}:2: step 1 has no 'offered_rate'"),
        (_edit_steps(lambda lines: [lines[0], lines[0]]), "{}: step 0 twice"),
        (_remove("rates/step-002.parquet"), "{}: missing; steps.jsonl lists step 2"),
        (_write("rates/step-002.parquet", "not parquet"), "{}: not a readable Parquet file"),
        (_records(lambda r: r.drop(columns=["sent_s", "error"])), "{}: missing record columns sent_s, error"),
        (_records(lambda r: r.assign(step=3)), "{}: holds records of another step than 1"),
    ],
)
def test_a_missing_or_malformed_file_is_one_line_naming_it(
    folder: Path, damage: Callable[[Path], str], message: str
) -> None:
    path = damage(folder)
    with pytest.raises(RateSweepError) as caught:
        load_rate_sweep(folder)
    text = str(caught.value)
    assert text.startswith(message.format(path)) and "\n" not in text


def test_a_folder_without_rates_says_so(tmp_path: Path) -> None:
    with pytest.raises(RateSweepError, match=r"^.*/plain: no rate sweep \(no rates/ folder\)$"):
        load_rate_sweep(tmp_path / "plain")


def test_the_service_level_defaults_to_99_percent_without_limits(tmp_path: Path) -> None:
    folder = write_rate_sweep(tmp_path / "run")
    path = folder / "rates" / "sweep.json"
    sweep = {k: v for k, v in json.loads(path.read_text()).items() if not k.startswith(("slo_", "goodput"))}
    path.write_text(json.dumps(sweep))
    assert load_rate_sweep(folder).level == ServiceLevel(target=0.99)
