"""report.md, compare.md and index.md carry no raw HTML and no control character from text the toolkit did not write
(a server's model id and version, a params file's title, labels and hardware fields, a server's error)."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from tests.unit.test_batch import RESULTS
from tests.unit.test_compare import A, B
from toolkit.base.schema import COLUMNS
from toolkit.batch.index import headline, index_markdown
from toolkit.reports.compare import compare_markdown
from toolkit.reports.markdown_text import inert
from toolkit.reports.tables import report_markdown

HOSTILE = "<img src=x onerror=alert(1)>\x1b[31m"


def test_inert_escapes_html_and_drops_control_characters() -> None:
    assert inert(HOSTILE) == "&lt;img src=x onerror=alert(1)&gt;[31m"
    assert inert("a & b\tc\nd") == "a &amp; b\tc\nd"  # tab and newline are text, not control


def test_an_image_in_outside_text_is_not_fetched_when_the_report_is_viewed() -> None:
    assert inert("![x](http://evil/p.png) [a link](http://b)") == "!\\[x](http://evil/p.png) [a link](http://b)"
    info = {"title": "![x](http://evil/p.png)", "engine": {"Engine": "![y](http://evil/q.png)"}}
    report = report_markdown(pd.DataFrame([m.to_dict() for m in A], columns=list(COLUMNS)), info)
    assert "![x](" not in report and "![y](" not in report and "!\\[x](http://evil/p.png)" in report


def test_a_report_whose_every_text_field_is_hostile_has_no_raw_tag() -> None:
    cells = [replace(m, context=HOSTILE, error=HOSTILE) for m in A]
    frame = pd.DataFrame([m.to_dict() for m in cells], columns=list(COLUMNS))
    info = {"title": HOSTILE, "summary": HOSTILE, "hardware": {HOSTILE: HOSTILE}, "run": {"Served model": HOSTILE},
            "engine": {"Engine": HOSTILE, "Version": HOSTILE}, "launch_command": f"vllm serve {HOSTILE}"}  # fmt: skip
    report = report_markdown(frame, info)
    fenced = report.split("## Launch command", 1)[1].split("```", 2)[1]  # code, shown as it is: inert in a fence
    outside = report.replace(fenced, "")
    assert "<img" not in outside and "\x1b" not in outside
    assert outside.count("&lt;img src=x onerror=alert(1)&gt;") >= 6


def test_compare_and_index_of_hostile_labels_have_no_raw_tag() -> None:
    rows = [{"run": label, **m.to_dict()} for label, ms in {HOSTILE: A, f"B{HOSTILE}": B}.items() for m in ms]
    md = compare_markdown(pd.DataFrame(rows, columns=["run", *COLUMNS]))
    assert "<img" not in md and "\x1b" not in md and "## B&lt;img" in md
    variants = [{"label": HOSTILE, "state": "failed", "error": HOSTILE, "headline": headline(RESULTS), "report": True,
                 "duration_s": 1.0}]  # fmt: skip
    index = index_markdown(variants, {"state": "failed", "error": HOSTILE}, HOSTILE)
    assert "<img" not in index and "\x1b" not in index and index.count("&lt;img") >= 4
