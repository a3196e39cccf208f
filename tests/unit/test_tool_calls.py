"""Tool calls (toolkit.loadgen.tools): the request carries `tools` and `tool_choice`, the streamed call is read from
`delta.tool_calls` pieces split anywhere, each reply's `tool_called` and `tool_args_valid`, the first token set by a
call, each step's shares, and bad input as one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from toolkit.base.errors import ParamsError, RateSweepError
from toolkit.loadgen.open_loop import REQUEST_FIELDS, PlannedRequest, record
from toolkit.loadgen.stream_events import StreamAccount, StreamResult, apply_chunk, build_request
from toolkit.loadgen.tools import arguments_valid, read_tools, tool_choice
from toolkit.method.goodput import RECORD_DEFAULTS
from toolkit.rates.params import make_rate_params
from toolkit.rates.step import completed_share
from toolkit.rates.step_lines import progress_text
from toolkit.results.step_row import validated_step

PARAMETERS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"type": "function", "function": {"name": "weather", "parameters": PARAMETERS}},
         {"type": "function", "function": {"name": "time", "parameters": {"type": "object"}}}]  # fmt: skip


@pytest.fixture
def tools_file(tmp_path: Path) -> Path:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(TOOLS))
    return path


def _event(delta: dict[str, Any], completion: int) -> bytes:
    usage = {"prompt_tokens": 5, "completion_tokens": completion, "total_tokens": 5 + completion}
    chunk = {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}], "usage": usage}
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def _call_stream(name: str, arguments: str, pieces: int) -> bytes:
    """A tool call streamed as vLLM does: a role chunk, the header (id, type, name, empty arguments), the pieces."""
    cuts = [len(arguments) * i // pieces for i in range(pieces + 1)]
    events = [_event({"role": "assistant", "content": ""}, 0),
              _event({"tool_calls": [{"id": "call-1", "type": "function", "index": 0,
                                      "function": {"name": name, "arguments": ""}}]}, 1)]  # fmt: skip
    for i in range(pieces):
        part = arguments[cuts[i] : cuts[i + 1]]
        events.append(_event({"tool_calls": [{"index": 0, "function": {"arguments": part}}]}, i + 2))
    return b"".join(events) + b"data: [DONE]\n\n"


# ---- the request ---------------------------------------------------------------------------------------------------


def test_the_body_carries_the_tools_and_lets_the_reply_end() -> None:
    path, body = build_request("chat", "m", "hi", 48, tools=TOOLS, tool_choice="required")
    assert path == "/v1/chat/completions" and body["tools"] == TOOLS and body["tool_choice"] == "required"
    assert body["ignore_eos"] is False  # a call's arguments are constrained JSON: the reply must end with them
    _, plain = build_request("chat", "m", "hi", 48)
    assert "tools" not in plain and "tool_choice" not in plain and plain["ignore_eos"] is True
    with pytest.raises(ValueError, match="completions"):
        build_request("completions", "m", "hi", 48, tools=TOOLS)


def test_tools_and_a_choice_become_what_vllm_takes(tools_file: Path) -> None:
    assert read_tools(str(tools_file)) == TOOLS
    assert tool_choice(None, TOOLS) == "required"
    assert [tool_choice(c, TOOLS) for c in ("auto", "required", "none")] == ["auto", "required", "none"]
    assert tool_choice("time", TOOLS) == {"type": "function", "function": {"name": "time"}}
    params = make_rate_params({"tools": str(tools_file), "tool_choice": "weather"})
    assert params.request_tools() == (TOOLS, {"type": "function", "function": {"name": "weather"}})
    assert make_rate_params({"tools": str(tools_file)}).request_tools() == (TOOLS, "required")
    assert make_rate_params({}).request_tools() == (None, None)


# ---- the reply -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("pieces", [1, 3, 7])
def test_a_streamed_call_is_read_whatever_the_split(pieces: int) -> None:
    stream = _call_stream("weather", '{"city": "Zürich"}', pieces)
    for at in range(len(stream) + 1):  # the body split at every position
        result = StreamResult(tool_args=[], max_tokens=64)
        account = StreamAccount(result)
        account.feed(stream[:at], 1.0)
        account.feed(stream[at:], 2.0)
        account.end()
        assert result.error is None and result.done, (at, result.error)
        assert result.tool_name == "weather" and "".join(result.tool_args or []) == '{"city": "Zürich"}', at


def test_a_call_delta_is_the_first_token() -> None:
    result = StreamResult(started=0.0, tool_args=[])
    assert apply_chunk(_event({"role": "assistant", "content": ""}, 0)[6:-2], 0.5, result)
    assert result.first_token_at is None  # the role chunk is no token
    header = {"tool_calls": [{"id": "x", "type": "function", "index": 0, "function": {"name": "t", "arguments": ""}}]}
    assert apply_chunk(_event(header, 0)[6:-2], 1.0, result)  # the call's header, before any usage counted
    assert result.first_token_at == 1.0
    assert apply_chunk(_event({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}, 2)[6:-2], 2.0, result)
    assert result.ttft_s == 1.0 and result.token_events == [(2.0, 2)]
    plain = StreamResult(started=0.0)  # a request without tools: the call still sets the first token, none kept
    assert apply_chunk(_event(header, 1)[6:-2], 3.0, plain) and plain.first_token_at == 3.0
    assert plain.tool_args is None and plain.tool_name is None


def test_only_the_first_call_is_kept_and_within_its_bound() -> None:
    result = StreamResult(tool_args=[], max_tokens=1)
    first = {"tool_calls": [{"index": 0, "function": {"name": "weather", "arguments": '{"city":'}},
                            {"index": 1, "function": {"name": "time", "arguments": "{}"}}]}  # fmt: skip
    apply_chunk(_event(first, 1)[6:-2], 1.0, result)
    apply_chunk(_event({"tool_calls": [{"index": 0, "function": {"arguments": ' "x"}'}}]}, 1)[6:-2], 1.1, result)
    assert result.tool_name == "weather" and "".join(result.tool_args or []) == '{"city": "x"}'
    apply_chunk(_event({"tool_calls": [{"index": 0, "function": {"arguments": "y" * 2000}}]}, 1)[6:-2], 1.2, result)
    assert result.tool_args_cut and result.tool_args_bytes == len('{"city": "x"}')


def _recorded(body: dict[str, Any], result: StreamResult) -> dict[str, Any]:
    result.started, result.first_token_at, result.token_events, result.done = 1.0, 1.1, [(1.1, 1)], True
    result.completion_tokens = 1
    return record(0, 0.0, result, PlannedRequest("/v1/chat/completions", body, 5), 0.0)


@pytest.mark.parametrize(
    ("name", "arguments", "called", "valid"),
    [
        ("weather", '{"city": "Bern"}', True, True),
        ("weather", '{"city": 3}', True, False),  # against its schema
        ("weather", '{"city": "Be', True, False),  # not whole JSON
        ("nowhere", "{}", True, False),  # no such function
        (None, "", False, None),  # no call at all
    ],
)
def test_the_record_says_whether_a_tool_was_called_with_valid_arguments(
    name: str | None, arguments: str, called: bool, valid: bool | None
) -> None:
    _, body = build_request("chat", "m", "hi", 8, tools=TOOLS, tool_choice="required")
    row = _recorded(body, StreamResult(tool_args=[arguments] if arguments else [], tool_name=name))
    assert row["tool_called"] is called and row["tool_args_valid"] is valid
    assert {"tool_called", "tool_args_valid"} <= set(REQUEST_FIELDS) and set(row) == set(REQUEST_FIELDS)
    _, plain = build_request("chat", "m", "hi", 8)
    row = _recorded(plain, StreamResult())
    assert row["tool_called"] is None and row["tool_args_valid"] is None
    assert RECORD_DEFAULTS["tool_called"] is None and RECORD_DEFAULTS["tool_args_valid"] is None


def test_the_step_shares_and_the_progress_line() -> None:
    import pandas as pd

    frame = pd.DataFrame({"error": [None, None, None, "cut"], "first_token_s": [0.1, 0.1, 0.1, float("nan")],
                          "output_tokens": [4, 4, 4, 0], "tool_called": [True, True, False, None],
                          "tool_args_valid": [True, False, None, None]})  # fmt: skip
    assert completed_share(frame, "tool_called") == pytest.approx(2 / 3)
    assert completed_share(frame, "tool_args_valid") == pytest.approx(1 / 3)
    row = {"step": 0, "offered_rate": 2.0, "achieved_rate": 2.0, "searched": False, "completed": 8, "requests": 8,
           "output_tok_s": 100.0, "ttft_p50_ms": 20.0, "ttft_p99_ms": 30.0, "server_waiting_max": 0,
           "lag_p99_ms": 1.0, "lag_flagged": False,
           "tool_called_share": 0.75, "tool_args_valid_share": 0.5}  # fmt: skip
    assert progress_text(row, slo=False).endswith(", 75% called a tool")
    assert "tool" not in progress_text(row | {"tool_called_share": None}, slo=False)
    step = validated_step(row, str)
    assert step.tool_called_share == 0.75 and step.tool_args_valid_share == 0.5
    with pytest.raises(RateSweepError, match="tool_args_valid_share"):
        validated_step(row | {"tool_args_valid_share": 1.5}, str)


# ---- bad input -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("not json", "the tools file is not JSON"),
        ('{"type": "function"}', "the tools file does not hold a list of tools"),
        ("[]", "the tools file does not hold a list of tools"),
        ('[{"type": "retrieval"}]', 'tool 0 is not {"type": "function"'),
        ('[{"type": "function", "function": {"parameters": {}}}]', "tool 0 has no function name"),
        ('[{"type": "function", "function": {"name": "f"}}]', "tool 0 (f): its parameters are not a JSON Schema"),
        (
            '[{"type": "function", "function": {"name": "f", "parameters": {"type": "nonsense"}}}]',
            "tool 0 (f): its parameters are not a JSON Schema: 'nonsense' is not valid",
        ),
    ],
)
def test_a_bad_tools_file_is_one_line(tmp_path: Path, content: str, said: str) -> None:
    path = tmp_path / "tools.json"
    path.write_text(content)
    with pytest.raises(ParamsError) as caught:
        make_rate_params({"tools": str(path)})
    text = str(caught.value)
    assert text.startswith("tools: ") and said in text and "\n" not in text, text


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ParamsError, match=r"^tools: cannot read the tools file: No such file or directory"):
        make_rate_params({"tools": str(tmp_path / "missing.json")})


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        ({"tool_choice": "elsewhere"}, "tool_choice: 'elsewhere' is neither auto, required, none nor a function"),
        ({"endpoint": "completions"}, "tools: the completions endpoint has no tools"),
        ({"response_format": "json_object"}, "tools and response_format: give one of them, not both"),
        ({"workload": "conversation", "turns": 2}, "tools: apply to single requests, not to workload conversation"),
    ],
)
def test_what_tools_do_not_go_with_is_one_line(tools_file: Path, extra: dict[str, Any], said: str) -> None:
    with pytest.raises(ParamsError) as caught:
        make_rate_params({"tools": str(tools_file), **extra})
    assert said in str(caught.value) and "\n" not in str(caught.value), caught.value


def test_a_choice_without_tools_is_one_line() -> None:
    with pytest.raises(ParamsError, match="tool_choice: needs tools"):
        make_rate_params({"tool_choice": "auto"})


def test_arguments_valid_reads_the_functions_schema() -> None:
    assert arguments_valid(TOOLS, "time", "{}") and not arguments_valid(TOOLS, "time", "[]")
