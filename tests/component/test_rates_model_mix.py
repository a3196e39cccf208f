"""A model mix against the fault server serving a base model and an adapter (issue 47): `toolkit rates --model
NAME=W,NAME=W` sends each arrival to the model it drew, records and bodies say which, each step has each model's
figures beside its total, and the reports show them; unknown models and bad weights are one line."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.faultserver import MODEL, FaultServer
from toolkit.cli import main
from toolkit.method.goodput import MODEL_COLUMN, RECORD_COLUMNS, request_latencies
from toolkit.method.slo_fraction import fraction_interval
from toolkit.rates.files import read_records, read_steps, read_sweep
from toolkit.reports import rate_views
from toolkit.reports.class_tables import MODELS_CAPTION, models_table
from toolkit.reports.rate_tables import rate_markdown
from toolkit.results.rate_runs import load_rate_sweep

ADAPTER = "tiny-lora"
_REQUEST = re.compile(r"step (\d{3}) request (\d{6})")


@pytest.fixture
def server(make_fault_server: Callable[..., FaultServer]) -> FaultServer:
    return make_fault_server(token_interval_s=0.002, adapters=(ADAPTER,))


def _rates(url: str, out: Path, *extra: str) -> int:
    return main(["rates", "--base-url", url, "--rates", "100,200", "--requests", "40", "--output-tokens", "8",
                 "--input-tokens", "32", "--seed", "3", "--steady-trim", "0", "--out", str(out), *extra])  # fmt: skip


def test_a_mix_sends_each_arrival_to_its_drawn_model_and_reports_each_models_figures(
    server: FaultServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "mix"
    assert _rates(server.base_url, out, "--model", f"{MODEL}=1,{ADAPTER}=1", "--slo-ttft-ms", "5000") == 0
    printed = capsys.readouterr()
    records, rows = read_records(out), read_steps(out)
    assert list(records.columns) == [*RECORD_COLUMNS, MODEL_COLUMN] and len(records) == 80
    assert records["error"].isna().all() and set(records[MODEL_COLUMN]) == {MODEL, ADAPTER}
    # each request's body named the model its record says (the prompt's prefix names its step and request)
    sent = {tuple(map(int, _REQUEST.search(str(e["prompt"])).groups())): e["model"]  # type: ignore[union-attr]
            for e in server.completion_requests()}  # fmt: skip
    assert sent == {(int(r.step), int(r.request)): r.model for r in records.itertuples()}
    assert read_sweep(out)["models"] == {MODEL: 1.0, ADAPTER: 1.0} and read_sweep(out)["model"] == MODEL
    for row, (_, step) in zip(rows, records.groupby("step"), strict=True):
        figures = row["models"]
        assert list(figures) == [MODEL, ADAPTER] and "classes" not in row
        assert sum(m["requests"] for m in figures.values()) == row["requests"] == 40
        latencies = request_latencies(step)
        for name, m in figures.items():
            mine = step[MODEL_COLUMN] == name
            assert m["requests"] == m["completed"] == mine.sum() and m["share"] == mine.sum() / 40
            assert (m["share_low"], m["share_high"]) == fraction_interval(int(mine.sum()), 40)
            assert m["share_low"] <= m["weight_share"] == 0.5 <= m["share_high"]  # the weight's within the draw's
            assert m["achieved_rate"] > 0 and m["goodput"] > 0 and m["slo_fraction"] == 1.0
            assert m["ttft_sched_p50_ms"] == pytest.approx(latencies.loc[mine, "ttft_sched_ms"].median())
            assert m["tpot_p90_ms"] is not None and m["limit_fractions"] == {"ttft": 1.0}
    said = [line.split(":")[0] for line in printed.err.splitlines() if " models: " in line]
    assert said == ["step 0 models", "step 1 models"]
    assert "each served model of the mix" in printed.out and f"   1 {ADAPTER:<20}" in printed.out
    sweep = load_rate_sweep(out)  # the readers behind the notebooks and reports take a mix as it is
    table = models_table(sweep.steps)
    assert table is not None and list(table["Model"]) == [MODEL, ADAPTER] * 2
    assert list(table["Completed"]) == [f"{m['completed']}/{m['requests']}" for r in rows for m in r["models"].values()]
    report = rate_markdown(sweep.steps, sweep.level, sweep.search, 0.1)
    assert MODELS_CAPTION in report and f"| {ADAPTER} |" in report
    html = rate_views.steps(sweep).data  # type: ignore[union-attr]
    assert "steps, model by model" in html and f">{ADAPTER}</td>" in html


def test_one_model_shows_nothing_new(server: FaultServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    out = tmp_path / "one"
    assert _rates(server.base_url, out, "--model", ADAPTER) == 0
    printed = capsys.readouterr()
    assert MODEL_COLUMN not in read_records(out) and all("models" not in row for row in read_steps(out))
    assert {e["model"] for e in server.completion_requests()} == {ADAPTER}
    sweep = load_rate_sweep(out)
    assert models_table(sweep.steps) is None and "models" not in read_sweep(out)
    assert MODELS_CAPTION not in rate_markdown(sweep.steps, sweep.level, sweep.search, 0.1)
    assert " models: " not in printed.err and "each served model" not in printed.out


ALLOWED = "allowed: NAME=WEIGHT,NAME=WEIGHT with weights above 0, e.g. tiny-llama=1,tiny-lora=1"
UNSERVED = "model: 'nope' is not served by {url}; served: fault-model, tiny-lora"


@pytest.mark.parametrize(
    ("model", "said"),
    [
        (f"{MODEL}=1,nope=1", UNSERVED),
        (f"nope=1,{MODEL}=1", UNSERVED),  # the first of the mix, the one the sweep is discovered with
        ("a=x", f"model: 'a=x': the weight 'x' is not a number; {ALLOWED} (got 'a=x')"),
        ("a=0,b=0", f"model: 'a=0': a weight of 0; {ALLOWED} (got 'a=0,b=0')"),
    ],
)
def test_an_unknown_model_or_a_bad_weight_is_one_line_before_anything_is_sent(
    server: FaultServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], model: str, said: str
) -> None:
    assert _rates(server.base_url, tmp_path / "refused", "--model", model) == 2
    assert capsys.readouterr().err == f"error: {said.format(url=server.base_url)}\n"
    assert server.completion_requests() == [] and not (tmp_path / "refused" / "rates").exists()


def test_a_mix_measures_beside_a_run_of_one_of_its_models(
    server: FaultServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`toolkit run` measures its rate_sweep block into the run's folder: a mix whose first model is not the run's
    is still of the run's server when the run's model is among its models; a mix without it is refused."""
    out = tmp_path / "run"
    assert _rates(server.base_url, out, "--model", ADAPTER) == 0  # a folder whose run.json names tiny-lora
    shutil.rmtree(out / "rates")
    assert _rates(server.base_url, out, "--model", f"{MODEL}=1,{ADAPTER}=1") == 0
    assert read_sweep(out)["models"] == {MODEL: 1.0, ADAPTER: 1.0}
    shutil.rmtree(out / "rates")
    server.adapters = (ADAPTER, "other")
    capsys.readouterr()
    assert _rates(server.base_url, out, "--model", f"{MODEL}=1,other=1") == 2  # tiny-lora's run: another server
    assert capsys.readouterr().err == (f"error: out: {out} holds a run of another server (model: '{ADAPTER}' -> "
                                       f"'{MODEL}'); choose another folder\n")  # fmt: skip


