"""Structured output (toolkit.loadgen.structured): the request carries `response_format`, each reply's
`schema_valid`, each step's `schema_valid_share`, and a bad spec or schema file as one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolkit.base.errors import ParamsError, RateSweepError
from toolkit.loadgen.open_loop import REQUEST_FIELDS, PlannedRequest, record
from toolkit.loadgen.stream_events import StreamResult, build_request, keep_text
from toolkit.loadgen.structured import read_response_format, reply_problem, reply_valid
from toolkit.method.goodput import RECORD_DEFAULTS
from toolkit.rates.cli import summary_table
from toolkit.rates.files import records_frame
from toolkit.rates.params import make_rate_params
from toolkit.rates.step import first_invalid_reply, schema_valid_share
from toolkit.rates.step_lines import progress_text
from toolkit.results.step_row import validated_step

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
AS_SENT = {"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA}}


@pytest.fixture
def schema_file(tmp_path: Path) -> Path:
    path = tmp_path / "answer.json"
    path.write_text(json.dumps(SCHEMA))
    return path


# ---- the request ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("endpoint", "path"), [("chat", "/v1/chat/completions"), ("completions", "/v1/completions")])
def test_the_body_carries_the_response_format_and_lets_the_reply_end(endpoint: str, path: str) -> None:
    sent_to, body = build_request(endpoint, "m", "hi", 48, response_format=AS_SENT)  # type: ignore[arg-type]
    assert sent_to == path and body["response_format"] == AS_SENT
    assert body["ignore_eos"] is False  # a reply that went on past its closing brace would not be JSON
    _, plain = build_request(endpoint, "m", "hi", 48)  # type: ignore[arg-type]
    assert "response_format" not in plain and plain["ignore_eos"] is True


def test_a_spec_becomes_what_vllm_takes(schema_file: Path) -> None:
    assert read_response_format("json_object") == {"type": "json_object"}
    assert read_response_format(f"json_schema:{schema_file}") == AS_SENT
    params = make_rate_params({"response_format": f"json_schema:{schema_file}"})
    assert params.response_format == f"json_schema:{schema_file}" and params.request_format() == AS_SENT
    assert make_rate_params({}).request_format() is None


# ---- the reply -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "valid"),
    [
        ('{"a": 3}', True),
        (' {"a": 3, "b": "more"}\n', True),  # around it, whitespace; beside it, what the schema allows
        ('{"a": "three"}', False),  # the wrong type
        ('{"b": 3}', False),  # a required property missing
        ("[1, 2]", False),  # not an object
        ("the answer is 3", False),  # not JSON
        ('{"a": 3', False),  # cut by max_tokens
        ('{"a": 3} and more', False),  # ignore_eos: it went on past the JSON
        ("", False),
    ],
)
def test_a_reply_is_checked_against_its_schema(text: str, valid: bool) -> None:
    assert reply_valid(AS_SENT, text) is valid


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"a": 3}', None),
        ('{"a": "three"}', "not valid under the schema: 'three' is not of type 'integer'"),
        ('{"b": 3}', "not valid under the schema: 'a' is a required property"),
        ('{"a": 3', "not JSON: unexpected end of data"),
        ("the answer is 3", "not JSON: invalid literal, expected 'true'"),  # orjson's words
    ],
)
def test_an_invalid_reply_says_why_in_a_few_words(text: str, why: str | None) -> None:
    assert reply_problem(AS_SENT, text) == why
    assert reply_problem({"type": "json_object"}, "[1]") == "not an object"


def test_json_object_asks_only_for_an_object() -> None:
    fmt = {"type": "json_object"}
    assert reply_valid(fmt, '{"anything": [1]}') and not reply_valid(fmt, "[1]") and not reply_valid(fmt, "{")


def streamed(text: list[str] | None, error: str | None = None) -> StreamResult:
    result = StreamResult(started=10.1, first_token_at=10.15, token_events=[(10.15, 1), (10.2, 2)],
                          completion_tokens=2, prompt_tokens=7, done=error is None, error=error, text=text,
                          max_tokens=2)  # fmt: skip
    return result


def test_the_record_says_whether_the_reply_kept_to_the_format() -> None:
    planned = PlannedRequest(*build_request("chat", "m", "hi", 2, response_format=AS_SENT), 7)
    good = record(0, 0.1, streamed(['{"a":', " 3}"]), planned, 10.0)
    assert list(good) == list(REQUEST_FIELDS) and good["schema_valid"] is True
    assert good["schema_problem"] is None
    bad = record(1, 0.1, streamed(['{"a":', ' "x"}']), planned, 10.0)
    assert bad["schema_valid"] is False
    assert bad["schema_problem"] == ("not valid under the schema: 'x' is not of type 'integer'; the reply began "
                                     "'{\"a\": \"x\"}'")  # fmt: skip
    cut = streamed(['{"a":'], error="stream ended before [DONE]")
    assert record(2, 0.1, cut, planned, 10.0)["schema_valid"] is None
    plain = PlannedRequest(*build_request("chat", "m", "hi", 2), 7)
    assert record(3, 0.1, streamed(None), plain, 10.0)["schema_valid"] is None


def test_a_reply_cut_to_its_byte_bound_is_invalid() -> None:
    result = streamed([])
    keep_text(result, '{"a": 3}' + " " * 4096)  # past 1,024 bytes a token asked for, 2 asked: the rest not kept
    assert result.text_kept_bytes is not None
    planned = PlannedRequest(*build_request("chat", "m", "hi", 2, response_format=AS_SENT), 7)
    cut = record(0, 0.1, result, planned, 10.0)
    assert cut["schema_valid"] is False and cut["schema_problem"].startswith("cut at its byte bound; the reply began")
    assert len(cut["schema_problem"]) <= len("cut at its byte bound; the reply began ") + 120


# ---- the step ------------------------------------------------------------------------------------------------------


def test_the_step_reports_the_valid_share_of_its_completed_replies() -> None:
    planned = PlannedRequest(*build_request("chat", "m", "hi", 2, response_format=AS_SENT), 7)
    records = [record(0, 0.1, streamed(['{"a": 1}']), planned, 10.0),
               record(1, 0.2, streamed(['{"a": 2}']), planned, 10.0),
               record(2, 0.3, streamed(["{"]), planned, 10.0),
               record(3, 0.4, streamed(["{"], error="HTTP 500: boom"), planned, 10.0)]  # fmt: skip
    frame = records_frame(records, 0, 4.0)
    assert RECORD_DEFAULTS["schema_valid"] is None and "schema_valid" in frame.columns
    assert schema_valid_share(frame) == pytest.approx(2 / 3)  # the failed request is not a reply
    assert schema_valid_share(frame.iloc[3:]) is None  # none completed
    assert first_invalid_reply(frame) == "not JSON: unexpected end of data; the reply began '{'"  # request 2
    assert first_invalid_reply(frame.iloc[:2]) is None


def test_the_progress_line_and_the_steps_file_carry_the_share() -> None:
    row = {"step": 0, "offered_rate": 2.0, "achieved_rate": 2.0, "searched": False, "completed": 8, "requests": 8,
           "output_tok_s": 100.0, "ttft_p50_ms": 20.0, "ttft_p99_ms": 30.0, "server_waiting_max": 0,
           "lag_p99_ms": 1.0, "lag_flagged": False, "schema_valid_share": 0.75}  # fmt: skip
    assert progress_text(row, slo=False).endswith(", 75% valid")
    assert "valid" not in progress_text(row | {"schema_valid_share": None}, slo=False)
    assert validated_step(row, str).schema_valid_share == 0.75
    with pytest.raises(RateSweepError, match="schema_valid_share"):
        validated_step(row | {"schema_valid_share": 1.5}, str)
    table = {**row, "tpot_p50_ms": 5.0, "goodput": 2.0, "slo_fraction": 1.0, "ttft_sched_p50_ms": 21.5,
             "ttft_sched_p99_ms": 33.5}  # fmt: skip
    head, line, footer = summary_table([table]).splitlines()
    assert head.endswith(" valid") and line.endswith(" 75%")
    assert " 21.5      33.5 " in line and " 20.0 " not in line  # TTFT from the scheduled arrival, not the send
    assert footer.startswith("TTFT from each request's scheduled arrival")
    assert "valid" not in summary_table([table | {"schema_valid_share": None}])


# ---- bad input -----------------------------------------------------------------------------------------------------


def one_line(values: dict[str, object]) -> str:
    with pytest.raises(ParamsError) as caught:
        make_rate_params(values)
    line = str(caught.value)
    assert "\n" not in line and line.startswith("response_format: "), line
    return line


def test_an_unknown_kind_is_one_line() -> None:
    assert "allowed: json_object, or json_schema:FILE" in one_line({"response_format": "xml"})
    assert "allowed" in one_line({"response_format": "json_schema:"})
    assert "allowed" in one_line({"response_format": "json_object:x.json"})


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    line = one_line({"response_format": f"json_schema:{tmp_path / 'nowhere.json'}"})
    assert "cannot read the schema file: No such file or directory" in line


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ('{"type": "nonsense"}', "not a JSON Schema: 'nonsense' is not valid"),
        ('{"type": "object", "properties": {"a": 5}}', "not a JSON Schema: 5 is not of type"),
        ("[1, 2]", "not a JSON Schema: it holds a list, not an object"),
        ('{"type": "object",\n  "properties": ', "the schema file is not JSON"),
    ],
)
def test_a_file_that_is_not_a_json_schema_is_one_line(tmp_path: Path, content: str, said: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    assert said in one_line({"response_format": f"json_schema:{path}"})


def test_a_conversation_takes_no_response_format() -> None:
    with pytest.raises(ParamsError, match=r"^response_format: applies to single requests"):
        make_rate_params({"response_format": "json_object", "workload": "conversation", "turns": 2})
