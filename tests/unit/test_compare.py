"""Comparisons of runs (pure) and their figures, on small frames of plain values."""

from __future__ import annotations

import io
import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import QuadMesh
from matplotlib.figure import Figure

from toolkit.base.schema import COLUMNS, Measurement
from toolkit.reports import compare, compare_plots, views


def dec(ctx: str, n: int, status: str = "Valid", total: float | None = None, per: float | None = None,
        ttft: float | None = None) -> Measurement:  # fmt: skip
    tokens = int(ctx.removesuffix("K")) * 1024
    return Measurement("decode", tokens, ctx, n, status, total_tok_s=total, per_request_tok_s=per, ttft_ms=ttft)  # type: ignore[arg-type]


def pre(ctx: str, total: float | None, ttft: float | None, status: str = "Valid") -> Measurement:
    tokens = int(ctx.removesuffix("K")) * 1024
    return Measurement("prefill", tokens, ctx, 1, status, total_tok_s=total, ttft_ms=ttft)  # type: ignore[arg-type]


A = [
    pre("8K", 10_000.0, 800.0),
    pre("16K", 9_000.0, 1_800.0),
    dec("8K", 1, total=100.0, per=100.0, ttft=50.0),
    dec("8K", 2, total=180.0, per=90.0, ttft=60.0),
    dec("8K", 4, "Over capacity"),
    dec("16K", 1, total=80.0, per=80.0, ttft=100.0),
    dec("16K", 2, "Over capacity"),
]
B = [
    pre("8K", 12_500.0, 640.0),
    pre("32K", 7_000.0, 4_600.0),
    dec("8K", 1, total=150.0, per=150.0, ttft=40.0),
    dec("8K", 2, "Requests queued", total=200.0, per=70.0, ttft=90.0),
    dec("8K", 4, "Over capacity"),
    dec("16K", 1, total=80.0, per=80.0, ttft=100.0),
    dec("16K", 2, total=120.0, per=60.0, ttft=300.0),
    dec("32K", 1, total=60.0, per=60.0, ttft=200.0),
]


def runs(**named: list[Measurement]) -> pd.DataFrame:
    rows = [{"run": label, **m.to_dict()} for label, ms in named.items() for m in ms]
    return pd.DataFrame(rows, columns=["run", *COLUMNS])


@pytest.fixture
def frame() -> pd.DataFrame:
    return runs(A=A, B=B)


def cell(table: pd.DataFrame, phase: str, ctx: str, n: int) -> pd.Series:
    (index,) = table.index[(table["phase"] == phase) & (table["context"] == ctx) & (table["concurrency"] == n)]
    return table.loc[index]


def test_run_labels_keep_the_order_of_the_runs() -> None:
    assert compare.run_labels(runs(Zed=A, Alpha=B, Mid=A)) == ["Zed", "Alpha", "Mid"]


def test_ratio_table_matches_cells_present_in_both_runs(frame: pd.DataFrame) -> None:
    table = compare.ratio_table(frame, "A", "B")
    keys = list(zip(table["phase"], table["context"], table["concurrency"], strict=True))
    assert keys == [("prefill", "8K", 1), ("decode", "8K", 1), ("decode", "8K", 2), ("decode", "8K", 4),
                    ("decode", "16K", 1), ("decode", "16K", 2)]  # fmt: skip
    one = cell(table, "decode", "8K", 1)
    assert (one["total_tok_s_ratio"], one["per_request_tok_s_ratio"], one["ttft_ms_ratio"]) == (1.5, 1.5, 0.8)
    two = cell(table, "decode", "8K", 2)
    assert two["total_tok_s_ratio"] == pytest.approx(200 / 180)
    assert (two["status_a"], two["status_b"]) == ("Valid", "Requests queued")
    assert cell(table, "prefill", "8K", 1)["total_tok_s_ratio"] == 1.25
    assert math.isnan(cell(table, "prefill", "8K", 1)["per_request_tok_s_ratio"])
    assert math.isnan(cell(table, "decode", "8K", 4)["total_tok_s_ratio"])  # over capacity in both
    assert math.isnan(cell(table, "decode", "16K", 2)["total_tok_s_ratio"])  # over capacity in A only


