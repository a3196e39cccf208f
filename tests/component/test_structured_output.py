"""Structured output against the fault server: every request of a rate step carries the schema, each record says
whether its reply kept to it, steps.jsonl and the progress line the valid share; a bad schema file stops the
command in one line before anything is sent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.faultserver import FaultServer
from toolkit.cli.entry import main
from toolkit.rates.files import read_records, read_steps
from toolkit.rates.params import make_rate_params
from toolkit.rates.runner import run_rates

pytestmark = pytest.mark.timeout(60)

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
VALID, INVALID = '{"a": 3}', '{"a": "three"}'


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_a_step_carries_the_schema_and_reports_the_valid_share(tmp_path: Path, endpoint: str) -> None:
    schema = tmp_path / "answer.json"
    schema.write_text(json.dumps(SCHEMA))
    lines: list[str] = []
    with FaultServer(token_interval_s=0.002, reply_text=VALID) as server:

        def say(line: str) -> None:  # after the first step, the replies no longer match the schema
            lines.append(line)
            if line.startswith("step 0:"):
                server.reply_text = INVALID

        params = make_rate_params({"base_url": server.base_url, "endpoint": endpoint, "rates": [50, 100],
                                   "requests_per_step": 6, "input_tokens": 40, "output_tokens": 8,
                                   "response_format": f"json_schema:{schema}",
                                   "results_dir": str(tmp_path / "run")})  # fmt: skip
        out = run_rates(params, say=say)
        sent = server.completion_requests()
    expected = {"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA}}
    assert len(sent) == 12 and all(entry["response_format"] == expected for entry in sent)
    steps = read_steps(out)
    assert [s["schema_valid_share"] for s in steps] == [1.0, 0.0]
    assert [s["completed"] for s in steps] == [6, 6]
    records = read_records(out)
    assert list(records.loc[records["step"] == 0, "schema_valid"]) == [True] * 6
    assert list(records.loc[records["step"] == 1, "schema_valid"]) == [False] * 6
    progress = [line for line in lines if line.startswith("step ")]
    assert ", 100% valid" in progress[0] and ", 0% valid" in progress[1], lines
    # A low share explains itself: why the first invalid reply broke the format, and how it began
    why = "not valid under the schema: 'three' is not of type 'integer'; the reply began '{\"a\": \"three\"}'"
    assert [s["invalid_reply"] for s in steps] == [None, why]
    assert f"step 1: the first reply that broke the response format: {why}" in lines
    assert list(records.loc[records["step"] == 1, "schema_problem"]) == [why] * 6
    sweep = json.loads((out / "rates" / "sweep.json").read_text())
    assert sweep["response_format"] == f"json_schema:{schema}"


def test_without_a_format_nothing_is_carried_and_no_share(tmp_path: Path) -> None:
    with FaultServer(token_interval_s=0.002) as server:
        out = run_rates(make_rate_params({"base_url": server.base_url, "rates": [50], "requests_per_step": 4,
                                          "input_tokens": 40, "output_tokens": 4,
                                          "results_dir": str(tmp_path / "run")}), say=lambda line: None)  # fmt: skip
        sent = server.completion_requests()
    assert sent and all(entry["response_format"] is None for entry in sent)
    assert read_steps(out)[0]["schema_valid_share"] is None
    assert read_records(out)["schema_valid"].isna().all()


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("json_schema:{bad}", "the schema file is not a JSON Schema: 'nonsense' is not valid"),
        ("json_schema:{missing}", "cannot read the schema file: No such file or directory"),
        ("yaml", "unknown kind; allowed: json_object, or json_schema:FILE"),
    ],
)
def test_bad_input_is_one_line_and_nothing_is_sent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spec: str, said: str
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"type": "nonsense"}')
    given = spec.format(bad=bad, missing=tmp_path / "missing.json")
    with FaultServer() as server:
        status = main(["rates", "--base-url", server.base_url, "--rates", "1", "--requests", "2",
                       "--response-format", given, "--out", str(tmp_path / "run")])  # fmt: skip
        log = server.log
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: response_format: ") and said in err, err
    assert log == [] and not (tmp_path / "run").exists()
