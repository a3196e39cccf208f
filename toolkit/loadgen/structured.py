"""Structured output: the `response_format` a request carries, and whether a reply's text keeps to it.

`json_object` asks for any JSON object; `json_schema:FILE` for JSON that matches the JSON Schema in FILE (a JSON
file), sent as OpenAI's `{"type": "json_schema", "json_schema": {"name": ..., "schema": ...}}`, which vLLM 0.32 takes
on chat and on completions alike (vllm/entrypoints/openai/completion/protocol.py: `response_format`). A bad spec, a
file that cannot be read, is not JSON or is not a JSON Schema is one line (ParamsError), before anything is sent.

A reply is checked once, after its stream ended (never per chunk): its whole text parsed as JSON (orjson), then
validated against the schema (jsonschema), or for `json_object` found to be an object. A reply cut by `max_tokens`
is usually not JSON: it counts as invalid, as it would for whoever asked for it.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import orjson

from toolkit.base.errors import ParamsError

KINDS = ("json_object", "json_schema")
MAX_SCHEMA_BYTES = 1024 * 1024  # a schema file larger than this is refused: a request carries it every time
SPEC_HELP = "json_object, or json_schema:FILE (a JSON Schema in a JSON file)"


def read_response_format(spec: str) -> dict[str, Any]:
    """The `response_format` a request carries for `spec` ("json_object" or "json_schema:FILE"); ParamsError in one
    line (without the parameter's name) for an unknown kind, a file that cannot be read, is not JSON, or is not a
    JSON Schema."""
    kind, sep, where = spec.strip().partition(":")
    if kind == "json_object" and not sep:
        return {"type": "json_object"}
    if kind != "json_schema" or not where.strip():
        raise ParamsError(f"unknown kind; allowed: {SPEC_HELP}")
    path = Path(where.strip())
    schema = read_json_file(path, "the schema file", MAX_SCHEMA_BYTES)
    check_schema(schema)
    name = re.sub(r"[^A-Za-z0-9_-]", "_", path.stem)[:64] or "schema"  # OpenAI's rule for a schema's name
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}


def read_json_file(path: Path, what: str, max_bytes: int) -> Any:
    """The JSON value in the file at `path` (`what` names it in errors: "the schema file"); ParamsError in one line
    for a file that cannot be read, is over `max_bytes`, or is not JSON."""
    try:
        with path.open("rb") as file:
            data = file.read(max_bytes + 1)
    except OSError as exc:
        raise ParamsError(f"cannot read {what}: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise ParamsError(f"{what} is over {max_bytes:,} bytes")
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ParamsError(f"{what} is not JSON: {' '.join(str(exc).split())}") from None


def schema_problem(schema: dict[str, Any]) -> str | None:
    """Why `schema` is not valid under its own metaschema, in one line (and where), else None."""
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import validator_for

    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        at = "/".join(str(p) for p in exc.path)
        text = " ".join(exc.message.split())
        text = text if len(text) <= 200 else text[:199] + "…"
        return text + (f" (at {at})" if at else "")
    return None


def check_schema(schema: Any) -> None:
    """ParamsError in one line when `schema` is not a JSON Schema (an object, valid under its own metaschema)."""
    if not isinstance(schema, dict):
        raise ParamsError(f"the schema file is not a JSON Schema: it holds a {type(schema).__name__}, not an object")
    if problem := schema_problem(schema):
        raise ParamsError(f"the schema file is not a JSON Schema: {problem}")


def valid_under(schema: dict[str, Any], value: Any) -> bool:
    """Whether `value` is valid under `schema` (its validator built once per schema)."""
    return bool(_validator(orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)).is_valid(value))


@functools.lru_cache(maxsize=64)
def _validator(schema_json: bytes) -> Any:
    from jsonschema.validators import validator_for

    schema = orjson.loads(schema_json)
    return validator_for(schema)(schema)


def reply_valid(response_format: dict[str, Any], text: str) -> bool:
    """Whether a whole reply's `text` keeps to `response_format`: JSON, and an object (json_object) or valid
    under the schema (json_schema). Any other type keeps to it when it parses as JSON."""
    return reply_problem(response_format, text) is None


def reply_problem(response_format: dict[str, Any], text: str) -> str | None:
    """Why a whole reply's `text` breaks `response_format` in a few words (``not JSON: unexpected end of data``,
    ``not an object``, the schema's first error); None when it keeps to it (`reply_valid`)."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        return f"not JSON: {str(exc).split(':')[0]}"
    kind = response_format.get("type")
    if kind == "json_object":
        return None if isinstance(value, dict) else "not an object"
    if kind == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema")
        if not isinstance(schema, dict) or valid_under(schema, value):
            return None
        error = next(iter(_validator(orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)).iter_errors(value)), None)
        return "not valid under the schema" + ("" if error is None else f": {error.message}")
    return None
