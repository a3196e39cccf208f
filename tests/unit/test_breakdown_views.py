"""Where a rate sweep's time went: the stacked figure, the split tables, the cross-check line and the request picker,
on synthetic sweeps with and without the server's timing (tests/rate_folders.py) and on hand-made steps rows."""

from __future__ import annotations

import base64
import math
import shutil
from pathlib import Path

import nbformat
import pandas as pd
import pytest
from matplotlib.container import BarContainer
from matplotlib.figure import Figure

from tests.rate_folders import MISMATCH_MS, WIRE_MS, add_matrix_results, write_rate_sweep
from toolkit.jupyter.reports import markdown_report
from toolkit.reports import breakdown_views, rate_views
from toolkit.results.rate_runs import RateSweep, load_rate_sweep


@pytest.fixture(scope="module")
def timed(tmp_path_factory: pytest.TempPathFactory) -> RateSweep:
    """Steps at 1, 2, 4 and 8 req/s and searched 6.5 and 5.75 (capacity 5), the server's timing on every reply;
    step 3 (8 req/s) has two requests whose prefill is over the client's TTFT."""
    folder = tmp_path_factory.mktemp("timed") / "run"
    return load_rate_sweep(write_rate_sweep(folder, searched=(6.5, 5.75), server_timing=True, mismatched={3: 2}))


@pytest.fixture(scope="module")
def untimed(tmp_path_factory: pytest.TempPathFactory) -> RateSweep:
    """A sweep from before the breakdown: no timing columns in its records, none in its steps.jsonl."""
    return load_rate_sweep(write_rate_sweep(tmp_path_factory.mktemp("untimed") / "run"))


def row(step: int, rate: float, basis: str, parts: tuple, *, timed: int = 10, mismatches: int = 0) -> dict:
    """A steps.jsonl row's breakdown columns: `parts` (queue, prefill, wire, decode) under the basis's columns."""
    p50 = ("queue_p50_ms", "server_ttft_p50_ms", "wire_ttft_p50_ms", "decode_p50_ms")
    mean = ("queue_mean_ms", "server_ttft_mean_ms", "wire_ttft_mean_ms", "decode_mean_ms")
    out = {"step": step, "offered_rate": rate, "breakdown_basis": basis, **dict.fromkeys(p50 + mean),
           "timed_requests": timed if basis == "per-request" else 0, "timing_mismatches": mismatches}  # fmt: skip
    if basis:
        out |= dict(zip(p50 if basis == "per-request" else mean, parts, strict=True))
    return out


def bars(fig: Figure, panel: int) -> list[BarContainer]:
    return [c for c in fig.axes[panel].containers if isinstance(c, BarContainer)]


def heights(container: BarContainer) -> list[float]:
    return [patch.get_height() for patch in container.patches]


def ticks(fig: Figure, panel: int = 0) -> list[str]:
    return [t.get_text() for t in fig.axes[panel].get_xticklabels()]


def test_one_stacked_bar_per_step_in_order_of_offered_rate(timed: RateSweep) -> None:
    fig = breakdown_views.breakdown_figure(timed.steps)
    assert isinstance(fig, Figure)
    queue, prefill, wire = bars(fig, 0)
    (decode,) = bars(fig, 1)
    assert [len(c.patches) for c in (queue, prefill, wire, decode)] == [6, 6, 6, 6]  # one bar group per step
    assert ticks(fig, 0) == ticks(fig, 1) == ["1.00", "2.00", "4.00", "5.75", "6.50", "8.00"]
    ordered = timed.steps.sort_values("offered_rate")
    assert heights(queue) == pytest.approx(list(ordered["queue_p50_ms"]))
    assert heights(prefill) == pytest.approx(list(ordered["server_ttft_p50_ms"]))
    assert heights(wire) == pytest.approx([WIRE_MS] * 6)
    assert heights(decode) == pytest.approx(list(ordered["decode_p50_ms"]))
    assert [p.get_y() for p in prefill.patches] == pytest.approx(heights(queue))  # stacked on the queue
    assert [p.get_y() for p in wire.patches] == pytest.approx([q + p for q, p in zip(heights(queue), heights(prefill),
                                                                                         strict=True)])  # fmt: skip
    # Below capacity (5 req/s) nothing queues; past it the queue takes over the time to first token.
    assert heights(queue)[:3] == [0.0, 0.0, 0.0] and heights(queue)[-1] > 10 * heights(prefill)[-1]
    assert fig.texts[0].get_text() == "Where the time goes: medians per request over each step"  # suptitle
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == [
        "wire (outside the engine)", "prefill (the server's TTFT)", "queue (waiting to be scheduled)"]  # fmt: skip


