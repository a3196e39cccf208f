"""Text from a server made safe to print and store: its control characters removed (an escape sequence in a model
id or an error body would otherwise drive the terminal that prints it, or the viewer of a file that holds it)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # C0 but tab and newline, DEL, C1


def printable(text: str) -> str:
    """`text` without control characters (tab and newline kept)."""
    return _CONTROL.sub("", text)


def map_strings(value: Any, change: Callable[[str], str]) -> Any:
    """`value` (JSON-like: dicts, lists, strings, numbers) with `change` applied to every string, keys included."""
    if isinstance(value, str):
        return change(value)
    if isinstance(value, dict):
        return {map_strings(k, change): map_strings(v, change) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [map_strings(v, change) for v in value]
    return value


def printable_tree(value: Any) -> Any:
    """`value` (JSON-like) with every string, keys included, `printable`."""
    return map_strings(value, printable)
