"""Text from outside the toolkit made inert in a Markdown report: a server's model id and version, a params file's
title, labels and hardware fields, an error a server sent. Markdown passes raw HTML through, so `<img onerror=…>`
in a model id would run in whatever renders report.md; control characters would reach a terminal that prints it."""

from __future__ import annotations

import html
from typing import Any

from toolkit.base.text import printable


def inert(value: Any) -> str:
    """`value` as text with its control characters removed and `<`, `>` and `&` escaped (shown as typed)."""
    return html.escape(printable(str(value)), quote=False)
