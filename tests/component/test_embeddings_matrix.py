"""The embeddings matrix against the fault server (issue 46): its cells, resume, the command's table, a server that
embeds nothing refused in one line, and the notebooks showing the cells where a run has them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.component.test_notebooks_offline import execute
from tests.component.test_params_errors import assert_one_line_error, run_cli
from tests.faultserver import FaultServer
from tests.tiny_params import tiny_params
from toolkit.base.errors import ParamsError
from toolkit.matrix.runner import run_matrix
from toolkit.params import make_params

LENGTHS, LEVELS, BATCH, DELAY_S = [64, 128], [1, 3], 3, 0.01


@pytest.fixture
def server(make_fault_server: Callable[..., FaultServer]) -> FaultServer:
    return make_fault_server(embeddings=True, embedding_delay_s=DELAY_S)


def embeddings_params(server: FaultServer, **values: object):
    base = {"base_url": server.base_url, "endpoint": "embeddings", "batch_size": BATCH, "contexts": LENGTHS,
            "concurrency": LEVELS, "duration_s": 0.6, "control_window_s": 0}  # fmt: skip
    return make_params(base | values)


def inputs_sent(server: FaultServer) -> list[str]:
    return [text for entry in server.log if entry["path"] == "/v1/embeddings" for text in entry["input"]]


def test_each_cell_counts_its_inputs_with_intervals_and_agrees_with_the_server(
    server: FaultServer, tmp_path: Path
) -> None:
    cells = {(m.context_tokens, m.concurrency): m for m in run_matrix(embeddings_params(server), tmp_path,
                                                                     progress=False)}  # fmt: skip
    assert sorted(cells) == [(n, c) for n in LENGTHS for c in LEVELS]
    for (length, level), m in cells.items():
        assert (m.phase, m.status, m.error, m.batch_size) == ("embeddings", "Valid", None, BATCH)
        assert m.prompt_tokens == length  # each input as long as asked, as the server counts it
        assert m.input_tok_s == pytest.approx(m.items_s * length) and m.items_s is not None
        # a reply every ~10 ms per loop: the window's completions, 3 inputs each, over its 0.6 s
        assert m.completed is not None and m.measured_s == pytest.approx(0.6, abs=0.01)
        assert m.items_s == pytest.approx(m.completed * BATCH / m.measured_s)
        assert m.items_s_ci is not None and m.input_tok_s_ci == pytest.approx(m.items_s_ci * length)
        assert m.e2e_p50_ms is not None and DELAY_S * 1000 <= m.e2e_p50_ms <= m.e2e_p90_ms  # type: ignore[operator]
        assert m.e2e_p50_low_ms is not None and m.e2e_p50_low_ms <= m.e2e_p50_ms <= m.e2e_p50_high_ms  # type: ignore[operator]
        assert m.server_prompt_tokens == m.client_prompt_tokens and m.metrics_problem is None
        assert m.client_prompt_tokens == m.requests_started * BATCH * length  # every request of the cell, ramp too
        assert m.status_basis == "server" and m.requests_started is not None and m.requests_started >= level
    sent = inputs_sent(server)
    assert len(sent) == len(set(sent)) == 1 + sum(m.requests_started * BATCH for m in cells.values())  # type: ignore[misc]
    before = len(server.log)  # a resume with nothing left sends nothing, not even the probe
    assert len(run_matrix(embeddings_params(server), tmp_path, resume=True, progress=False)) == 4
    assert not [e for e in server.log[before:] if e["method"] == "POST"]


def test_a_failed_request_makes_its_cell_an_error_and_the_run_goes_on(server: FaultServer, tmp_path: Path) -> None:
    server.set_fault("500", after=3, times=1)  # the probe is the first request
    cells = run_matrix(embeddings_params(server, contexts=[64]), tmp_path, progress=False)
    assert [(m.status, m.error) for m in cells] == [
        ("Error", "HTTP 500: EngineCore encountered an issue (injected fault)"), ("Valid", None)]  # fmt: skip
    assert cells[0].items_s is None and cells[0].metrics_problem is None


def test_a_server_that_embeds_nothing_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    with FaultServer() as generating:
        with pytest.raises(ParamsError, match=r"^endpoint: embeddings: .* does not serve embeddings of "
                                              r"'fault-model' \(HTTP 404: Not Found\)$"):  # fmt: skip
            run_matrix(embeddings_params(generating), tmp_path / "out", progress=False)
        assert [e["path"] for e in generating.log if e["method"] == "POST"] == ["/v1/embeddings"]
        assert not (tmp_path / "out" / "run.json").exists()


def generating_params(server: FaultServer):
    return make_params(tiny_params(base_url=server.base_url, duration_s=0.3, readiness_timeout_s=None,
                                   read_timeout_s=None))  # fmt: skip


def test_a_generation_matrix_against_an_embeddings_only_server_is_refused_in_one_line(tmp_path: Path) -> None:
    with FaultServer(embeddings=True, generation=False) as pooling:
        with pytest.raises(ParamsError, match=r"^endpoint: chat: http://127\.0\.0\.1:\d+ serves embeddings only "
                                              r"\(/v1/chat/completions answers 404\); measure it with endpoint "
                                              r"embeddings \(--endpoint embeddings\)$"):  # fmt: skip
            run_matrix(generating_params(pooling), tmp_path / "out", progress=False)
        asked = [(e["method"], e["path"]) for e in pooling.log if e["path"] not in ("/v1/models", "/metrics")]
        assert asked[-2:] == [("GET", "/v1/chat/completions"), ("POST", "/v1/embeddings")]
        assert not pooling.completion_requests()
        assert not (tmp_path / "out" / "run.json").exists()


def test_a_404_to_the_route_alone_refuses_nothing(tmp_path: Path) -> None:
    """A server (a gateway) answering 404 to a GET of the route, and embedding nothing, is measured as before."""
    with FaultServer(generation=False) as neither:
        cells = run_matrix(generating_params(neither), tmp_path, progress=False)
    assert [m.status for m in cells] == ["Error", "Error"] and all("HTTP 404" in (m.error or "") for m in cells)
    with FaultServer() as generating:  # a generating server: one GET (405), no embeddings request
        assert [m.status for m in run_matrix(generating_params(generating), tmp_path / "ok", progress=False)] == [
            "Valid", "Valid"]  # fmt: skip
        asked = [(e["method"], e["path"], e["status"]) for e in generating.log if e["method"] == "GET"]
        assert ("GET", "/v1/chat/completions", 405) in asked
        assert not [e for e in generating.log if e["path"] == "/v1/embeddings"]


@pytest.mark.process
def test_the_command_prints_the_embeddings_table_or_one_line(server: FaultServer, tmp_path: Path) -> None:
    done = run_cli(server.base_url, tmp_path / "ok", "--endpoint", "embeddings", "--batch-size", "2")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Items/s" in done.stdout and "Input tok/s" in done.stdout and "Prefill" not in done.stdout
    with FaultServer() as generating:
        done = run_cli(generating.base_url, tmp_path / "refused", "--endpoint", "embeddings")
        assert_one_line_error(done, "endpoint", r"does not serve embeddings of 'fault-model' \(HTTP 404")
        assert not (tmp_path / "refused" / "run.json").exists()
    with FaultServer(embeddings=True, generation=False) as pooling:
        done = run_cli(pooling.base_url, tmp_path / "reverse")
        assert_one_line_error(done, "endpoint", r"serves embeddings only \(/v1/chat/completions answers 404\)")
        assert not pooling.completion_requests()
    done = run_cli(server.base_url, tmp_path / "bad", "--batch-size", "2")
    assert_one_line_error(done, "batch_size", r"applies to endpoint embeddings only$")


@pytest.mark.process
def test_the_notebooks_measure_and_show_the_embeddings_cells(server: FaultServer, tmp_path: Path) -> None:
    """decode_matrix.ipynb measures an embeddings run's cells; it and the report show them; a generating run's
    report shows nothing in their place."""
    out = tmp_path / "run"
    parameters = {"BASE_URL": server.base_url, "ENDPOINT": "embeddings", "BATCH_SIZE": BATCH, "CONTEXTS": [64],
                  "CONCURRENCY": [1, 2], "DURATION_S": 0.5, "CONTROL_WINDOW_S": 0, "RESULTS_DIR": str(out)}  # fmt: skip
    measured, _ = execute("decode_matrix", tmp_path, parameters)
    report, _ = execute("report", tmp_path, {"RESULTS_DIR": str(out)})
    for executed in (measured, report):
        (cell,) = [c for c in executed.cells if c.id == "embeddings"]
        shown = cell.outputs[0]["data"]["text/html"]
        assert "<h2>Embeddings</h2>" in shown and "Items/s" in shown and shown.count("Valid") == 2
    generating = tmp_path / "generating"
    with FaultServer() as plain:
        run_matrix(generating_params(plain), generating, progress=False)
    report, _ = execute("report", tmp_path, {"RESULTS_DIR": str(generating)})
    (cell,) = [c for c in report.cells if c.id == "embeddings"]
    assert cell.outputs == []
