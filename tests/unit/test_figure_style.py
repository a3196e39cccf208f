"""The figures' shared look without seaborn (toolkit.reports.figure_style)."""

from __future__ import annotations

import io

import numpy as np
from matplotlib import colormaps
from matplotlib.colors import Normalize
from matplotlib.figure import Figure

from toolkit.reports.figure_style import DEEP, annotated_heatmap, despine, palette, sequential


def test_the_palette_cycles_past_its_ten_colours_and_sequential_leaves_out_the_ends() -> None:
    assert palette() == list(DEEP) and palette(12)[10:] == [DEEP[0], DEEP[1]]
    assert sequential(3) == [colormaps["viridis"](x) for x in (0.25, 0.5, 0.75)]


def test_despine_hides_the_top_and_right_and_on_request_the_rest() -> None:
    ax = Figure().subplots()
    despine(ax)
    assert [ax.spines[s].get_visible() for s in ("top", "right", "left", "bottom")] == [False, False, True, True]
    despine(ax, left=True, bottom=True)
    assert not any(spine.get_visible() for spine in ax.spines.values())


def test_the_heatmap_puts_row_0_on_top_leaves_nan_blank_and_labels_in_a_colour_that_reads() -> None:
    fig = Figure()
    ax = fig.subplots()
    values = np.array([[0.0, 1.0], [np.nan, 0.5]])
    labels = np.array([["low", "high"], ["none", "mid"]], dtype=object)
    mesh = annotated_heatmap(ax, values, labels, cmap="Greys", norm=Normalize(0, 1), xticklabels=[1, 2],
                             yticklabels=["8K", "32K"], colorbar={"label": "B / A"})  # fmt: skip
    assert ax.collections[0] is mesh and mesh.colorbar is not None and mesh.colorbar.ax.get_ylabel() == "B / A"
    assert ax.get_ylim() == (2.0, 0.0)  # inverted: row 0 at the top
    placed = {t.get_text(): (t.get_position(), t.get_color()) for t in ax.texts}
    assert set(placed) == {"low", "high", "mid"}  # the NaN cell has no label
    assert placed["low"] == ((0.5, 0.5), ".15") and placed["high"] == ((1.5, 0.5), "w")  # white on black
    assert [t.get_text() for t in ax.get_yticklabels()] == ["8K", "32K"]
    fig.savefig(io.BytesIO(), format="png", dpi=30)
