"""Figures build from small result frames and mark statuses as documented."""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import replace

import pandas as pd
import pytest
from matplotlib.axes import Axes
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure

from toolkit.base.schema import COLUMNS, Measurement
from toolkit.method.disturbed import DISTURBED_MARK
from toolkit.reports.plots import MARKED_NOTE, decode_heatmaps, prefill_figure, scaling_figure

CELLS = [
    Measurement("prefill", 8192, "8K", 1, "Valid", total_tok_s=17_731.6, ttft_ms=462.0),
    Measurement("prefill", 257_024, "251K", 1, "Valid", total_tok_s=8_828.0, ttft_ms=28_591.0),
    Measurement("prefill", 262_080, "256K", 1, "Error", error="timeout"),
    Measurement("decode", 8192, "8K", 1, "Valid", 24.3, 25.5, 136.0, 39.2, 1.0, 0, 728, 29.9),
    Measurement("decode", 8192, "8K", 2, "Requests queued", 47.9, 25.0, 258.0, 40.0, 1.9, 0, 1_434, 30.0),
    Measurement("decode", 8192, "8K", 4, "Error", error="HTTP 500"),
    Measurement("decode", 32768, "32K", 1, "Valid", 23.9, 24.7, 202.0, 40.5, 1.0, 0, 715, 29.9),
    Measurement("decode", 32768, "32K", 2, "Valid", 47.9, 25.2, 327.0, 39.7, 2.0, 0, 1_431, 29.9),
    Measurement("decode", 32768, "32K", 4, "Over capacity"),
    Measurement("decode", 257_024, "251K", 1, "Over capacity"),
    Measurement("decode", 257_024, "251K", 2, "Over capacity"),
    Measurement("decode", 257_024, "251K", 4, "Over capacity"),
]


def frame(measurements: list[Measurement]) -> pd.DataFrame:
    return pd.DataFrame([m.to_dict() for m in measurements], columns=list(COLUMNS))


def render(fig: Figure) -> None:
    """Draw the figure to memory, so that drawing errors surface in the test."""
    fig.savefig(io.BytesIO(), format="png", dpi=40)


def texts(ax: Axes) -> list[str]:
    return [t.get_text() for t in ax.texts]


def heatmap_axes(fig: Figure) -> list[Axes]:
    return [ax for ax in fig.axes if ax.get_title()]


def test_decode_heatmaps_annotate_statuses() -> None:
    fig = decode_heatmaps(frame(CELLS[::-1]))
    render(fig)
    axes = heatmap_axes(fig)
    assert [ax.get_title() for ax in axes] == ["Total tok/s", "Per request tok/s", "TTFT (ms)"]
    total, per_request, ttft = (texts(ax) for ax in axes)
    assert sorted(total) == sorted(["24.3", "47.9 Q", "Err", "23.9", "47.9", *["Over"] * 4])
    assert sorted(ttft) == sorted(["136", "258 Q", "Err", "202", "327", *["Over"] * 4])
    assert "25.0 Q" in per_request
    assert [t.get_text() for t in axes[0].get_yticklabels()] == ["8K", "32K", "251K"]
    assert [t.get_text() for t in axes[0].get_xticklabels()] == ["1", "2", "4"]
    over = next(t for t in axes[0].texts if t.get_text() == "Over")
    assert over.get_position() == (2.5, 1.5)  # column 4, row 32K
    outlined = [p for p in axes[0].patches if not p.get_fill()]
    assert [(p.get_x(), p.get_y()) for p in outlined] == [(1, 0)]  # the queued 8K x 2 cell
    assert sum(p.get_hatch() == "///" for p in axes[0].patches) == 4


def test_heatmap_colours_go_logarithmic_for_wide_ranges() -> None:
    wide = [
        Measurement("decode", 8192, "8K", 1, "Valid", 959.9, 972.0, 47.0),
        Measurement("decode", 8192, "8K", 128, "Valid", 24_300.0, 195.1, 521.0),
    ]
    axes = heatmap_axes(decode_heatmaps(frame(wide)))
    assert isinstance(axes[0].collections[0].norm, LogNorm)
    assert not isinstance(axes[1].collections[0].norm, LogNorm)  # 972 / 195: a narrow range
    assert texts(axes[0]) == ["959.9", "24.3K"]


