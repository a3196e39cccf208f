"""A rate sweep's table, lines and figures on a synthetic sweep, and the re-judging sliders."""

from __future__ import annotations

import math
import sys
import types
from pathlib import Path

import ipywidgets as widgets
import numpy as np
import pandas as pd
import pytest
from IPython.display import Markdown
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from tests.rate_folders import write_rate_sweep
from toolkit.method.goodput import ServiceLevel, judge_steps, request_latencies
from toolkit.reports import rate_plots, rate_tables, rate_views
from toolkit.reports.number_format import format_ms
from toolkit.results.rate_runs import RateSweep, load_rate_sweep


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> RateSweep:
    folder = tmp_path_factory.mktemp("rates") / "run"
    return load_rate_sweep(write_rate_sweep(folder, searched=(6.5, 5.75), lag_flagged=(2,)))


def lines(fig: Figure, panel: int = 0) -> dict[str, list[list[float]]]:
    return {line.get_label(): line.get_xydata().tolist() for line in fig.axes[panel].get_lines()}


def test_the_steps_table_formats_every_step_like_the_report_tables(sweep: RateSweep) -> None:
    table = rate_tables.steps_table(sweep.steps)
    assert tuple(table.columns) == rate_tables.STEP_COLUMNS and len(table) == 6
    over = sweep.steps.iloc[3]
    row = dict(zip(table.columns, table.iloc[3], strict=True))
    assert row["Offered req/s"] == "8.00" and row["Achieved req/s"] == f"{over['achieved_rate']:.2f}"
    assert (row["Completed"], row["Failed"]) == ("11", "1")
    assert row["TTFT p99"] == "—"  # 12 requests: no p99
    # With its 95 % distribution-free bounds (11 completed: ranks 2 and 10 of 11)
    assert row["TPOT p50"] == (f"{over['tpot_p50_ms']:.1f} ms [{over['tpot_p50_low_ms']:.1f}, "
                               f"{over['tpot_p50_high_ms']:.1f}]")  # fmt: skip
    assert over["tpot_p50_low_ms"] <= over["tpot_p50_ms"] <= over["tpot_p50_high_ms"]
    unbounded = dict(over) | {"tpot_p99_ms": 31.0, "tpot_p99_low_ms": 30.5, "tpot_p99_high_ms": None}
    assert rate_tables.steps_table(pd.DataFrame([unbounded]))["TPOT p99"].iloc[0] == "31.0 ms [30.5, unbounded]"
    # TTFT from the scheduled arrival first, the send's beside it; an imported peer's step has the send's alone
    bounds = f"[{format_ms(over['ttft_sched_p50_low_ms'])[:-3]}, {format_ms(over['ttft_sched_p50_high_ms'])[:-3]}]"
    assert row["TTFT p50"] == (f"{format_ms(over['ttft_sched_p50_ms'])} {bounds} ({format_ms(over['ttft_p50_ms'])} "
                               "from send)")  # fmt: skip
    imported = rate_tables.steps_table(sweep.steps.drop(columns=["ttft_sched_p50_ms", "ttft_sched_p99_ms"]))
    assert imported["TTFT p50"].iloc[3] == f"— ({format_ms(over['ttft_p50_ms'])} from send)"
    assert over["ttft_p50_ms"] > 0 and math.isnan(over["ttft_p99_ms"])
    assert row["Meeting SLO"] == f"{over['slo_fraction'] * 100:.1f}%" and row["Waiting mean / max"] == "4.5 / 12"
    assert table.iloc[0]["Meeting SLO"] == "100.0% ?"  # 12 of 12 met the level: at least 0.74, undecided for 0.9
    assert (
        rate_tables.verdict_mark({"slo_verdict": "meets"}) == " ✓"
        and rate_tables.verdict_mark({"slo_met": True}) == " ✓"
    )
    assert list(table["Notes"]) == ["", "", "lag flagged", "", "searched", "searched"]
    assert rate_tables.step_notes(sweep.steps) == [rate_tables.LAG_NOTE]
    assert rate_tables.step_notes(sweep.steps.assign(lag_flagged=False)) == []
    invalid = sweep.steps.assign(lag_flagged=False, invalid_reply=[None] * 5 + ["not JSON; the reply began '<img>'"])
    assert rate_tables.step_notes(invalid) == [
        "Step 5, the first reply that broke the response format: not JSON; the reply began '&lt;img&gt;'."]  # fmt: skip


