"""Every decode cell leaves its raw trace beside results.jsonl, and the trace agrees with the cell's numbers;
a cell redone by --resume replaces its trace (fault server: no vLLM needed)."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.faultserver import FaultServer
from tests.tiny_params import tiny_params
from toolkit.base.schema import Measurement
from toolkit.matrix.runner import run_matrix
from toolkit.matrix.traces import load_trace
from toolkit.params import make_params

pytestmark = pytest.mark.timeout(120)


def window_tokens(trace: pd.DataFrame) -> tuple[int, float]:
    """Tokens that arrived in the kept window (0, planned end] and the last one's time."""
    end = trace[trace.kind == "window"]["end_s"].iloc[-1]
    tokens = trace[trace.kind == "token"].sort_values("t_s")
    total, last = 0, 0.0
    for _, events in tokens.groupby(["stream", "request"]):
        before = events[events.t_s <= 0]["tokens"].max()
        inside = events[(events.t_s > 0) & (events.t_s <= end)]
        if len(inside):
            total += int(inside["tokens"].max()) - (0 if pd.isna(before) else int(before))
            last = max(last, float(inside["t_s"].max()))
    return total, last


def assert_trace_matches(out, m: Measurement) -> None:
    trace = load_trace(out, m.context_tokens, m.concurrency)
    tokens, last = window_tokens(trace)
    assert tokens == m.output_tokens > 0, m
    assert last == pytest.approx(m.measured_s, abs=1e-6), m
    assert len(trace[trace.kind == "window"]) == m.attempts
    assert set(trace[trace.kind == "request"]["stream"]) == set(range(m.concurrency))
    assert (trace[trace.kind == "server"]["running"] >= 0).all() and (trace.kind == "lag").any()


def test_every_decode_cell_has_a_trace_that_agrees_with_it(tmp_path) -> None:
    with FaultServer() as server:
        params = make_params(tiny_params(base_url=server.base_url, concurrency=[1, 2], read_timeout_s=None,
                                         control_window_s=None))  # fmt: skip
        results = run_matrix(params, tmp_path, progress=False)
    decode = [m for m in results if m.phase == "decode"]
    assert len(decode) == 2
    for m in decode:
        assert_trace_matches(tmp_path, m)
    assert sorted(p.name for p in (tmp_path / "traces").iterdir()) == ["decode-64x1.parquet", "decode-64x2.parquet"]


def test_a_cell_redone_by_resume_replaces_its_trace(tmp_path) -> None:
    with FaultServer() as server:
        params = make_params(tiny_params(base_url=server.base_url))
        server.set_fault("500", after=3, times=1)  # request 1 is the prefill; the cell fails mid-way
        (failed,) = [m for m in run_matrix(params, tmp_path, progress=False) if m.phase == "decode"]
        assert failed.status == "Error"
        errored = load_trace(tmp_path, 64, 1)
        server.clear_fault()
        (redone,) = [m for m in run_matrix(params, tmp_path, resume=True, progress=False) if m.phase == "decode"]
    assert redone.status == "Valid"
    assert not load_trace(tmp_path, 64, 1).equals(errored)
    assert_trace_matches(tmp_path, redone)


def explore_check(results_dir, context: str, concurrency: int, tmp_path) -> dict[str, tuple[float, float]]:
    """Execute notebooks/explore.ipynb on a cell; its check table: {quantity: (trace, results)}."""
    import re

    import nbformat

    from toolkit.jupyter.execute import NOTEBOOKS, execute_path

    executed = tmp_path / "explore.ipynb"
    execute_path(NOTEBOOKS / "explore.ipynb", executed,
                 {"RESULTS_DIR": str(results_dir), "CONTEXT": context, "CONCURRENCY": concurrency})  # fmt: skip
    cells = nbformat.read(executed, as_version=4).cells
    assert not [o for c in cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    (check,) = [c for c in cells if "check" in c.metadata.get("tags", [])]
    text = check.outputs[0]["data"]["text/plain"]
    rows = re.findall(r"^(output_tokens|measured_s)\s+([\d.]+)\s+([\d.]+)$", text, flags=re.M)
    assert len(rows) == 2, text
    assert sum(1 for c in cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})) == 4
    return {name: (float(trace), float(results)) for name, trace, results in rows}


@pytest.mark.process
def test_explore_notebook_timeline_matches_the_cell(tmp_path) -> None:
    with FaultServer() as server:
        params = make_params(tiny_params(base_url=server.base_url, concurrency=[2], max_output=64, read_timeout_s=None,
                                         control_window_s=None))  # fmt: skip
        (cell,) = [m for m in run_matrix(params, tmp_path / "run", progress=False) if m.phase == "decode"]
    check = explore_check(tmp_path / "run", "64", 2, tmp_path)
    assert check["output_tokens"] == (cell.output_tokens, cell.output_tokens)
    assert check["measured_s"][0] == pytest.approx(cell.measured_s, abs=1e-5)
