"""Requests beyond plain text in the decode matrix, against the fault server: every decode request carries the
response format (or the tools), each cell's share is the fraction of the server's finished replies that kept to it
(worked out here from what the server logged it spelled); without the options the bodies are what they always were;
options that do not go together stop `toolkit matrix` in one line before anything is sent."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pandas as pd
import pytest

from tests.faultserver import FaultServer
from tests.tiny_params import tiny_params
from toolkit.cli.entry import main
from toolkit.matrix import runner as matrix_runner
from toolkit.matrix.runner import run_matrix
from toolkit.params import make_params
from toolkit.reports.tables import decode_matrix
from toolkit.results.store import RESULTS_FILE, latest_by_key, load_measurements, to_dataframe

pytestmark = pytest.mark.timeout(120)

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
VALID, INVALID = '{"a": 3}', '{"a": "three"}'
PARAMETERS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"type": "function", "function": {"name": "weather", "parameters": PARAMETERS}}]
CALL = ("weather", '{"city": "Bern"}')


def matched(text: str | None) -> bool:
    """Whether a reply's text is JSON valid under SCHEMA (the test's own check, not the toolkit's)."""
    try:
        jsonschema.validate(json.loads(text or ""), SCHEMA)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


def spy_cells(
    monkeypatch: pytest.MonkeyPatch, server: FaultServer, before: Callable[[int], None]
) -> dict[int, list[dict[str, Any]]]:
    """The server's log entries of each decode cell (by its concurrency), filled as the run measures them;
    `before(n)` sets the server up for the cell of n streams."""
    cells: dict[int, list[dict[str, Any]]] = {}
    measure = matrix_runner.measure_decode_cell

    async def spied(client: Any, api: Any, spec: Any, **kwargs: Any) -> Any:
        n = len(spec.prompts)
        before(n)
        start = len(server.log)
        result = await measure(client, api, spec, **kwargs)
        cells[n] = [e for e in server.log[start:] if e["path"] == "/v1/chat/completions"]
        return result

    monkeypatch.setattr(matrix_runner, "measure_decode_cell", spied)
    return cells


def pd_frame(out: Path) -> pd.DataFrame:
    """The run's results as the reports read them."""
    return to_dataframe(list(latest_by_key(load_measurements(out / RESULTS_FILE)).values()))


def decode_rows(out: Path) -> dict[int, dict[str, Any]]:
    lines = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return {r["concurrency"]: r for r in lines if r["phase"] == "decode"}