def test_steps_without_a_breakdown_are_left_out_and_none_without_any(untimed: RateSweep) -> None:
    steps = pd.DataFrame([
        row(0, 1.0, "per-request", (0.0, 40.0, 5.0, 200.0)),
        row(1, 2.0, "", ()),  # the server gave no timing for this step
        row(2, 4.0, "per-request", (300.0, 45.0, 6.0, 260.0)),
    ])  # fmt: skip
    fig = breakdown_views.breakdown_figure(steps)
    assert fig is not None and ticks(fig) == ["1.00", "4.00"]
    assert [len(c.patches) for c in bars(fig, 0)] == [2, 2, 2]
    older = steps.drop(columns=[c for c in steps if c not in ("step", "offered_rate")])  # from before the breakdown
    assert breakdown_views.breakdown_figure(older) is None
    assert breakdown_views.breakdown_figure(steps.assign(breakdown_basis="")) is None
    assert breakdown_views.breakdown_figure(untimed.steps) is None
    assert breakdown_views.breakdown_table(untimed.steps).empty
    assert not breakdown_views.has_breakdown(untimed.steps) and breakdown_views.has_breakdown(steps)
    assert tuple(breakdown_views.breakdown_table(untimed.steps).columns) == breakdown_views.SPLIT_COLUMNS


def test_histogram_means_an_infinite_rate_and_a_negative_wire() -> None:
    steps = pd.DataFrame([
        row(0, math.inf, "histograms", (900.0, 60.0, 10.0, 500.0)),
        row(1, 2.0, "per-request", (1.0, 40.0, -3.0, 300.0), mismatches=6),
        row(2, 2.0, "per-request", (2.0, 45.0, 4.0, 310.0), mismatches=1),
    ])  # fmt: skip
    fig = breakdown_views.breakdown_figure(steps)
    assert fig is not None
    # Two steps at one rate are told apart by their step; the histograms' step is marked in a mixed figure.
    assert ticks(fig) == ["2.00\nstep 1", "2.00\nstep 2", "all at once†"]
    assert fig.texts[0].get_text() == "Where the time goes: medians per request (†: means of the server's histograms)"
    queue, _prefill, wire = bars(fig, 0)
    assert heights(queue) == [1.0, 2.0, 900.0] and heights(wire) == [0.0, 4.0, 10.0]  # the negative wire: drawn as 0
    (clipped,) = [line for line in fig.axes[0].get_lines() if line.get_label() == breakdown_views.WIRE_CLIPPED]
    assert clipped.get_xydata().tolist() == [[0.0, 41.0]]
    only = breakdown_views.breakdown_figure(steps.iloc[:1])
    assert only is not None and ticks(only) == ["all at once"]
    assert only.texts[0].get_text() == "Where the time goes: means of the server's histograms over each step"

    table = breakdown_views.breakdown_table(steps)
    assert table.to_dict("records")[0] == {
        "step": 1, "offered_rate": 2.0, "basis": "per-request", "queue_ms": 1.0, "prefill_ms": 40.0, "wire_ms": -3.0,
        "decode_ms": 300.0, "timed_requests": 10, "timing_mismatches": 6}  # fmt: skip
    assert list(table["step"]) == [1, 2, 0] and list(table["queue_ms"]) == [1.0, 2.0, 900.0]
    shown = breakdown_views.breakdown_shown(steps)
    assert tuple(shown.columns) == breakdown_views.SHOWN_COLUMNS
    assert list(shown.iloc[0]) == ["1", "2.00", "per request", "1.0 ms", "40.0 ms", "-3.0 ms", "300.0 ms", "10", "6"]
    assert list(shown.iloc[2])[:3] == ["0", "all at once", "histograms"] and shown.iloc[2]["Timed requests"] == "0"
    assert breakdown_views.mismatch_line(steps) == (
        "Timing cross-check: 7 requests' server timing exceeds the client's clock (6 in step 1, 2.00 req/s; 1 in "
        "step 2, 2.00 req/s): the server's queue and TTFT above the client's TTFT, or its span above the client's "
        "end-to-end, by more than 1 ms + 1%. A proxy rewriting timing, or a clock problem.")  # fmt: skip


def test_the_split_table_holds_the_steps_rows(timed: RateSweep) -> None:
    table = breakdown_views.breakdown_table(timed.steps)
    assert list(table["offered_rate"]) == [1.0, 2.0, 4.0, 5.75, 6.5, 8.0] and set(table["basis"]) == {"per-request"}
    by_step = timed.steps.set_index("step")
    for split in table.to_dict("records"):
        step = by_step.loc[split["step"]]
        assert (split["queue_ms"], split["prefill_ms"], split["wire_ms"], split["decode_ms"]) == (
            step["queue_p50_ms"],
            step["server_ttft_p50_ms"],
            step["wire_ttft_p50_ms"],
            step["decode_p50_ms"],
        )
        assert split["timed_requests"] == step["timed_requests"] > 0
    assert list(table["timing_mismatches"]) == [0, 0, 0, 0, 0, 2]
    assert breakdown_views.mismatch_line(timed.steps).startswith(
        "Timing cross-check: 2 requests' server timing exceeds the client's clock (2 in step 3, 8.00 req/s):"
    )