def test_all_over_capacity_decode_builds() -> None:
    fig = decode_heatmaps(frame(CELLS[-3:]))
    render(fig)
    for ax in heatmap_axes(fig):
        assert texts(ax) == ["Over", "Over", "Over"]
    note = scaling_figure(frame(CELLS[-3:]))
    assert texts(note.axes[0]) == ["No sustained-decode throughput to plot"]


@pytest.mark.parametrize(
    ("build", "note"),
    [
        (decode_heatmaps, "No sustained-decode measurements"),
        (scaling_figure, "No sustained-decode throughput to plot"),
    ],
)
def test_prefill_only_frame_gives_a_note(build: Callable[[pd.DataFrame], Figure], note: str) -> None:
    fig = build(frame(CELLS[:3]))
    render(fig)
    assert isinstance(fig, Figure)
    assert texts(fig.axes[0]) == [note]


def test_prefill_figure_two_panels() -> None:
    fig = prefill_figure(frame(CELLS))
    render(fig)
    speed, ttft = fig.axes
    assert speed.get_title() == "Prompt tok/s"
    assert ttft.get_title() == "TTFT (ms, cold)"
    assert [t.get_text() for t in speed.get_xticklabels()] == ["8K", "251K", "256K"]
    assert texts(speed) == ["17.7K", "8,828", "Error"]
    assert texts(ttft) == ["462", "28,591", "Error"]
    assert [round(p.get_height(), 1) for p in speed.patches] == [17_731.6, 8_828.0, 0.0]
    assert texts(prefill_figure(frame(CELLS[3:])).axes[0]) == ["No prefill measurements"]


def test_scaling_figure_lines_per_context() -> None:
    fig = scaling_figure(frame(CELLS))
    render(fig)
    (ax,) = fig.axes
    assert ax.get_xscale() == "log"
    assert ax.xaxis.get_transform().base == 2
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2"]
    lines = {line.get_label(): line.get_xydata().tolist() for line in ax.get_lines()}
    assert lines == {"8K": [[1.0, 24.3], [2.0, 47.9]], "32K": [[1.0, 23.9], [2.0, 47.9]]}
    hollow = ax.collections[0].get_offsets().tolist()
    assert hollow == [[2.0, 47.9]]  # the queued cell


def test_heatmaps_of_chosen_metrics_with_marked_cells() -> None:
    df = frame(CELLS)
    marked = (df["phase"] == "decode") & (df["concurrency"] == 1) & (df["status"] == "Valid")
    fig = decode_heatmaps(df, ["ttft_ms"], marked=marked)
    render(fig)
    (ax,) = heatmap_axes(fig)
    assert ax.get_title() == "TTFT (ms)"
    values = ax.collections[0].get_array()
    assert values.filled(-1).tolist() == [[136.0, 258.0, -1], [202.0, 327.0, -1], [-1, -1, -1]]  # 8K, 32K, 251K
    (stars,) = [line for line in ax.get_lines() if line.get_marker() == "*"]
    assert stars.get_xydata().tolist() == [[0.14, 0.24], [0.14, 1.24]]  # column 1 of 8K and 32K
    assert fig.get_suptitle().endswith(MARKED_NOTE)
    unmarked = decode_heatmaps(df, marked=pd.Series(False, index=df.index), title="run B")
    assert not [line for ax in unmarked.axes for line in ax.get_lines()] and unmarked.get_suptitle() == "run B"
    with pytest.raises(ValueError, match="'ttft' is not a results column"):
        decode_heatmaps(df, ["ttft"])


def test_log_scale_is_forced_either_way() -> None:
    wide = frame([
        Measurement("decode", 8192, "8K", 1, "Valid", 959.9, 972.0, 47.0),
        Measurement("decode", 8192, "8K", 128, "Valid", 24_300.0, 195.1, 521.0),
    ])  # fmt: skip
    linear = heatmap_axes(decode_heatmaps(wide, log_scale=False))
    assert not any(isinstance(ax.collections[0].norm, LogNorm) for ax in linear)
    logs = heatmap_axes(decode_heatmaps(wide, log_scale=True))
    assert all(isinstance(ax.collections[0].norm, LogNorm) for ax in logs)
    (ax,) = scaling_figure(wide, log_scale=True).axes
    assert ax.get_yscale() == "log"
    assert {ax.get_yscale() for ax in prefill_figure(frame(CELLS), log_scale=True).axes} == {"log"}