def test_a_step_undecided_by_requests_that_moved_together_says_so_and_what_they_were_worth(sweep: RateSweep) -> None:
    """64 steady requests are enough to show 90 % (36 needed) when independent; with a design effect of 6.4 they
    are worth 10, so the step is undecided, and a note says why. Too few requests, or a decided step: no note."""
    row = {"step": 2, "offered_rate": 48.0, "slo_verdict": "undecided", "steady_requests": 64,
           "slo_fraction_deff": 6.4, "slo_fraction": 1.0}  # fmt: skip
    assert rate_tables.correlated_text(row, 0.9) == (
        "Step 2 (48.00 req/s) is undecided although its 64 steady requests are enough to show 90 % with 100.0% of "
        "them meeting the level: their latencies moved together (design effect 6.4, as when a queue builds), so they "
        "count as 10.0 independent requests, fewer than the 36 it takes; a longer step would decide it."
    )
    all_at_once = rate_tables.correlated_text({**row, "offered_rate": math.inf}, 0.9)
    assert all_at_once.startswith("Step 2 (all at once) is undecided although its 64 steady requests")
    # decided, too few, no design effect or none recorded, or worth enough (64 / 1.5 = 42.7): no note
    others = ({"slo_verdict": "meets"}, {"steady_requests": 30}, {"slo_fraction_deff": 1.0},
              {"slo_fraction_deff": None}, {"slo_fraction_deff": 1.5})  # fmt: skip
    for other in others:
        assert rate_tables.correlated_text({**row, **other}, 0.9) == ""
    steps = pd.DataFrame([{**row, "step": 3}, {**row, "slo_verdict": "meets"}])
    assert rate_tables.step_notes(steps, 0.9) == [rate_tables.correlated_text({**row, "step": 3}, 0.9)]
    assert rate_tables.step_notes(steps) == []  # without the level's target, nothing to say
    first = sweep.steps["step"] == sweep.steps["step"].min()  # 12 of 12 met: undecided, too few to show 90 %
    assert "moved together" not in rate_tables.rate_markdown(sweep.steps, sweep.level)
    correlated = sweep.steps.assign(steady_requests=sweep.steps["steady_requests"].where(~first, 64),
                                    slo_fraction_deff=sweep.steps["slo_fraction_deff"].where(~first, 6.4))  # fmt: skip
    shown = rate_tables.rate_markdown(correlated, sweep.level)
    assert "Step 0 (" in shown and "count as 10.0 independent requests, fewer than the 36 it takes" in shown


def test_the_shares_of_valid_replies_and_tool_calls_are_columns_only_when_a_step_has_them(sweep: RateSweep) -> None:
    """A response format's valid share, tools' called and valid-arguments shares: before the notes, "—" for a step
    without one; a sweep without them keeps the plain columns."""
    assert "schema_valid_share" not in sweep.steps or sweep.steps["schema_valid_share"].isna().all()
    shares = [1.0, 0.5, None, 0.25, 0.0, 1.0]
    structured = rate_tables.steps_table(sweep.steps.assign(schema_valid_share=shares))
    assert tuple(structured.columns) == (*rate_tables.STEP_COLUMNS[:-1], "Valid replies", "Notes")
    assert list(structured["Valid replies"]) == ["100.0%", "50.0%", "—", "25.0%", "0.0%", "100.0%"]
    tools = rate_tables.steps_table(sweep.steps.assign(tool_called_share=1.0, tool_args_valid_share=0.75))
    assert tuple(tools.columns)[-3:] == ("Tool called", "Tool arguments valid", "Notes")
    assert set(tools["Tool called"]) == {"100.0%"} and set(tools["Tool arguments valid"]) == {"75.0%"}
    markdown = rate_tables.rate_markdown(sweep.steps.assign(tool_called_share=1.0), sweep.level)
    assert "| Tool called |" in markdown and "Tool arguments valid" not in markdown


