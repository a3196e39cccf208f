"""The decode matrix's requests beyond plain text: the run parameters that ask for them (and the rules they keep), the
bodies a cell sends, each cell's shares of its completed replies, the result rows that hold them (older ones
without) and the decode table that shows them only when the run used them."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from toolkit.base.errors import ParamsError, ResultsError
from toolkit.base.schema import Measurement
from toolkit.cli.entry import build_parser
from toolkit.loadgen.reply_checks import completed_shares
from toolkit.loadgen.stream_events import StreamResult
from toolkit.matrix.decode import CellSpec
from toolkit.params import make_params
from toolkit.reports.extras import extras_table
from toolkit.reports.tables import REPLY_SHARE_NOTE, decode_matrix, footnotes
from toolkit.request_options import REQUEST_OPTIONS
from toolkit.results.measurement_row import validated_measurement
from toolkit.results.store import to_dataframe

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
TOOLS = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "answer.json").write_text(json.dumps(SCHEMA))
    (tmp_path / "tools.json").write_text(json.dumps(TOOLS))
    return {"schema": str(tmp_path / "answer.json"), "tools": str(tmp_path / "tools.json")}


def one_line(values: dict[str, object]) -> str:
    with pytest.raises(ParamsError) as caught:
        make_params(values)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_the_options_are_read_as_the_rate_sweep_reads_them(
    files: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(Path(files["schema"]).parent)
    params = make_params({"response_format": "json_schema:answer.json"})
    assert params.response_format == f"json_schema:{files['schema']}"  # absolute: the notebooks run elsewhere
    assert params.request_format() == {"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA}}
    assert params.request_tools() == (None, None)
    tools = make_params({"tools": "tools.json", "tool_choice": "weather"})
    assert tools.request_tools() == (TOOLS, {"type": "function", "function": {"name": "weather"}})
    assert make_params({"tools": "tools.json"}).request_tools() == (TOOLS, "required")
    assert make_params({"response_format": "json_object"}).request_format() == {"type": "json_object"}


def test_the_fingerprint_holds_the_options_only_when_given(files: dict[str, str]) -> None:
    plain = make_params({}).fingerprint()
    assert not {"response_format", "tools", "tool_choice"} & set(plain)  # an older run's fingerprint still matches
    given = make_params({"tools": files["tools"], "tool_choice": "auto"}).fingerprint()
    assert given == {**plain, "tools": files["tools"], "tool_choice": "auto"}


@pytest.mark.parametrize(
    ("values", "said"),
    [
        ({"tools": "{tools}", "endpoint": "completions"},
         "tools: the completions endpoint has no tools; use endpoint chat"),
        ({"tool_choice": "auto"}, "tool_choice: needs tools (a JSON file of function tools)"),
        ({"tools": "{tools}", "tool_choice": "lookup"}, "tool_choice: 'lookup' is neither auto, required, none nor"),
        ({"tools": "{tools}", "response_format": "json_object"}, "tools and response_format: give one of them"),
        ({"response_format": "json_object", "endpoint": "embeddings"}, "response_format: not with endpoint embeddings"),
        ({"tools": "{tools}", "endpoint": "embeddings"}, "tools: not with endpoint embeddings"),
        ({"response_format": "yaml"}, "response_format: unknown kind; allowed: json_object, or json_schema:FILE"),
        ({"tools": "{schema}"}, "tools: the tools file does not hold a list of tools"),
    ],
)  # fmt: skip
def test_options_that_do_not_apply_are_one_line(files: dict[str, str], values: dict[str, str], said: str) -> None:
    given = {k: v.format(**files) for k, v in values.items()}
    assert one_line(given).startswith(said)


def test_a_cell_sends_what_every_request_carries() -> None:
    fmt = {"type": "json_object"}
    plain = CellSpec("m", "chat", ("hi",), 8, 1.0)
    carried = CellSpec("m", "chat", ("hi",), 8, 1.0, response_format=fmt)
    _path, body = plain.request("hi", 8)
    assert body["ignore_eos"] is True and not {"response_format", "tools", "tool_choice"} & set(body)
    _path, body = carried.request("hi", 8)
    assert body["response_format"] == fmt and body["ignore_eos"] is False
    _path, body = CellSpec("m", "chat", ("hi",), 8, 1.0, tools=TOOLS, tool_choice="auto").request("hi", 8)
    assert (body["tools"], body["tool_choice"], body["ignore_eos"]) == (TOOLS, "auto", False)


def reply(
    text: str | None = None, *, call: str | None = None, done: bool = True, error: str | None = None
) -> StreamResult:
    result = StreamResult(text=None if text is None else [text], tool_args=None if call is None else [call],
                          done=done, error=error, completion_tokens=5, cancelled=not done)  # fmt: skip
    result.tool_name = "weather" if call else None
    return result


def test_a_cells_shares_count_its_completed_replies_only() -> None:
    body = {"response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}}
    replies = [reply('{"a": 1}'), reply('{"a": 2}'), reply('{"a": "x"}'), reply('{"a": "x"}', done=False),
               reply('{"a": "x"}', error="HTTP 500: boom")]  # fmt: skip
    completed = replies[:3]
    valid = sum(1 for r in completed if r.text and '"x"' not in r.text[0])
    shares = completed_shares(body, replies)
    assert shares == {"schema_valid_share": valid / len(completed), "tool_called_share": None,
                      "tool_args_valid_share": None}  # fmt: skip
    tools = {"tools": TOOLS}
    called = [reply(call="{}"), reply(call="{not json"), StreamResult(tool_args=[], done=True, completion_tokens=3)]
    assert completed_shares(tools, called) == {"schema_valid_share": None, "tool_called_share": 2 / 3,
                                               "tool_args_valid_share": 1 / 3}  # fmt: skip
    assert set(completed_shares({}, replies).values()) == {None}
    assert set(completed_shares(body, replies[3:]).values()) == {None}  # none completed: no share


CELL = {"phase": "decode", "context_tokens": 64, "context": "64", "concurrency": 2, "status": "Valid",
        "total_tok_s": 100.0}  # fmt: skip


def where(loc: tuple[object, ...]) -> str:
    return "results.jsonl:1: " + ".".join(map(str, loc))


def test_a_row_holds_the_shares_and_an_older_row_loads_without_them() -> None:
    assert validated_measurement(dict(CELL), where).schema_valid_share is None
    row = validated_measurement({**CELL, "schema_valid_share": 0.75, "tool_called_share": None}, where)
    assert row.schema_valid_share == 0.75
    for column in ("schema_valid_share", "tool_called_share", "tool_args_valid_share"):
        with pytest.raises(ResultsError, match=rf"^results\.jsonl:1: {column}: "):
            validated_measurement({**CELL, column: 1.5}, where)


def test_the_decode_table_shows_the_shares_only_when_the_run_used_them() -> None:
    plain = Measurement("decode", 64, "64", 2, "Valid", total_tok_s=100.0)
    assert decode_matrix(to_dataframe([plain])).loc["64", 2] == "100.0"
    assert REPLY_SHARE_NOTE not in footnotes(to_dataframe([plain]))
    structured = Measurement("decode", 64, "64", 2, "Valid", total_tok_s=100.0, schema_valid_share=0.75)
    frame = to_dataframe([structured])
    assert decode_matrix(frame).loc["64", 2] == "100.0 · 75% valid"
    assert REPLY_SHARE_NOTE in footnotes(frame)
    tools = Measurement("decode", 64, "64", 2, "Valid", total_tok_s=100.0, tool_called_share=1.0,
                        tool_args_valid_share=0.5)  # fmt: skip
    assert decode_matrix(to_dataframe([tools])).loc["64", 2] == "100.0 · 100% called a tool"
    extras = extras_table(to_dataframe([tools]))
    assert (extras.iloc[0]["Tool called"], extras.iloc[0]["Tool arguments valid"]) == ("100.0%", "50.0%")


def test_matrix_and_rates_take_the_options_in_one_wording() -> None:
    """Declared once (toolkit.rates.cli.add_request_options): the same flags, metavars and help, but for what
    carries and reports them (a decode request and cell; a sweep's request and step); `interleave` as `matrix`."""
    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    options = {}
    for command in ("matrix", "rates"):
        actions = subparsers.choices[command]._actions
        options[command] = [(a.option_strings, a.metavar, a.help) for a in actions if a.dest in REQUEST_OPTIONS]
    as_rates = [(flags, metavar, help.replace("decode request", "request").replace("each decode cell", "each step"))
                for flags, metavar, help in options["matrix"]]  # fmt: skip
    assert [flags for flags, _m, _h in as_rates] == [["--response-format"], ["--tools"], ["--tool-choice"]]
    assert as_rates == options["rates"]
    interleave = subparsers.choices["interleave"]._actions  # every round's matrix, on both sides
    assert [(a.option_strings, a.metavar, a.help) for a in interleave if a.dest in REQUEST_OPTIONS] == options["matrix"]