def test_ratio_of_zero_baseline_is_missing() -> None:
    table = compare.ratio_table(runs(A=[dec("8K", 1, total=0.0)], B=[dec("8K", 1, total=5.0)]), "A", "B")
    assert math.isnan(table["total_tok_s_ratio"].iloc[0])


def test_ratio_table_names_an_unknown_run(frame: pd.DataFrame) -> None:
    with pytest.raises(ValueError, match=r"run 'C' is not among the runs \['A', 'B'\]"):
        compare.ratio_table(frame, "A", "C")


def test_status_differences_list_changed_and_unmatched_cells(frame: pd.DataFrame) -> None:
    diff = compare.status_differences(frame)
    got = {(r["phase"], r["context"], r["concurrency"]): (r["A"], r["B"]) for r in diff.to_dict("records")}
    assert got == {
        ("prefill", "16K", 1): ("Valid", None),
        ("prefill", "32K", 1): (None, "Valid"),
        ("decode", "8K", 2): ("Valid", "Requests queued"),
        ("decode", "16K", 2): ("Over capacity", "Valid"),
        ("decode", "32K", 1): (None, "Valid"),
    }
    assert list(diff["context"]) == ["16K", "32K", "8K", "16K", "32K"]  # prefill first, then by tokens


def test_status_differences_over_three_runs_and_identical_runs() -> None:
    assert compare.status_differences(runs(A=A, B=A)).empty
    diff = compare.status_differences(runs(A=A, B=A, C=[*A[:3], dec("8K", 2, "Error"), *A[4:]]))
    assert diff[["context", "concurrency", "A", "B", "C"]].values.tolist() == [["8K", 2, "Valid", "Valid", "Error"]]


def test_prefill_side_by_side_is_the_union_of_contexts(frame: pd.DataFrame) -> None:
    side = compare.prefill_side_by_side(frame)
    assert side.index.tolist() == [(8192, "8K"), (16384, "16K"), (32768, "32K")]
    assert side.loc[(8192, "8K"), ("A", "total_tok_s")] == 10_000.0
    assert side.loc[(8192, "8K"), ("B", "ttft_ms")] == 640.0
    assert side.loc[(16384, "16K"), ("B", "status")] is None
    assert compare.prefill_display(frame).values.tolist() == [
        ["8K", "10K", "800 ms", "12.5K", "640 ms"],
        ["16K", "9,000", "1,800 ms", "—", "—"],
        ["32K", "—", "—", "7,000", "4,600 ms"],
    ]


def test_prefill_side_by_side_without_prefill() -> None:
    assert compare.prefill_side_by_side(runs(A=A[2:], B=B[2:])).empty


@pytest.mark.parametrize(
    ("x", "y", "mask"),
    [
        ([1.0], [1.0], [True]),
        ([100, 90, 80, 50], [100, 180, 320, 300], [True, True, True, False]),
        ([10, 10, 5], [5, 5, 5], [True, True, False]),  # equal points do not dominate each other
        ([10, 10], [5, 6], [False, True]),  # same x, higher y wins
        ([], [], []),
    ],
)
def test_pareto_mask(x: list[float], y: list[float], mask: list[bool]) -> None:
    assert compare.pareto_mask(x, y) == mask


def test_tradeoff_points_and_frontier(frame: pd.DataFrame) -> None:
    points = compare.tradeoff_points(frame)
    assert set(points["status"]) == {"Valid", "Requests queued"}  # over capacity and errors cannot be placed
    assert len(points[points["run"] == "A"]) == 3 and len(points[points["run"] == "B"]) == 5
    frontier = compare.pareto_frontier(frame, "B")
    # B: (150, 150) 8K×1, (70, 200) 8K×2, (80, 80) 16K×1, (60, 120) 16K×2, (60, 60) 32K×1
    assert list(zip(frontier["context"], frontier["concurrency"], strict=True)) == [("8K", 2), ("8K", 1)]
    assert frontier["per_request_tok_s"].tolist() == [70.0, 150.0]


@pytest.mark.parametrize(
    ("value", "text"),
    [(1.0, "1.00×"), (0.8, "0.800×"), (200 / 180, "1.11×"), (0.025315, "0.0253×"), (39.5, "39.5×"),
     (99.96, "100×"), (1234.4, "1,234×"), (None, "—"), (math.nan, "—")],
)  # fmt: skip
def test_format_ratio(value: float | None, text: str) -> None:
    assert compare.format_ratio(value) == text