def test_rates_and_levels_as_text() -> None:
    assert [rate_tables.format_rate(v) for v in (7.5, 1234.567, math.inf, math.nan, None)] == [
        "7.50", "1,234.57", "all at once", "—", "—"]  # fmt: skip
    assert rate_tables.level_text(ServiceLevel(ttft_ms=200, e2e_ms=5000, target=0.9)) == (
        "TTFT ≤ 200 ms · end-to-end ≤ 5000 ms, for 90 % of requests"
    )
    assert rate_tables.level_text(ServiceLevel()).startswith("no latency limit")


def test_the_highest_rate_from_the_search_or_from_the_listed_steps(sweep: RateSweep) -> None:
    assert rate_tables.search_line(sweep.steps, sweep.search, 0.1) == (
        "Highest rate meeting the service level: 4.00 req/s (searched to 10 %: meets at 4.00 req/s, "
        "fails at 5.75 req/s; the highest rate meeting it lies between, each verdict at 95 %).")  # fmt: skip
    assert rate_tables.search_line(sweep.steps) == (
        "Highest rate meeting the service level: 4.00 req/s; 5.75 req/s failed it."
    )
    everything = sweep.steps.assign(slo_met=True)
    assert rate_tables.search_line(everything).startswith("Every step met the service level: the highest, 8.00")
    assert rate_tables.search_line(sweep.steps.assign(slo_met=False)) == (
        "No step met the service level (the lowest, 1.00 req/s, failed it)."
    )
    nothing = {"highest_rate": None, "bracket": [None, 1.0], "undecided": [0.5]}
    line = rate_tables.search_line(sweep.steps, nothing)
    assert (
        "no rate was shown to meet the service level (the lowest shown to fail: 1.00 req/s; undecided at 0.50" in line
    )


def test_rejudging_replaces_the_limits_given(sweep: RateSweep) -> None:
    level = sweep.level  # TTFT 200, TPOT 30, 90 %
    assert rate_tables.rejudge_level(level) == level
    assert rate_tables.rejudge_level(level, ttft_ms=100, tpot_ms=0, target=0.5) == ServiceLevel(100, None, None, 0.5)
    stricter = rate_tables.rejudge(sweep.records, ServiceLevel(ttft_ms=60, target=0.9))
    own = rate_tables.rejudge(sweep.records, level)
    assert tuple(own.columns) == rate_tables.REJUDGED_COLUMNS
    assert list(own["goodput"]) == pytest.approx(list(sweep.steps["goodput"]))  # as the sweep judged itself
    assert (stricter["goodput"] <= own["goodput"]).all() and (stricter["goodput"] < own["goodput"]).any()
    assert rate_tables.rejudge(sweep.records.iloc[:0], level).empty


def test_the_markdown_section(sweep: RateSweep) -> None:
    text = rate_tables.rate_markdown(sweep.steps, sweep.level, sweep.search, 0.1, images={"rate-knee": "k.png"})
    assert text.startswith("## Open-loop rates\n\nService level: TTFT ≤ 200 ms · TPOT ≤ 30 ms, for 90 % of requests.")
    assert "| Step | Offered req/s |" in text and "| 2 | 4.00 |" in text and rate_tables.LAG_NOTE in text
    assert text.endswith("![rate-knee](k.png)\n")


