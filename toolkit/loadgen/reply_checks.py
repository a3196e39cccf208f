"""Whether a finished reply kept to what its request asked for: the `response_format` (toolkit.loadgen.structured)
and the `tools` (toolkit.loadgen.tools) its body carried. Pure: a body and a `StreamResult` in, a record's fields out;
the rate sweep's records and the matrix's decode cells check their replies with the same functions."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from toolkit.base.api_keys import redact_and_cut
from toolkit.loadgen.stream_events import StreamResult
from toolkit.loadgen.structured import reply_problem
from toolkit.loadgen.tools import arguments_valid


def tool_fields(body: dict[str, Any], result: StreamResult, failed: bool) -> dict[str, bool | None]:
    """`tool_called` (None: the request carried no tools, or failed) and `tool_args_valid` (None: no call): the
    first call's whole arguments valid under its function's `parameters`; arguments cut to their bound are not."""
    tools = body.get("tools")
    if tools is None or failed or result.tool_args is None:
        return {"tool_called": None, "tool_args_valid": None}
    if result.tool_name is None:
        return {"tool_called": False, "tool_args_valid": None}
    valid = not result.tool_args_cut and arguments_valid(tools, result.tool_name, "".join(result.tool_args))
    return {"tool_called": True, "tool_args_valid": valid}


PROBLEM_EXCERPT = 120  # characters of an invalid reply kept beside why it broke the format


def schema_fields(body: dict[str, Any], result: StreamResult, failed: bool) -> dict[str, bool | str | None]:
    """`schema_valid`: whether the reply keeps to the `response_format` its request carried (None: it carried none,
    or failed; a reply whose kept text was cut to its byte bound is not whole: invalid); `schema_problem`: why not,
    with the reply's first characters (redacted, cut to PROBLEM_EXCERPT)."""
    response_format = body.get("response_format")
    if response_format is None or result.text is None or failed:
        return {"schema_valid": None, "schema_problem": None}
    text = "".join(result.text)
    why = "cut at its byte bound" if result.text_kept_bytes is not None else reply_problem(response_format, text)
    problem = None if why is None else f"{why}; the reply began {redact_and_cut(repr(text), PROBLEM_EXCERPT)}"
    return {"schema_valid": why is None, "schema_problem": problem}


SHARE_OF = {"schema_valid_share": "schema_valid", "tool_called_share": "tool_called",
            "tool_args_valid_share": "tool_args_valid"}  # fmt: skip


def completed_shares(body: dict[str, Any], results: Iterable[StreamResult]) -> dict[str, Any]:
    """Of the `results` of requests sent with `body` that completed (read to `[DONE]` without an error, a
    token at least), the share whose reply kept to its response format (`schema_valid_share`), called a tool
    (`tool_called_share`) and called it with valid arguments (`tool_args_valid_share`); each None when the body
    does not carry what it checks or none completed."""
    completed = [r for r in results if r.done and r.error is None and r.completion_tokens > 0]
    checks = [{**schema_fields(body, r, False), **tool_fields(body, r, False)} for r in completed]
    carried = {"schema_valid_share": "response_format" in body, "tool_called_share": "tools" in body,
               "tool_args_valid_share": "tools" in body}  # fmt: skip
    return {share: sum(bool(c[field]) for c in checks) / len(checks) if checks and carried[share] else None
            for share, field in SHARE_OF.items()}  # fmt: skip