def test_ratio_display(frame: pd.DataFrame) -> None:
    shown = compare.ratio_display(compare.ratio_table(frame, "A", "B"))
    assert list(shown.columns) == ["Phase", "Context", "Requests at once", "Status", "Total tok/s",
                                   "Per request tok/s", "TTFT"]  # fmt: skip
    rows = {(r[1], r[2]): r for r in shown.values.tolist() if r[0] == "Sustained decode"}
    assert ("8K", "4") not in rows  # over capacity in both: nothing to compare
    speed = "1.50× (100.0 → 150.0)"
    assert rows[("8K", "1")][3:] == ["Valid", speed, speed, "0.800× (50 ms → 40 ms)"]
    assert rows[("8K", "2")][3] == "Valid → Requests queued"
    assert rows[("16K", "2")][3:5] == ["Over capacity → Valid", "— (— → 120.0)"]
    assert shown.values.tolist()[0][:5] == ["Prefill", "8K", "1", "Valid", "1.25× (10K → 12.5K)"]


def test_status_display_marks_unmeasured_cells(frame: pd.DataFrame) -> None:
    shown = compare.status_display(compare.status_differences(frame))
    assert shown.values.tolist()[0] == ["Prefill", "16K", "1", "Valid", "—"]
    assert ["Sustained decode", "8K", "2", "Valid", "Requests queued"] in shown.values.tolist()


def test_compare_markdown_sections(frame: pd.DataFrame) -> None:
    images = {"prefill": "prefill.png", "ratio-2": "ratio-2.png", "tradeoff": "tradeoff.png"}
    text = compare.compare_markdown(frame, images)
    headings = [line for line in text.splitlines() if line.startswith("#")]
    assert headings == ["# Speed test matrix comparison", "## Prefill", "## B vs A", "## Trade-off",
                        "## Status differences"]  # fmt: skip
    for path in images.values():
        assert f"]({path})" in text
    assert "| Sustained decode | 8K | 1 | Valid | 1.50× (100.0 → 150.0) |" in text
    assert "| Sustained decode | 8K | 2 | Valid | Requests queued |" in text
    assert "| B | 8K | 2 | Requests queued | 70.0 | 200.0 |" in text
    same = compare.compare_markdown(runs(A=A, B=A))
    assert "Every cell has the same status in every run." in same and "](" not in same


# ---- figures ---------------------------------------------------------------------------------------


def render(fig: Figure) -> None:
    fig.savefig(io.BytesIO(), format="png", dpi=40)


def test_ratio_heatmaps_are_centred_on_one_and_blank_where_a_run_lacks_the_cell(frame: pd.DataFrame) -> None:
    fig = compare_plots.ratio_heatmaps(frame, "A", "B")
    render(fig)
    axes = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in axes] == ["Total tok/s", "Per request tok/s", "TTFT (lower is better)"]
    total = axes[0]
    mesh = next(c for c in total.collections if isinstance(c, QuadMesh))
    assert mesh.norm.vmin == pytest.approx(-mesh.norm.vmax)  # log2(B / A): 0 (a ratio of 1) in the middle
    values = np.ma.filled(mesh.get_array(), np.nan).reshape(3, 3)  # rows 8K, 16K, 32K; columns 1, 2, 4
    assert values[0, 0] == pytest.approx(math.log2(1.5))
    assert values[1, 0] == 0.0
    assert np.isnan(values[2]).all()  # 32K: only in B
    assert np.isnan(values[1, 1]) and np.isnan(values[0, 2])  # over capacity in A or in both
    texts = {t.get_text() for t in total.texts}
    assert {"1.50×", "1.11× Q", "Over"} <= texts
    assert [t.get_text() for t in total.get_yticklabels()] == ["8K", "16K", "32K"]
    assert total.collections[0].colorbar.cmap.name == "RdBu"


def test_ratio_heatmaps_without_common_cells_is_a_note() -> None:
    fig = compare_plots.ratio_heatmaps(runs(A=[dec("8K", 1, total=1.0)], B=[dec("16K", 1, total=1.0)]), "A", "B")
    assert "No decode cell measured in both" in fig.axes[0].texts[0].get_text()