def test_the_knee_follows_the_steps_in_order_of_offered_rate(sweep: RateSweep) -> None:
    fig = rate_plots.knee_figure(sweep.steps, sweep.level)
    ordered = sweep.steps.sort_values("offered_rate")
    ttft = lines(fig, 0)
    # TTFT from the scheduled arrival leads (what the service level counts); the send's p99 dashed beside it
    np.testing.assert_array_equal(ttft["TTFT p50"], ordered[["output_tok_s", "ttft_sched_p50_ms"]].to_numpy())
    np.testing.assert_array_equal(ttft["TTFT p99"], ordered[["output_tok_s", "ttft_sched_p99_ms"]].to_numpy())
    np.testing.assert_array_equal(
        ttft["TTFT p99 from the send"], ordered[["output_tok_s", "ttft_p99_ms"]].to_numpy())  # fmt: skip
    assert fig.axes[0].get_title() == "TTFT from the scheduled arrival (ms)"
    assert (ordered["ttft_sched_p50_ms"] > ordered["ttft_p50_ms"]).all()  # the lag adds to every step's
    assert lines(fig, 1)["TPOT p50"] == ordered[["output_tok_s", "tpot_p50_ms"]].to_numpy().tolist()
    assert [y for _, y in ttft["limit 200 ms"]] == [200, 200]
    flagged = sweep.steps.iloc[2]
    assert [flagged["output_tok_s"], flagged["ttft_sched_p50_ms"]] in ttft["lag flagged"]
    imported = rate_plots.knee_figure(sweep.steps.drop(columns=["ttft_sched_p50_ms", "ttft_sched_p99_ms"]))
    assert imported.axes[0].get_title() == "TTFT from the send (ms)" and "TTFT p99 from the send" not in lines(
        imported, 0)  # fmt: skip
    assert len(ttft["TTFT p99 (searched)"]) == 2
    by_rate = lines(rate_plots.knee_figure(sweep.steps, x="offered_rate"), 0)["TTFT p50"]
    assert [x for x, _ in by_rate] == [1.0, 2.0, 4.0, 5.75, 6.5, 8.0]
    with pytest.raises(ValueError, match="x: 'tokens'; one of output_tok_s"):
        rate_plots.knee_figure(sweep.steps, x="tokens")


def test_goodput_against_offered_with_its_target_and_bracket(sweep: RateSweep) -> None:
    fig = rate_plots.goodput_figure(sweep.steps, sweep.level, sweep.search)
    drawn = lines(fig)
    ordered = sweep.steps.sort_values("offered_rate")
    assert drawn["goodput"] == ordered[["offered_rate", "goodput"]].to_numpy().tolist()
    assert drawn["target: 90 %"] == [[0.0, 0.0], [8.0, pytest.approx(7.2)]]
    assert drawn["highest meeting: 4 req/s"][0][0] == 4.0
    (span,) = [p for p in fig.axes[0].patches if p.get_label() == "search bracket"]
    assert isinstance(span, Rectangle)
    assert (span.get_x(), span.get_x() + span.get_width()) == (4.0, 5.75)


def test_the_queue_and_an_infinite_rate(sweep: RateSweep) -> None:
    drawn = lines(rate_plots.queue_figure(sweep.steps))
    assert drawn["waiting (mean)"][-1] == [8.0, 4.5] and drawn["waiting (peak)"][-1] == [8.0, 12.0]
    all_at_once = sweep.steps.copy()
    all_at_once.loc[3, "offered_rate"] = math.inf
    assert len(lines(rate_plots.goodput_figure(all_at_once))["goodput"]) == 5  # no place on an offered axis
    assert len(lines(rate_plots.knee_figure(all_at_once))["TTFT p50"]) == 6
    empty = rate_plots.queue_figure(sweep.steps.iloc[:0])
    assert [t.get_text() for t in empty.axes[0].texts] == ["No step with a finite offered rate"]


def test_runs_overlaid(sweep: RateSweep) -> None:
    other = sweep.steps.assign(goodput=sweep.steps["goodput"] / 2)
    fig = rate_plots.compare_figure({"A": sweep.steps, "B": other})
    assert set(lines(fig, 0)) == set(lines(fig, 1)) == {"A", "B"}
    assert [y for _, y in lines(fig, 0)["B"]] == pytest.approx(
        [y / 2 for _, y in lines(fig, 0)["A"]])  # fmt: skip
    assert [t.get_text() for t in rate_plots.compare_figure({}).axes[0].texts] == ["No run holds a rate sweep"]


