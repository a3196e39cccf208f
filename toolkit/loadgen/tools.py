"""Tool calls: the `tools` and `tool_choice` a chat request carries, and whether a reply's first call keeps to its
function's `parameters`.

`tools` is a JSON file holding a list of OpenAI function tools (`[{"type": "function", "function": {"name": ...,
"parameters": {JSON Schema}}}]`); `tool_choice` is `auto`, `required`, `none` or a function's name, sent as
`{"type": "function", "function": {"name": NAME}}`. vLLM 0.32 (vllm/renderers/online_renderer.py, lines 259-280)
refuses `auto` unless the server was started with `--enable-auto-tool-choice --tool-call-parser ...`, and `required`
or a named function unless it has a `--tool-call-parser`; given one, `required` and a named function are served by
structured outputs on a JSON Schema built from the tools (vllm/tool_parsers/abstract_tool_parser.py, lines 147-158;
vllm/tool_parsers/utils.py `get_json_schema_from_tools`), `auto` by the parser alone. Chat only: the completions API
has no tools. A bad file or choice is one line (ParamsError), before anything is sent.

A reply is checked once, after its stream ended: its first call's arguments (the `function.arguments` pieces of
`delta.tool_calls` concatenated) parsed as JSON (orjson), then validated against that function's `parameters`
(jsonschema).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from toolkit.base.errors import ParamsError
from toolkit.loadgen.structured import read_json_file, schema_problem, valid_under

CHOICES = ("auto", "required", "none")
MAX_TOOLS_BYTES = 1024 * 1024  # a tools file larger than this is refused: a request carries it every time


def read_tools(path: str) -> list[dict[str, Any]]:
    """The `tools` a request carries, read from the JSON file at `path`; ParamsError in one line (without the
    parameter's name) for a file that cannot be read, is not JSON, or is not a list of function tools."""
    tools = read_json_file(Path(path), "the tools file", MAX_TOOLS_BYTES)
    if not isinstance(tools, list) or not tools:
        raise ParamsError('the tools file does not hold a list of tools ([{"type": "function", ...}, ...])')
    names: set[str] = set()
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(function, dict):
            raise ParamsError(f'the tools file: tool {i} is not {{"type": "function", "function": {{...}}}}')
        name = function.get("name")
        if not isinstance(name, str) or not name.strip():
            raise ParamsError(f"the tools file: tool {i} has no function name")
        if name in names:
            raise ParamsError(f"the tools file: function {name!r} is named twice")
        names.add(name)
        _check_parameters(i, name, function.get("parameters"))
    return tools


def _check_parameters(i: int, name: str, schema: Any) -> None:
    where = f"the tools file: tool {i} ({name})"
    if not isinstance(schema, dict):
        raise ParamsError(f"{where}: its parameters are not a JSON Schema object")
    if problem := schema_problem(schema):
        raise ParamsError(f"{where}: its parameters are not a JSON Schema: {problem}")


def tool_choice(choice: str | None, tools: list[dict[str, Any]]) -> str | dict[str, Any]:
    """The `tool_choice` a request carries: `choice` (default `required`) as a keyword, or a function's name as
    `{"type": "function", "function": {"name": NAME}}`; ParamsError for a name not among `tools`."""
    choice = "required" if choice is None else choice.strip()
    if choice in CHOICES:
        return choice
    names = [t["function"]["name"] for t in tools]
    if choice not in names:
        listed = ", ".join(names)
        raise ParamsError(f"{choice!r} is neither {', '.join(CHOICES)} nor a function of the tools ({listed})")
    return {"type": "function", "function": {"name": choice}}


def request_tools(
    path: str | None, choice: str | None
) -> tuple[list[dict[str, Any]] | None, str | dict[str, Any] | None]:
    """The `tools` (read from the file at `path`) and `tool_choice` every request carries; (None, None) without a
    file. ParamsError in one line as `read_tools` and `tool_choice` raise it."""
    if path is None:
        return None, None
    tools = read_tools(path)
    return tools, tool_choice(choice, tools)


def tools_problem(endpoint: str, tools: str | None, choice: str | None, response_format: str | None) -> str | None:
    """Why a sweep's or a matrix's tool options do not go together, in one line naming them (tools on another
    endpoint than chat, a `choice` without tools or naming no function of them, tools beside a response format);
    None when they do."""
    if tools is None:
        return None if choice is None else "tool_choice: needs tools (a JSON file of function tools)"
    if endpoint != "chat":
        return f"tools: the {endpoint} endpoint has no tools; use endpoint chat"
    if response_format is not None:
        return "tools and response_format: give one of them, not both"
    try:
        request_tools(tools, choice)
    except ParamsError as exc:
        return f"tool_choice: {exc}"
    return None


def arguments_valid(tools: list[dict[str, Any]], name: str | None, arguments: str) -> bool:
    """Whether a call of function `name` with `arguments` (its whole JSON text) keeps to that function's
    `parameters`: JSON, valid under the schema. A function not among `tools` is invalid."""
    function = next((t["function"] for t in tools if t.get("function", {}).get("name") == name), None)
    if function is None:
        return False
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return False
    schema = function.get("parameters")
    if not isinstance(schema, dict):
        return True
    return valid_under(schema, value)