def test_scaling_figure_of_another_metric() -> None:
    (ax,) = scaling_figure(frame(CELLS), "ttft_ms").axes
    assert ax.get_ylabel() == "TTFT (ms)" and ax.get_title().startswith("TTFT (ms) by simultaneous requests")
    lines = {line.get_label(): line.get_xydata().tolist() for line in ax.get_lines()}
    assert lines == {"8K": [[1.0, 136.0], [2.0, 258.0]], "32K": [[1.0, 202.0], [2.0, 327.0]]}
    note = scaling_figure(frame(CELLS[:3]), "ttft_ms")
    assert texts(note.axes[0]) == ["No sustained-decode TTFT (ms) to plot"]
    buffer = io.BytesIO()
    note.savefig(buffer, format="png")
    assert buffer.getvalue().startswith(b"\x89PNG")  # a note figure renders


def test_a_disturbed_cell_is_hatched_and_says_so_instead_of_a_number() -> None:
    """32K × 2 stayed disturbed after its retries: no number, no colour, no say in the colour scale."""
    paused = [replace(m, disturbed="no token for 2.3 s", total_tok_s=900.0) if m.key == ("decode", 32768, 2) else m
              for m in CELLS]  # fmt: skip
    df = frame(paused)
    fig = decode_heatmaps(df, ["total_tok_s"])
    render(fig)
    (ax,) = heatmap_axes(fig)
    assert sorted(texts(ax)) == sorted(["24.3", "47.9 Q", "Err", "23.9", DISTURBED_MARK, *["Over"] * 4])
    label = next(t for t in ax.texts if t.get_text() == DISTURBED_MARK)
    assert label.get_position() == (1.5, 1.5)  # column 2, row 32K
    assert [(p.get_x(), p.get_y()) for p in ax.patches if p.get_hatch() == "\\\\\\"] == [(1, 1)]
    values = ax.collections[0].get_array()
    assert values.filled(-1).tolist()[1] == [23.9, -1, -1]  # its 900 tok/s is not drawn
    assert ax.collections[0].norm.vmax == 47.9  # nor does it stretch the colours


def test_disturbed_cells_are_left_out_of_the_scaling_figure_and_greyed_in_prefill() -> None:
    paused = [replace(m, disturbed="no token for 2.3 s") if m.key in (("decode", 32768, 2), ("prefill", 8192, 1))
              else m for m in CELLS]  # fmt: skip
    (ax,) = scaling_figure(frame(paused)).axes
    lines = {line.get_label(): line.get_xydata().tolist() for line in ax.get_lines()}
    assert lines == {"8K": [[1.0, 24.3], [2.0, 47.9]], "32K": [[1.0, 23.9]]}
    speed, _ = prefill_figure(frame(paused)).axes
    assert texts(speed) == [f"17.7K\n{DISTURBED_MARK}", "8,828", "Error"]
    assert [p.get_hatch() for p in speed.patches][:2] == ["\\\\", ""]


def test_cells_with_a_wide_interval_are_marked_and_the_mark_explained() -> None:
    cells = [
        Measurement("decode", 1024, "1K", 1, "Valid", total_tok_s=300.0, per_request_tok_s=300.0, ttft_ms=40.0,
                    total_tok_s_ci=3.0),  # 1 %: not marked
        Measurement("decode", 1024, "1K", 2, "Valid", total_tok_s=500.0, per_request_tok_s=250.0, ttft_ms=50.0,
                    total_tok_s_ci=40.0),  # 8 %: marked at the default 5 %, not at 10 %
    ]  # fmt: skip
    fig = decode_heatmaps(frame(cells), ["total_tok_s"])
    render(fig)
    (ax,) = heatmap_axes(fig)
    assert "300.0" in texts(ax) and "500.0 ±" in texts(ax)
    assert "±: 95 % interval wider than 5 % of the value" in fig.get_suptitle()
    loose = decode_heatmaps(frame(cells), ["total_tok_s"], wide_pct=10)
    render(loose)
    assert "500.0" in texts(heatmap_axes(loose)[0]) and "±" not in loose.get_suptitle()