def test_embeddings_runs_are_overlaid_by_their_end_to_end_latency(sweep: RateSweep) -> None:
    """Embeddings sweeps have no TTFT: two of them share an end-to-end p99 panel against inputs/s; beside a
    generation run an embeddings run is drawn in the goodput panel only, its label saying why."""
    embed = pd.DataFrame({"step": [0, 1], "offered_rate": [2.0, 8.0], "goodput": [2.0, 7.5], "items_s": [16.0, 60.0],
                          "e2e_sched_p99_ms": [40.0, 95.0], "output_tok_s": [None, None]})  # fmt: skip
    both = rate_plots.compare_figure({"A": embed, "B": embed.assign(e2e_sched_p99_ms=[50.0, 140.0])})
    assert lines(both, 1) == {"A": [[16.0, 40.0], [60.0, 95.0]], "B": [[16.0, 50.0], [60.0, 140.0]]}
    assert both.axes[1].get_title() == "End-to-end p99 from the scheduled arrival (ms)"
    assert both.axes[1].get_xlabel() == rate_plots.X_AXES["items_s"]
    mixed = rate_plots.compare_figure({"gen": sweep.steps, "emb": embed})
    assert set(lines(mixed, 0)) == {"gen", "emb (embeddings: no TTFT)"} and set(lines(mixed, 1)) == {"gen"}
    assert mixed.axes[1].get_title() == "TTFT p99 from the scheduled arrival (ms)"


def test_the_sliders_judge_every_step_again(sweep: RateSweep) -> None:
    panel = rate_views.RejudgePanel(sweep.records, sweep.level)
    assert panel.level == sweep.level
    own = judge_steps(sweep.records, sweep.level)[list(rate_tables.REJUDGED_COLUMNS)]
    pd.testing.assert_frame_equal(panel.judged, own)
    panel.sliders["ttft_ms"].value = 60
    panel.sliders["tpot_ms"].value = 0  # no limit
    level = ServiceLevel(ttft_ms=60, tpot_ms=None, target=0.9)
    assert panel.level == level
    pd.testing.assert_frame_equal(panel.judged, rate_tables.rejudge(sweep.records, level))
    assert panel.sliders["ttft_ms"].max >= request_latencies(sweep.records)["ttft_sched_ms"].max()


def test_the_sliders_only_where_a_person_moves_them(sweep: RateSweep, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel in a Jupyter server's session gets the widget; one whose output becomes a document (plain
    papermill: no front end; the toolkit's kernels: TOOLKIT_PROGRESS=text) gets a line."""
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=ZMQInteractiveShell))
    monkeypatch.delenv("TOOLKIT_PROGRESS", raising=False)
    monkeypatch.setenv("JPY_SESSION_NAME", "rate_sweep.ipynb")
    assert isinstance(rate_views.rejudge_panel(sweep.records, sweep.level), widgets.VBox)
    monkeypatch.setenv("TOOLKIT_PROGRESS", "text")
    shown = rate_views.rejudge_panel(sweep.records, sweep.level)
    assert isinstance(shown, Markdown) and shown.data == rate_views.SLIDERS_ELSEWHERE
    monkeypatch.delenv("TOOLKIT_PROGRESS")
    monkeypatch.delenv("JPY_SESSION_NAME")
    shown = rate_views.rejudge_panel(sweep.records, sweep.level)
    assert isinstance(shown, Markdown) and shown.data == rate_views.SLIDERS_ELSEWHERE


class ZMQInteractiveShell:  # the name IPython's kernel shell has
    pass


def test_nothing_to_show_without_a_sweep(sweep: RateSweep, tmp_path: Path) -> None:
    assert rate_views.heading(None) is None and rate_views.steps(None) is None
    assert rate_views.comparison_heading({"A": sweep}) is None
    two = rate_views.comparison_heading({"A": sweep, "B & C": sweep})
    assert two is not None and "<b>B &amp; C</b>" in two.data and two.data.startswith("<h2>Open-loop rates</h2>")
    heading = rate_views.heading(sweep)
    assert heading is not None and "Highest rate meeting the service level: 4.00 req/s" in heading.data
    shown = rate_views.steps(sweep)
    assert shown is not None and "lag flagged: the client sent" in shown.data