def test_a_server_log_that_names_no_request_is_said_and_a_missing_one_refused(
    server: FaultServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--server-log FILE`: a log the server writes no request line to (vLLM without --enable-log-requests) gives
    each step zero received and a line saying so; a log that cannot be read is one line, exit 2, nothing sent."""
    log = tmp_path / "vllm.log"
    log.write_text("INFO 12-06 09:12:41 [loggers.py:259] Engine 000: Avg prompt throughput: 0.0 tokens/s\n")
    assert _rates(server.base_url, tmp_path / "run", "--model", f"{MODEL}=1,{ADAPTER}=1", "--server-log", str(log)) == 0
    said = capsys.readouterr().err  # the step lines
    assert [row["server_log_requests"] for row in read_steps(tmp_path / "run")] == [{"base": 0, "adapters": {}}] * 2
    assert "step 0 server log: none of its 40 requests logged (start vLLM with --enable-log-requests)" in said, said
    missing = tmp_path / "nowhere.log"
    assert _rates(server.base_url, tmp_path / "refused", "--server-log", str(missing)) == 2
    assert capsys.readouterr().err == f"error: server_log: cannot read {missing}: No such file or directory\n"
    assert len(server.completion_requests()) == 80 and not (tmp_path / "refused" / "rates").exists()
