"""The figures' shared look, drawn with matplotlib alone: the palette, bare spines, an annotated heatmap (pure
presentation).

The figures once took these from seaborn, whose import (scipy.stats and scipy.cluster with it) cost 0.8 s of CPU
in every notebook kernel that drew one, about a third of a kernel's start (benchmarks/kernel_imports.py). The
look is seaborn's: its "deep" palette, `despine`, and `heatmap`'s mesh, inverted rows and cell labels.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.collections import QuadMesh
from matplotlib.colors import Normalize

__all__ = ["DEEP", "annotated_heatmap", "despine", "palette", "sequential"]

# seaborn's "deep" palette (seaborn.color_palette("deep").as_hex()).
DEEP = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c", "#ccb974", "#64b5cd")
_LIGHT = 0.408  # relative luminance above which a cell's label is dark (seaborn's threshold)


def palette(n: int | None = None) -> list[str]:
    """The "deep" palette, `n` colours long (cycling past 10); all 10 when `n` is None."""
    return list(DEEP) if n is None else [DEEP[i % len(DEEP)] for i in range(n)]


def sequential(n: int, cmap: str = "viridis") -> list[tuple[float, float, float, float]]:
    """`n` colours spaced along `cmap`, its two ends left out (as seaborn samples a continuous colormap)."""
    return [colormaps[cmap](x) for x in np.linspace(0, 1, n + 2)[1:-1]]


def despine(ax: Axes, *, left: bool = False, bottom: bool = False) -> None:
    """Hide the top and right spines (and the left and bottom ones when asked)."""
    for side, hide in (("top", True), ("right", True), ("left", left), ("bottom", bottom)):
        ax.spines[side].set_visible(not hide)


def _relative_luminance(rgba: np.ndarray) -> float:
    channels = np.asarray(rgba[:3], dtype=float)
    linear = np.where(channels <= 0.03928, channels / 12.92, ((channels + 0.055) / 1.055) ** 2.4)
    return float(linear @ [0.2126, 0.7152, 0.0722])


def annotated_heatmap(
    ax: Axes,
    values: np.ndarray,
    labels: np.ndarray,
    *,
    cmap: str,
    norm: Normalize,
    xticklabels: Sequence[Any],
    yticklabels: Sequence[Any],
    colorbar: dict[str, Any] | None = None,
    fontsize: float = 8,
) -> QuadMesh:
    """Rows × columns of `values` as coloured cells (row 0 on top, white lines between; NaN cells left blank), each
    coloured cell labelled with its `labels` entry in a colour that reads on it, and a colour bar (`colorbar`:
    its keyword arguments). The mesh is `ax.collections[0]`, its colour bar `mesh.colorbar`."""
    grid = np.ma.masked_invalid(np.asarray(values, dtype=float))
    mesh = ax.pcolormesh(grid, cmap=cmap, norm=norm, edgecolors="white", linewidth=0.5)
    rows, columns = grid.shape
    ax.set(xlim=(0, columns), ylim=(0, rows))
    ax.invert_yaxis()
    bar = ax.get_figure().colorbar(mesh, ax=ax, **(colorbar or {}))  # type: ignore[union-attr]
    bar.outline.set_linewidth(0)  # type: ignore[operator]
    ax.set_xticks(np.arange(columns) + 0.5, [str(x) for x in xticklabels])
    ax.set_yticks(np.arange(rows) + 0.5, [str(y) for y in yticklabels], va="center")
    despine(ax, left=True, bottom=True)
    mesh.update_scalarmappable()
    blank = np.ma.getmaskarray(grid)
    for (i, j), colour in zip(np.ndindex(rows, columns), np.asarray(mesh.get_facecolor()), strict=True):
        if not blank[i, j]:
            dark = _relative_luminance(colour) > _LIGHT
            ax.text(j + 0.5, i + 0.5, str(labels[i][j]), ha="center", va="center", fontsize=fontsize,
                    color=".15" if dark else "w")  # fmt: skip
    return mesh