def test_the_requests_of_a_step_with_their_own_split(timed: RateSweep) -> None:
    picked = breakdown_views.request_breakdown(timed.records)  # None: the highest offered rate, 8 req/s (step 3)
    assert picked is not None and tuple(picked.columns) == breakdown_views.REQUEST_COLUMNS
    assert list(picked["step"]) == [3] * 5
    mine = timed.records[(timed.records["step"] == 3) & timed.records["error"].isna()].sort_values("scheduled_s")
    assert list(picked["request"]) == [0, 2, 5, 8, 10]  # spread over the 11 timed requests, first to last
    first = picked.iloc[0]  # a mismatched request: its wire below zero, as it is
    assert first["mismatch"] and first["wire (ms)"] == pytest.approx(-MISMATCH_MS)
    assert not picked["mismatch"].iloc[1:].any() and list(picked["wire (ms)"].iloc[1:]) == pytest.approx([WIRE_MS] * 4)
    late = mine[mine["request"] == 10].iloc[0]
    assert picked.iloc[-1]["TTFT (ms)"] == pytest.approx((late["first_token_s"] - late["sent_s"]) * 1e3, abs=0.05)
    assert picked.iloc[-1]["queue (ms)"] == pytest.approx(late["server_queue_ms"], abs=0.05)
    assert picked.iloc[-1]["end-to-end (ms)"] == pytest.approx((late["last_token_s"] - late["sent_s"]) * 1e3, abs=0.05)
    parts = picked.iloc[-1][["queue (ms)", "prefill (ms)", "wire (ms)"]].sum()
    assert parts == pytest.approx(picked.iloc[-1]["TTFT (ms)"], abs=0.2)
    assert picked["scheduled (s)"].is_monotonic_increasing and picked["scheduled (s)"].iloc[0] == 0.0

    two = breakdown_views.request_breakdown(timed.records, step=0, count=2)
    assert two is not None and list(two["step"]) == [0, 0] and list(two["request"]) == [0, 11]
    every = breakdown_views.request_breakdown(timed.records, step=1, count=100)
    assert every is not None and len(every) == 12  # all of them, once each
    with pytest.raises(ValueError, match=r"^step 9: not a step of this sweep \(its steps: 0, 1, 2, 3, 4, 5\)$"):
        breakdown_views.request_breakdown(timed.records, step=9)
    with pytest.raises(ValueError, match="count: 0"):
        breakdown_views.request_breakdown(timed.records, count=0)


def test_no_request_picked_without_the_servers_timing(untimed: RateSweep) -> None:
    assert breakdown_views.request_breakdown(untimed.records) is None
    assert breakdown_views.request_breakdown(untimed.records, step=2) is None
    raw = untimed.records.drop(columns=["server_queue_ms"])  # records as another tool wrote them
    assert breakdown_views.request_breakdown(raw) is None


def test_the_reports_section_only_with_a_breakdown(timed: RateSweep, untimed: RateSweep) -> None:
    shown = rate_views.breakdown(timed)
    assert shown is not None
    assert shown.data.startswith('<h3 id="where-the-time-goes">Where the time goes</h3>')
    assert "1,320.0 ms" in shown.data and "Timing cross-check: 2 requests" in shown.data
    assert rate_views.breakdown(untimed) is None and rate_views.breakdown(None) is None
    text = breakdown_views.breakdown_markdown(timed.steps, {"rate-breakdown": "rate-breakdown.png"})
    assert text.startswith("### Where the time goes\n\n" + breakdown_views.CAPTION)
    assert "| 3 | 8.00 | per request | 1,320.0 ms | 50.0 ms | 5.0 ms |" in text
    assert "\n\nTiming cross-check: 2 requests" in text
    assert text.rstrip().endswith("![rate-breakdown](rate-breakdown.png)")
    assert breakdown_views.breakdown_markdown(untimed.steps, {"rate-breakdown": "x.png"}) == ""


def test_report_md_places_the_section_and_its_figure(timed: RateSweep, tmp_path: Path) -> None:
    """markdown_report files the `figure-rate-breakdown` image under the section, not with the sweep's figures."""
    folder = tmp_path / "run"
    shutil.copytree(timed.folder, folder)
    add_matrix_results(folder)
    png = base64.b64encode(b"\x89PNG-breakdown").decode()
    cells = [nbformat.v4.new_code_cell(metadata={"tags": [f"figure-{key}"]}, outputs=[nbformat.v4.new_output(
        "display_data", data={"image/png": png})]) for key in ("rate-knee", "rate-breakdown")]  # fmt: skip
    text = markdown_report(folder, nbformat.v4.new_notebook(cells=cells))
    rates = text[text.index("## Open-loop rates") :]
    section = rates[rates.index("### Where the time goes") :]
    assert rates.index("![rate-knee](rate-knee.png)") < rates.index("### Where the time goes")
    assert "![rate-breakdown](rate-breakdown.png)" in section
    assert (folder / "rate-breakdown.png").read_bytes() == b"\x89PNG-breakdown"
