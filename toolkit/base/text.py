"""Text from a server made safe to print and store: its control characters removed (an escape sequence in a model
id or an error body would otherwise drive the terminal that prints it, or the viewer of a file that holds it)."""

from __future__ import annotations

import re
from typing import Any

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # C0 but tab and newline, DEL, C1


def printable(text: str) -> str:
    """`text` without control characters (tab and newline kept)."""
    return _CONTROL.sub("", text)


def printable_tree(value: Any) -> Any:
    """`value` (JSON-like: dicts, lists, strings, numbers) with every string, keys included, `printable`."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable_tree(k): printable_tree(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [printable_tree(v) for v in value]
    return value
