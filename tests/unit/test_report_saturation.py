"""Cells where the load generator fell behind are flagged in the matrix and explained in a footnote."""

from __future__ import annotations

from toolkit.base.schema import Measurement
from toolkit.reports.tables import SATURATED_MARK, SATURATED_NOTE, decode_matrix, extras_table, footnotes
from toolkit.results.store import to_dataframe


def _cell(n: int, saturated: bool | None) -> Measurement:
    return Measurement(phase="decode", context_tokens=8192, context="8K", concurrency=n, status="Valid",
                       total_tok_s=100.0 * n, ttft_ms=50.0, client_saturated=saturated,
                       server_output_tokens=1010, output_tokens=1000, client_tokens_server_interval=1010)  # fmt: skip


def test_saturated_cell_is_marked_and_footnoted() -> None:
    frame = to_dataframe([_cell(1, False), _cell(2, True)])
    matrix = decode_matrix(frame)
    assert SATURATED_MARK not in matrix.loc["8K", 1]
    assert matrix.loc["8K", 2] == f"200.0 · 50 ms TTFT · {SATURATED_MARK}"
    assert SATURATED_NOTE in footnotes(frame)


def test_no_footnote_without_saturation() -> None:
    frame = to_dataframe([_cell(1, False), _cell(2, None)])
    assert SATURATED_NOTE not in footnotes(frame)


def test_token_check_compares_the_same_interval() -> None:
    extras = extras_table(to_dataframe([_cell(1, False)]))
    assert extras.loc[0, "Server ÷ client tokens"] == "100.0%"


def test_client_side_statuses_are_footnoted() -> None:
    from dataclasses import replace

    from toolkit.reports.tables import CLIENT_BASIS_NOTE

    server = to_dataframe([replace(_cell(1, False), status_basis="server")])
    client = to_dataframe([replace(_cell(1, False), status_basis="client")])
    assert CLIENT_BASIS_NOTE not in footnotes(server)
    assert CLIENT_BASIS_NOTE in footnotes(client)


def test_disturbed_cell_is_marked_and_footnoted() -> None:
    from dataclasses import replace

    from toolkit.reports.tables import DISTURBED_MARK, DISTURBED_NOTE

    clean = replace(_cell(1, False), attempts=1)
    paused = replace(_cell(2, False), disturbed="no token for 3.9 s", attempts=3, longest_silence_s=3.9)
    frame = to_dataframe([clean, paused])
    matrix = decode_matrix(frame)
    assert matrix.loc["8K", 2] == f"200.0 · 50 ms TTFT · {DISTURBED_MARK}"
    assert DISTURBED_MARK not in matrix.loc["8K", 1]
    assert DISTURBED_NOTE in footnotes(frame)
    assert DISTURBED_NOTE not in footnotes(to_dataframe([clean]))
    extras = extras_table(frame)
    assert list(extras["Disturbed"]) == ["—", "no token for 3.9 s"]
    assert list(extras["Attempts"]) == ["1", "3"]


def test_a_disturbed_cell_is_not_also_called_saturated() -> None:
    from dataclasses import replace

    from toolkit.reports.tables import DISTURBED_MARK

    paused = replace(_cell(2, True), disturbed="client event loop blocked 900 ms")
    frame = to_dataframe([paused])
    assert decode_matrix(frame).loc["8K", 2] == f"200.0 · 50 ms TTFT · {DISTURBED_MARK}"
    assert SATURATED_NOTE not in footnotes(frame)


def test_a_disturbed_prefill_is_marked_in_the_prefill_table_and_footnoted() -> None:
    from toolkit.reports.tables import DISTURBED_MARK, DISTURBED_NOTE, prefill_table

    def prefill(ctx: int, label: str, disturbed: str | None) -> Measurement:
        return Measurement(phase="prefill", context_tokens=ctx, context=label, concurrency=1, status="Valid",
                           total_tok_s=17_700.0, ttft_ms=462.0, disturbed=disturbed,
                           attempts=3 if disturbed else 1)  # fmt: skip

    frame = to_dataframe([prefill(8192, "8K", None), prefill(16384, "16K", "client event loop blocked 2,100 ms")])
    assert prefill_table(frame).values.tolist() == [
        ["8K", "17.7K", "462 ms"],
        ["16K", f"17.7K · {DISTURBED_MARK}", "462 ms"],
    ]
    assert DISTURBED_NOTE in footnotes(frame)
    assert DISTURBED_NOTE not in footnotes(frame.iloc[:1])


def test_a_disturbed_cell_is_greyed_in_the_html_matrix_and_counted_in_the_summary_line() -> None:
    from dataclasses import replace

    from toolkit.reports import views
    from toolkit.reports.tables import DISTURBED_MARK, report_markdown, summary_line

    paused = replace(_cell(2, False), disturbed="no token for 2.3 s", attempts=3)
    queued = replace(_cell(4, False), status="Requests queued", disturbed="no token for 1.2 s", attempts=3)
    frame = to_dataframe([_cell(1, False), paused, queued])
    page = views.decode_matrix(frame).to_html()
    assert 'status-valid" >100.0 · 50 ms TTFT</td>' in page
    assert f'status-disturbed" >200.0 · 50 ms TTFT · {DISTURBED_MARK}</td>' in page and "td.status-disturbed" in page
    assert f'status-disturbed" >400.0 · Requests queued · 50 ms TTFT · {DISTURBED_MARK}</td>' in page
    assert summary_line(frame) == "1 context (8K) × 3 concurrency levels (1–4) · 2 of 3 measurements disturbed"
    assert summary_line(frame.iloc[:1]) == "1 context (8K) × 1 concurrency level (1)"
    assert "\n\n1 context (8K) × 3 concurrency levels (1–4) · 2 of 3 measurements disturbed\n\n" in report_markdown(
        frame, {})  # fmt: skip
