"""Tool calls against the fault server: every request of a rate step carries the tools and the tool choice, the
server streams a call as vLLM does, each record says whether a tool was called and with valid arguments, steps.jsonl
and the progress line the shares; a bad tools file stops the command in one line before anything is sent."""

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

PARAMETERS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"type": "function", "function": {"name": "weather", "parameters": PARAMETERS}}]
VALID, INVALID = ("weather", '{"city": "Bern"}'), ("weather", '{"city": 3}')


def test_a_step_carries_the_tools_and_reports_the_shares(tmp_path: Path) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS))
    lines: list[str] = []
    with FaultServer(token_interval_s=0.002, tool_call=VALID) as server:

        def say(line: str) -> None:  # after the first step, the calls' arguments no longer match the schema
            lines.append(line)
            if line.startswith("step 0:"):
                server.tool_call = INVALID

        params = make_rate_params({"base_url": server.base_url, "rates": [50, 100], "requests_per_step": 6,
                                   "input_tokens": 40, "output_tokens": 8, "tools": str(tools),
                                   "results_dir": str(tmp_path / "run")})  # fmt: skip
        out = run_rates(params, say=say)
        sent = server.completion_requests()
    assert len(sent) == 12 and all(e["tools"] == TOOLS and e["tool_choice"] == "required" for e in sent)
    steps = read_steps(out)
    assert [s["tool_called_share"] for s in steps] == [1.0, 1.0]
    assert [s["tool_args_valid_share"] for s in steps] == [1.0, 0.0]
    assert [s["completed"] for s in steps] == [6, 6]
    records = read_records(out)
    assert list(records["tool_called"]) == [True] * 12
    assert list(records.loc[records["step"] == 0, "tool_args_valid"]) == [True] * 6
    assert list(records.loc[records["step"] == 1, "tool_args_valid"]) == [False] * 6
    assert records["first_token_s"].notna().all()
    progress = [line for line in lines if line.startswith("step ")]
    assert all(", 100% called a tool" in line for line in progress), lines


def test_a_named_choice_is_sent_as_a_function(tmp_path: Path) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS))
    with FaultServer(token_interval_s=0.002) as server:  # no call streamed: text only
        out = run_rates(make_rate_params({"base_url": server.base_url, "rates": [50], "requests_per_step": 3,
                                          "input_tokens": 40, "output_tokens": 4, "tools": str(tools),
                                          "tool_choice": "weather", "results_dir": str(tmp_path / "run")}),
                        say=lambda line: None)  # fmt: skip
        sent = server.completion_requests()
    assert all(e["tool_choice"] == {"type": "function", "function": {"name": "weather"}} for e in sent)
    step = read_steps(out)[0]
    assert step["tool_called_share"] == 0.0 and step["tool_args_valid_share"] == 0.0
    records = read_records(out)
    assert list(records["tool_called"]) == [False] * 3 and records["tool_args_valid"].isna().all()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--tools", "{bad}"], "tools: the tools file: tool 0 is not"),
        (["--tools", "{missing}"], "tools: cannot read the tools file: No such file or directory"),
        (["--tools", "{good}", "--tool-choice", "nowhere"], "tool_choice: 'nowhere' is neither"),
        (["--tools", "{good}", "--endpoint", "completions"], "tools: the completions endpoint has no tools"),
        (["--tools", "{good}", "--response-format", "json_object"], "tools and response_format: give one"),
    ],
)
def test_bad_input_is_one_line_and_nothing_is_sent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    bad, good = tmp_path / "bad.json", tmp_path / "good.json"
    bad.write_text('[{"type": "retrieval"}]')
    good.write_text(json.dumps(TOOLS))
    given = [a.format(bad=bad, good=good, missing=tmp_path / "missing.json") for a in args]
    with FaultServer() as server:
        status = main(["rates", "--base-url", server.base_url, "--rates", "1", "--requests", "2", *given,
                       "--out", str(tmp_path / "run")])  # fmt: skip
        log = server.log
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: ") and said in err, err
    assert log == [] and not (tmp_path / "run").exists()
