"""Text from outside the toolkit made inert in a Markdown report: a server's model id and version, a params file's
title, labels and hardware fields, an error a server sent. Markdown passes raw HTML through, so `<img onerror=…>`
in a model id would run in whatever renders report.md; control characters would reach a terminal that prints it."""

from __future__ import annotations

import html
import re
from typing import Any

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def inert(value: Any) -> str:
    """`value` as text with its control characters removed and `<`, `>` and `&` escaped (shown as typed)."""
    return html.escape(_CONTROL.sub("", str(value)), quote=False)