def test_prefill_comparison_draws_one_line_per_run(frame: pd.DataFrame) -> None:
    fig = compare_plots.prefill_comparison(frame)
    render(fig)
    speed, ttft = fig.axes
    assert [line.get_label() for line in speed.get_lines()] == ["A", "B"]
    assert list(speed.get_lines()[1].get_xdata()) == [0.0, 2.0]  # B has 8K and 32K, not 16K
    assert [t.get_text() for t in ttft.get_xticklabels()] == ["8K", "16K", "32K"]


def test_tradeoff_figure_follows_each_frontier(frame: pd.DataFrame) -> None:
    fig = compare_plots.tradeoff_figure(frame)
    render(fig)
    (ax,) = fig.axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines["B"].get_xdata()) == [70.0, 150.0] and list(lines["B"].get_ydata()) == [200.0, 150.0]
    assert ax.get_xlabel() == "Per request tok/s" and ax.get_ylabel() == "Total tok/s"
    assert {"8K×2", "8K×1"} <= {t.get_text() for t in ax.texts}


def test_ratio_heatmaps_of_chosen_quantities_and_forced_scales(frame: pd.DataFrame) -> None:
    fig = compare_plots.ratio_heatmaps(frame, "A", "B", ["ttft_ms"])
    render(fig)
    (ttft,) = [ax for ax in fig.axes if ax.get_title()]
    assert ttft.get_title() == "TTFT (lower is better)" and ttft.collections[0].colorbar.cmap.name == "RdBu_r"
    assert list(compare.ratio_table(frame, "A", "B", ["ttft_ms"]).columns[-8:]) == [
        "ttft_ms_a", "ttft_ms_b", "ttft_ms_ratio", "ttft_ms_ratio_hw", "ttft_ms_ratio_dof", "ttft_ms_p",
        "ttft_ms_p_adjusted", "ttft_ms_significant"]  # fmt: skip
    (ax,) = compare_plots.tradeoff_figure(frame, log_scale=True).axes
    assert ax.get_xscale() == ax.get_yscale() == "log"
    assert {ax.get_yscale() for ax in compare_plots.prefill_comparison(frame, log_scale=True).axes} == {"log"}


# ---- cells still disturbed after their retries -------------------------------------------------------


def paused(measurements: list[Measurement], *keys: tuple[str, int, int]) -> list[Measurement]:
    return [replace(m, disturbed="no token for 2.3 s") if m.key in keys else m for m in measurements]


def test_a_cell_disturbed_in_either_run_has_no_ratio_and_says_disturbed() -> None:
    frame = runs(A=paused(A, ("decode", 8192, 1)), B=paused(B, ("decode", 16384, 1)))
    table = compare.ratio_table(frame, "A", "B")
    for ctx in ("8K", "16K"):
        one = cell(table, "decode", ctx, 1)
        assert math.isnan(one["total_tok_s_ratio"]) and math.isnan(one["ttft_ms_ratio"]), ctx
    assert cell(table, "decode", "8K", 1)[["disturbed_a", "disturbed_b"]].tolist() == [True, False]
    assert cell(table, "decode", "8K", 2)["total_tok_s_ratio"] == pytest.approx(200 / 180)  # undisturbed: kept
    rows = {(r[1], r[2]): r[3:] for r in compare.ratio_display(table).values.tolist() if r[0] == "Sustained decode"}
    assert rows[("8K", "1")] == ["Valid · disturbed in A", "disturbed", "disturbed", "disturbed"]
    assert rows[("16K", "1")] == ["Valid · disturbed in B", "disturbed", "disturbed", "disturbed"]
    page = views.ratios(frame, "A", "B").to_html()
    assert 'status-disturbed" >Valid · disturbed in A</td>' in page
    assert "| Sustained decode | 8K | 1 | Valid · disturbed in A | disturbed | disturbed | disturbed |" in (
        compare.compare_markdown(frame)
    )


def test_ratio_heatmaps_hatch_a_disturbed_cell_and_the_frontier_leaves_it_out() -> None:
    frame = runs(A=A, B=paused(B, ("decode", 8192, 2)))
    fig = compare_plots.ratio_heatmaps(frame, "A", "B", ["total_tok_s"])
    render(fig)
    (total,) = [ax for ax in fig.axes if ax.get_title()]
    values = np.ma.filled(next(c for c in total.collections if isinstance(c, QuadMesh)).get_array(), np.nan)
    assert np.isnan(values.reshape(3, 3)[0, 1])  # 8K × 2: no colour
    label = next(t for t in total.texts if t.get_text() == "disturbed")
    assert label.get_position() == (1.5, 0.5)
    assert "1.11× Q" not in {t.get_text() for t in total.texts}
    frontier = compare.pareto_frontier(frame, "B")  # 8K × 2 (70, 200) was on it; 8K × 1 dominates the rest
    assert list(zip(frontier["context"], frontier["concurrency"], strict=True)) == [("8K", 1)]


