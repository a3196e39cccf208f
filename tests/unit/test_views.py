"""What the notebooks display: Stylers with the report's display strings and status classes, HTML text blocks."""

from __future__ import annotations

import html

import pandas as pd
from IPython.display import HTML, Markdown
from pandas.io.formats.style import Styler

from toolkit.base.schema import COLUMNS, Measurement
from toolkit.reports import views
from toolkit.reports.tables import DECODE_CAPTION, STATUS_NOTES, TTFT_NOTE, decode_matrix

CELLS = [
    Measurement("prefill", 8192, "8K", 1, "Valid", total_tok_s=17_731.6, ttft_ms=462.0, prompt_tokens=8190),
    Measurement("decode", 8192, "8K", 1, "Valid", 24.3, 25.5, 136.0, 39.2, 1.0, 0, 728, 29.9),
    Measurement("decode", 8192, "8K", 2, "Requests queued", 47.9, 25.0, 258.0),
    Measurement("decode", 32768, "32K", 1, "Error", error="HTTP 500 <b>"),
    Measurement("decode", 32768, "32K", 2, "Over capacity", kv_budget_tokens=40_000),
]


def frame(measurements: list[Measurement]) -> pd.DataFrame:
    return pd.DataFrame([m.to_dict() for m in measurements], columns=list(COLUMNS))


def test_decode_matrix_styler_holds_the_report_strings_and_status_classes() -> None:
    df = frame(CELLS)
    styler = views.decode_matrix(df)
    assert isinstance(styler, Styler)
    assert styler.data.set_index("Context").equals(decode_matrix(df).rename_axis(columns=None))
    page = styler.to_html()
    assert f"<caption>{DECODE_CAPTION}</caption>" in page and 'class="speed-matrix"' in page
    for css, text in [("status-valid", "24.3 · 136 ms TTFT"), ("status-queued", "47.9 · Requests queued · 258 ms TTFT"),
                      ("status-error", "Error"), ("status-over", "Over capacity")]:  # fmt: skip
        assert f'{css}" >{text}</td>' in page, css
    assert "td.status-queued {\n  background: #fff4d6;\n}" in page
    assert ">8K</td>" in page and "<th" not in page.split("<tbody>")[1]  # no index column


def test_cells_and_headers_are_escaped() -> None:
    table = pd.DataFrame({"<b>run</b>": ["a & <i>b</i>"]})
    page = views.table(table, caption="x < y").to_html()
    assert "&lt;b&gt;run&lt;/b&gt;" in page and "a &amp; &lt;i&gt;b&lt;/i&gt;" in page and "x &lt; y" in page
    extras = views.extras(frame(CELLS)).to_html()
    assert "HTTP 500 &lt;b&gt;" in extras


def test_text_blocks_and_empty_sections() -> None:
    df = frame(CELLS)
    notes = views.notes(df, "decode")
    assert isinstance(notes, HTML)
    assert html.escape(STATUS_NOTES["Over capacity"]) in notes.data
    assert notes.data.endswith(f'<p class="footnote">{html.escape(TTFT_NOTE)}</p>')
    assert TTFT_NOTE not in views.notes(df, ttft_note=False).data
    header = views.header(df, {"title": "A <b>", "engine": {"Engine": "vllm"}}).data
    assert "<h1>" not in header and "<p>A &lt;b&gt;</p>" in header and "<h2>Engine</h2>" in header
    launch = views.header(df, {"launch_command": "vllm serve m --api-key <redacted>"}).data
    assert "<pre><code>vllm serve m --api-key &lt;redacted&gt;</code></pre>" in launch
    decode_only = frame(CELLS[1:])
    assert isinstance(views.prefill(decode_only), Markdown) and isinstance(views.prefill(df), Styler)
    assert isinstance(views.decode_matrix(frame(CELLS[:1])), Markdown)
    assert isinstance(views.extras(frame(CELLS[1:3])), Markdown)
    assert list(views.all_measurements(df).data.columns)[:4] == ["Phase", "Context", "Requests at once", "Status"]
