"""benchmarks/trace_ties.py: a cell rebuilt from its trace, and a tie counted in a run folder."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from benchmarks import trace_ties


def _trace(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame([{"kind": None, "stream": None, "request": None, "t_s": None, "end_s": None, "tokens": None}
                         | row for row in rows])  # fmt: skip


def _lockstep(steps: list[float]) -> pd.DataFrame:
    """Two streams of one request each, a token each at every step, judged over (0, 10]."""
    tokens = [{"kind": "token", "stream": s, "request": 0, "t_s": t, "tokens": i + 1}
              for s in (0, 1) for i, t in enumerate(steps)]  # fmt: skip
    return _trace([*tokens, {"kind": "window", "t_s": 0.0, "end_s": 10.0}])


def test_a_trace_gives_back_each_requests_token_events_and_its_judged_window() -> None:
    trace = _lockstep([1.0, 2.0, 6.0])
    streams = trace_ties.streams_of(trace)
    assert [s.token_events for s in streams] == [[(1.0, 1), (2.0, 2), (6.0, 3)]] * 2
    assert trace_ties.kept_window(trace) == (0.0, 10.0)
    assert trace_ties.kept_window(trace[trace["kind"] == "token"]) is None


def test_a_folder_counts_its_tied_cells_and_whether_the_product_shows_them_at_zero(tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    _lockstep([0.5, 2.0, 4.5, 5.5, 8.0, 9.5, 10.5]).to_parquet(traces / "decode-512x2.parquet")  # 3 and 3: a tie
    _lockstep([0.5, 2.0, 4.5, 5.5, 8.0, 10.5]).to_parquet(traces / "decode-1024x2.parquet")  # 3 and 2
    (tmp_path / "run.json").write_text(json.dumps({"engine": {"Version": "0.32.0"}}))
    assert trace_ties.engine_of(tmp_path) == "0.32.0"
    assert sorted(trace_ties.folder_cells(tmp_path)) == [(False, False), (True, False)]
