"""Text from outside the toolkit made inert in a Markdown report: a server's model id and version, a params file's
title, labels and hardware fields, an error a server sent. Markdown passes raw HTML through, so `<img onerror=…>`
in a model id would run in whatever renders report.md, and an image in a title would be fetched from wherever it
names when the report is viewed; control characters would reach a terminal that prints it."""

from __future__ import annotations

import html
from typing import Any

from toolkit.base.text import printable


def inert(value: Any) -> str:
    """`value` as text with its control characters removed, `<`, `>` and `&` escaped, and an image's `![`
    backslashed (a viewer would fetch `![x](http://…)` unasked), shown as typed. Links stay: the toolkit passes
    its own links through here (the batch index), and a link fetches nothing until it is followed."""
    return html.escape(printable(str(value)), quote=False).replace("![", "!\\[")