# ---- significance from the cells' sub-window spreads ------------------------------------------------


def _spread(ctx: str, n: int, total: float, half_width: float) -> Measurement:
    return replace(dec(ctx, n, total=total, per=total / n, ttft=50.0), total_tok_s_ci=half_width,
                   per_request_tok_s_ci=half_width / n)  # fmt: skip


def test_a_run_compared_with_itself_has_no_significant_ratio() -> None:
    cells = [_spread("1K", 1, 341.0, 4.0), _spread("1K", 2, 610.0, 9.0), _spread("2K", 2, 520.0, 30.0)]
    table = compare.ratio_table(runs(A=cells, B=cells), "A", "B")
    assert list(table["total_tok_s_significant"]) == [False, False, False]
    assert list(table["per_request_tok_s_significant"]) == [False, False, False]
    assert all(text.startswith("1.00× ±") and " n.s. (" in text for text in compare.ratio_display(table)["Total tok/s"])


def test_runs_twenty_percent_apart_with_tight_intervals_are_significant() -> None:
    a = [_spread("1K", 1, 300.0, 3.0), _spread("1K", 2, 500.0, 5.0)]
    b = [_spread("1K", 1, 360.0, 4.0), _spread("1K", 2, 600.0, 6.0)]
    table = compare.ratio_table(runs(A=a, B=b), "A", "B")
    assert list(table["total_tok_s_ratio"]) == pytest.approx([1.2, 1.2])
    assert list(table["total_tok_s_significant"]) == [True, True]
    shown = list(compare.ratio_display(table)["Total tok/s"])
    assert shown[0].startswith("1.20× ±0.02 (") and "n.s." not in shown[0]


def test_without_spreads_ratios_show_no_interval() -> None:
    cells = [dec("1K", 1, total=300.0, per=300.0, ttft=50.0)]
    table = compare.ratio_table(runs(A=cells, B=cells), "A", "B")
    assert table["total_tok_s_significant"].tolist() == [None] and math.isnan(table["total_tok_s_ratio_hw"][0])
    assert compare.ratio_display(table)["Total tok/s"].tolist() == ["1.00× (300.0 → 300.0)"]


def test_ratio_heatmap_gives_no_significant_difference_the_neutral_colour() -> None:
    a = [_spread("1K", 1, 300.0, 3.0), _spread("1K", 2, 500.0, 60.0)]
    b = [_spread("1K", 1, 360.0, 4.0), _spread("1K", 2, 520.0, 60.0)]
    fig = compare_plots.ratio_heatmaps(runs(A=a, B=b), "A", "B", ["total_tok_s"])
    render(fig)
    (ax,) = [ax for ax in fig.axes if ax.get_title()]
    texts = [t.get_text() for t in ax.texts]
    assert "1.20×" in texts and "1.04× n.s." in texts
    colours = np.ravel(ax.collections[0].get_array())
    assert colours[1] == 0.0 and colours[0] == pytest.approx(math.log2(1.2))  # n.s.: the centre of the scale


def test_labels_with_dollar_signs_are_drawn_as_typed() -> None:
    """A label such as `$\\x$` reached matplotlib's mathtext and the compare notebook crashed."""
    import io

    labels = {r"$\x$": A, "cost $5": B}
    frame = runs(**labels)
    for fig in (compare_plots.prefill_comparison(frame), compare_plots.tradeoff_figure(frame),
                compare_plots.ratio_heatmaps(frame, r"$\x$", "cost $5")):  # fmt: skip
        fig.savefig(io.BytesIO(), format="png")  # drawing is where mathtext would parse, and raise
    legend = compare_plots.tradeoff_figure(frame).axes[0].get_legend_handles_labels()[1]
    assert legend == [r"\$\x\$", r"cost \$5"]  # escaped for matplotlib: drawn as typed
