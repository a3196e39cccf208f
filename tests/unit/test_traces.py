"""A decode cell's raw trace: one tidy event table, window-relative times, written whole or not at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.loadgen.client import StreamResult
from toolkit.matrix.sampler import Samples
from toolkit.matrix.traces import CellTrace, load_trace, token_increments, trace_frame, trace_path, write_trace


def _trace() -> CellTrace:
    first = StreamResult(started=99.0, token_events=[(99.5, 1), (100.5, 3), (101.0, 4)], ended=101.2, done=True)
    second = StreamResult(started=101.2, token_events=[(101.6, 2)])
    samples = Samples(server=[(100.25, 1, 0), (100.75, 2, 1)], kv_usage=[(100.75, 0.5)],
                      lag_times=[100.1, 100.2], loop_lag_s=[0.001, 0.3])  # fmt: skip
    return CellTrace(streams=[[first, second]], samples=samples, windows=[(97.0, 99.0), (100.0, 102.0)])


def test_events_are_relative_to_the_kept_window() -> None:
    frame = trace_frame(_trace())
    assert frame["kind"].value_counts().to_dict() == {"token": 4, "request": 2, "server": 2, "lag": 2, "window": 2}
    windows = frame[frame.kind == "window"]
    assert windows[["attempt", "t_s", "end_s"]].values.tolist() == [[1, -3.0, -1.0], [2, 0.0, 2.0]]
    tokens = frame[frame.kind == "token"]
    assert tokens["request"].tolist() == [0, 0, 0, 1] and tokens["tokens"].tolist() == [1, 3, 4, 2]
    assert tokens["t_s"].tolist() == pytest.approx([-0.5, 0.5, 1.0, 1.6])
    requests = frame[frame.kind == "request"]
    assert requests["t_s"].tolist() == pytest.approx([-1.0, 1.2]) and requests["end_s"].iloc[0] == pytest.approx(1.2)
    assert requests["end_s"].isna().tolist() == [False, True]  # the second was still running
    server = frame[frame.kind == "server"]
    assert server[["running", "waiting"]].values.tolist() == [[1, 0], [2, 1]]
    assert server["kv_usage"].isna().tolist() == [True, False]
    assert frame[frame.kind == "lag"]["lag_ms"].tolist() == pytest.approx([1.0, 300.0])


def test_written_atomically_and_read_back(tmp_path: Path) -> None:
    path = write_trace(tmp_path, 1024, 2, _trace())
    assert path == trace_path(tmp_path, 1024, 2) and path.name == "decode-1024x2.parquet"
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no partial file left behind
    back = load_trace(tmp_path, 1024, 2)
    assert back.equals(trace_frame(_trace()))


def test_a_missing_trace_names_its_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"decode-512x4\.parquet: no trace for decode 512 × 4"):
        load_trace(tmp_path, 512, 4)


def test_token_increments_per_request() -> None:
    tokens = token_increments(trace_frame(_trace()))
    assert tokens["new_tokens"].tolist() == [1, 2, 1, 2]
