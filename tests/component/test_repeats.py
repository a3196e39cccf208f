"""Repeats in rounds and the drift control, against the fault server: the whole matrix once per round, in order;
each prefill round cold; resume by (cell, round); the control at the start and after each round, in run.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.faultserver import FaultServer
from tests.tiny_params import tiny_params
from toolkit.matrix.control import CONTROL_FILE
from toolkit.matrix.runner import run_matrix
from toolkit.params import make_params
from toolkit.results.runs import load_run
from toolkit.results.store import RESULTS_FILE, RUN_FILE

pytestmark = pytest.mark.timeout(180)
MATRIX = tiny_params(concurrency=[1, 2], max_output=16, read_timeout_s=None, control_window_s=0.5)


def _records(folder: Path, name: str = RESULTS_FILE) -> list[dict[str, object]]:
    return [json.loads(line) for line in (folder / name).read_text().splitlines()]


def test_two_rounds_measure_the_whole_matrix_twice_in_order(tmp_path: Path) -> None:
    with FaultServer() as server:
        params = make_params({"base_url": server.base_url, **MATRIX, "repeats": 2})
        latest = run_matrix(params, tmp_path, progress=False)
    order = [(r["round"], r["phase"], r["concurrency"]) for r in _records(tmp_path)]
    assert order == [(1, "prefill", 1), (1, "decode", 1), (1, "decode", 2),
                     (2, "prefill", 1), (2, "decode", 1), (2, "decode", 2)]  # fmt: skip
    prefill = [r for r in _records(tmp_path) if r["phase"] == "prefill"]
    assert [r["cached_tokens"] for r in prefill] == [0, 0]  # round 2 sent a new prompt: cold again
    assert {(m.phase, m.concurrency): m.repeats for m in latest} == {("prefill", 1): 2, ("decode", 1): 2,
                                                                     ("decode", 2): 2}  # fmt: skip
    frame, info = load_run(tmp_path)
    assert len(frame) == 3 and set(frame["repeats"]) == {2}
    low, high = frame["total_tok_s_repeat_min"], frame["total_tok_s_repeat_max"]
    assert (low <= frame["total_tok_s"]).all() and (frame["total_tok_s"] <= high).all()
    controls = _records(tmp_path, CONTROL_FILE)
    assert [(c["round"], c["context_tokens"], c["concurrency"]) for c in controls] == [(0, 64, 1), (1, 64, 1),
                                                                                        (2, 64, 1)]  # fmt: skip
    block = info["control"]
    assert block["cell"] == "64 × 1" and block["window_s"] == 0.5 and len(block["measurements"]) == 3
    assert block["drift"] is not None and block["drift"] >= abs(block["change"])


def test_resume_with_more_repeats_adds_only_the_missing_rounds(tmp_path: Path) -> None:
    with FaultServer() as server:
        params = make_params({"base_url": server.base_url, **MATRIX, "control_window_s": 0})
        run_matrix(params, tmp_path, progress=False)
        assert [r["round"] for r in _records(tmp_path)] == [None, None, None]
        again = params.model_copy(update={"repeats": 3})
        run_matrix(again, tmp_path, resume=True, progress=False)
        run_matrix(again, tmp_path, resume=True, progress=False)  # nothing left: nothing measured
    assert [r["round"] for r in _records(tmp_path)] == [None, None, None, 2, 2, 2, 3, 3, 3]
    assert not (tmp_path / CONTROL_FILE).exists() and "control" not in json.loads((tmp_path / RUN_FILE).read_text())
    frame, _ = load_run(tmp_path)
    assert set(frame["repeats"]) == {3}


def test_no_control_when_no_decode_cell_sends_load(tmp_path: Path) -> None:
    with FaultServer(kv_cache_size_tokens=200) as server:
        params = make_params({"base_url": server.base_url, **MATRIX, "concurrency": [8]})
        latest = run_matrix(params, tmp_path, phases=("decode",), progress=False)
        sent = server.state.requests_total
    assert [m.status for m in latest] == ["Over capacity"] and sent == 0
    assert not (tmp_path / CONTROL_FILE).exists()