def test_each_cell_carries_the_schema_and_reports_the_share_the_server_matched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    schema = tmp_path / "answer.json"
    schema.write_text(json.dumps(SCHEMA))
    with FaultServer(token_interval_s=0.002, reply_text=VALID) as server:
        texts = {1: VALID, 2: INVALID}  # the cell of 2 streams gets replies that break the schema

        def before(n: int) -> None:
            server.reply_text = texts[n]

        cells = spy_cells(monkeypatch, server, before)
        params = make_params(tiny_params(base_url=server.base_url, concurrency=[1, 2],
                                         response_format=f"json_schema:{schema}"))  # fmt: skip
        run_matrix(params, tmp_path / "run", phases=["decode"], progress=False)
        sent = server.completion_requests()
    expected = {"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA}}
    assert sent and all(e["response_format"] == expected for e in sent)  # the warm-up's too
    rows = decode_rows(tmp_path / "run")
    for n in (1, 2):
        finished = [e for e in cells[n] if e["done"]]
        assert finished, n
        assert rows[n]["status"] == "Valid" and rows[n]["schema_valid_share"] == sum(
            matched(e["reply_text"]) for e in finished
        ) / len(finished)
        assert rows[n]["tool_called_share"] is None
    assert [rows[1]["schema_valid_share"], rows[2]["schema_valid_share"]] == [1.0, 0.0]
    table = decode_matrix(pd_frame(tmp_path / "run"))
    assert "100% valid" in table.loc["64", 1] and "0% valid" in table.loc["64", 2]


def test_each_cell_carries_the_tools_and_reports_the_share_that_called_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS))
    with FaultServer(token_interval_s=0.002, tool_call=CALL) as server:
        calls = {1: CALL, 2: None}  # the cell of 2 streams gets text, no call

        def before(n: int) -> None:
            server.tool_call = calls[n]

        cells = spy_cells(monkeypatch, server, before)
        params = make_params(tiny_params(base_url=server.base_url, concurrency=[1, 2], tools=str(tools),
                                         tool_choice="weather"))  # fmt: skip
        run_matrix(params, tmp_path / "run", phases=["decode"], progress=False)
        sent = server.completion_requests()
    choice = {"type": "function", "function": {"name": "weather"}}
    assert sent and all(e["tools"] == TOOLS and e["tool_choice"] == choice for e in sent)
    assert all(json.loads(e["body"])["ignore_eos"] is False for e in sent)  # a call ends where its JSON ends
    rows = decode_rows(tmp_path / "run")
    for n in (1, 2):
        finished = [e for e in cells[n] if e["done"]]
        assert finished, n
        called = sum(e["tool_call"] is not None for e in finished) / len(finished)
        assert rows[n]["tool_called_share"] == called and rows[n]["schema_valid_share"] is None
    assert [rows[1]["tool_called_share"], rows[2]["tool_called_share"]] == [1.0, 0.0]
    assert rows[1]["tool_args_valid_share"] == 1.0  # CALL's arguments keep to PARAMETERS
    table = decode_matrix(pd_frame(tmp_path / "run"))
    assert "100% called a tool" in table.loc["64", 1] and "0% called a tool" in table.loc["64", 2]


def test_without_the_options_every_body_is_as_before_and_no_share(tmp_path: Path) -> None:
    with FaultServer(token_interval_s=0.002) as server:
        run_matrix(make_params(tiny_params(base_url=server.base_url, concurrency=[1, 2])), tmp_path / "run",
                   progress=False)  # fmt: skip
        sent = server.completion_requests()
    assert len(sent) > 3
    for entry in sent:  # prefill, the warm-up and every decode request: the body the matrix always sent
        body = json.loads(entry["body"])
        before = {"model": body["model"], "max_tokens": body["max_tokens"], "stream": True,
                  "stream_options": {"include_usage": True, "continuous_usage_stats": True}, "ignore_eos": True,
                  "temperature": 0.0, "messages": body["messages"]}  # fmt: skip
        assert entry["body"] == json.dumps(before, separators=(",", ":"), ensure_ascii=False)
    assert {json.loads(e["body"])["max_tokens"] for e in sent} == {1, 8}  # prefill and warm-up, decode
    rows = decode_rows(tmp_path / "run")
    shares = ("schema_valid_share", "tool_called_share", "tool_args_valid_share")
    assert all(rows[n][k] is None for n in (1, 2) for k in shares)
    assert not any("valid" in cell or "called" in cell for cell in decode_matrix(pd_frame(tmp_path / "run")).stack())


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--tools", "{tools}", "--endpoint", "completions"], "tools: the completions endpoint has no tools"),
        (["--tool-choice", "auto"], "tool_choice: needs tools"),
        (["--response-format", "json_object", "--endpoint", "embeddings"],
         "response_format: not with endpoint embeddings"),
        (["--tools", "{tools}", "--endpoint", "embeddings"], "tools: not with endpoint embeddings"),
        (["--response-format", "json_schema:{missing}"], "response_format: cannot read the schema file"),
    ],
)  # fmt: skip
def test_options_that_do_not_apply_are_one_line_and_nothing_is_sent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], said: str
) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS))
    given = [a.format(tools=tools, missing=tmp_path / "missing.json") for a in extra]
    with FaultServer() as server:
        status = main(["matrix", "--base-url", server.base_url, "--contexts", "64", "--concurrency", "1",
                       "--out", str(tmp_path / "run"), *given])  # fmt: skip
        log = server.log
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: ") and said in err, err
    assert log == [] and not (tmp_path / "run").exists()
