"""A document validated against its model, its first problem as one line: where (file and line), the field, the
value as read and what it should be."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from toolkit.base.errors import ResultsError
from toolkit.results.json_text import line_of

M = TypeVar("M", bound=BaseModel)
Loc = tuple[str | int, ...]
_SHOWN_CHARS = 40
_SAID = {  # pydantic's error types, in words
    "missing": "missing",
    "model_type": "should be an object",
    "dict_type": "should be an object",
    "model_attributes_type": "should be an object",
    "list_type": "should be a list",
    "float_type": "should be a number",
    "int_type": "should be a whole number",
    "bool_type": "should be true or false",
    "string_type": "should be a text",
    "finite_number": "should be a finite number",
}


def validated(
    model: type[M],
    value: Any,
    where: Callable[[Loc], str],
    error: type[ResultsError] = ResultsError,
    within: Loc = (),
) -> M:
    """`value` (found at `within` in its file) as `model`; else `error`: ``WHERE: FIELD: VALUE should be ...``,
    `where(the field's loc)` its place."""
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        loc, text = first_problem(exc, within)
        raise error(f"{where(loc)}: {text}") from None


def first_problem(exc: ValidationError, within: Loc = ()) -> tuple[Loc, str]:
    """The first error's location (below `within`: where the value validated lies) and ``FIELD: VALUE should be
    ...`` (``FIELD: missing``)."""
    detail = exc.errors(include_url=False, include_context=True)[0]
    loc = (*within, *detail["loc"])
    said = _SAID.get(detail["type"])
    if said is None:
        message = str(detail["msg"]).removeprefix("Value error, ").removeprefix("Input ")
        said = message[:1].lower() + message[1:]
    name = field_name(loc) or "the document"
    return loc, f"{name}: {said}" if detail["type"] == "missing" else f"{name}: {shown(detail['input'])} {said}"


def field_name(loc: Sequence[str | int]) -> str:
    """``("ttfts", 3)`` as ``ttfts[3]``, ``("a", "b")`` as ``a.b``."""
    name = ""
    for part in loc:
        name += f"[{part}]" if isinstance(part, int) else f".{part}" if name else str(part)
    return name


def shown(value: Any) -> str:
    """A value as read, short and on one line: JSON's spelling for scalars, the kind for a list or an object."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        small = len(value) <= 4 and all(item is None or isinstance(item, bool | int | float | str) for item in value)
        text = f"[{', '.join(shown(item) for item in value)}]" if small else ""
        return text if small and len(text) <= _SHOWN_CHARS else f"a list of {len(value)}"
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, int) and abs(value) >= 10**_SHOWN_CHARS:
        return f"an integer of more than {_SHOWN_CHARS} digits"
    text = repr(value) if isinstance(value, str) else str(value)
    text = " ".join(text.split())
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 1] + "…"


def document_where(path: Path) -> Callable[[Loc], str]:
    """``FILE:LINE`` of a field of the JSON document at `path` (its text is read again only for an error)."""

    def where(loc: Loc) -> str:
        try:
            return f"{path}:{line_of(path.read_text(encoding='utf-8', errors='replace'), loc)}"
        except OSError:
            return str(path)

    return where


def line_where(path: Path, line: int) -> Callable[[Loc], str]:
    """``FILE:LINE`` of a JSONL line."""
    return lambda _: f"{path}:{line}"
