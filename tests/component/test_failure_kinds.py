"""Expected failures (the server goes away) are Error cells and the run goes on; a bug in the toolkit stops
the run with its traceback instead of becoming an Error that --resume would redo forever (fault server)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.faultserver import FaultServer
from tests.tiny_params import tiny_params
from toolkit.matrix import runner
from toolkit.matrix.runner import run_matrix
from toolkit.params import make_params

pytestmark = pytest.mark.timeout(120)


def params(server: FaultServer) -> Any:
    return make_params(tiny_params(base_url=server.base_url, contexts=[64, 128], control_window_s=0.5))


def test_a_bug_inside_a_measurement_stops_the_run_with_its_traceback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    async def broken(*args: Any, **kwargs: Any) -> None:
        raise TypeError("unsupported operand type(s) for +: 'int' and 'str'")

    monkeypatch.setattr(runner, "measure_prefill", broken)
    with FaultServer() as server, pytest.raises(TypeError, match="unsupported operand"):
        run_matrix(params(server), tmp_path, progress=False)
    assert not (tmp_path / "results.jsonl").exists() or "Error" not in (tmp_path / "results.jsonl").read_text()


def test_connection_refused_mid_run_is_an_error_cell_and_the_run_goes_on(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    server = FaultServer().__enter__()
    measure_prefill = runner.measure_prefill
    calls = {"n": 0}

    async def prefill_then_stop_the_server(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:  # the second context's prefill: the server is gone from here on
            server.__exit__(None, None, None)
        return await measure_prefill(*args, **kwargs)

    monkeypatch.setattr(runner, "measure_prefill", prefill_then_stop_the_server)
    try:
        results = {m.key: m for m in run_matrix(params(server), tmp_path, progress=False)}
    finally:
        server.__exit__(None, None, None)
    assert results[("prefill", 64, 1)].status == "Valid" and results[("decode", 64, 1)].status == "Valid"
    for key in [("prefill", 128, 1), ("decode", 128, 1)]:
        assert results[key].status == "Error", results[key]
        assert "cannot connect" in results[key].error or "cannot reach" in results[key].error, results[key]
