"""The figures an executed notebook drew, for the markdown reports: the PNG images of its cells tagged
`figure-<key>` (an nbconvert preprocessor), taken once per notebook and passed on, and saved beside the report.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import nbformat
import pandas as pd
from nbconvert.preprocessors import Preprocessor

FIGURE_TAG = "figure-"  # cell tag `figure-<key>`: the images the cell drew are the markdown report's <key>.png

Drawn = dict[str, list[bytes]]  # the images of the `figure-<key>` cells, by key, in the order they were drawn


class TaggedFigures(Preprocessor):
    """nbconvert stage: the PNG images of cells tagged `figure-<key>`, by key in the order they were drawn, into
    ``resources["figures"]``; the notebook itself is left as it is."""

    def preprocess_cell(
        self, cell: nbformat.NotebookNode, resources: dict[str, Any], index: int
    ) -> tuple[nbformat.NotebookNode, dict[str, Any]]:
        figures: Drawn = resources.setdefault("figures", {})
        for tag in cell.get("metadata", {}).get("tags", []):
            if tag.startswith(FIGURE_TAG):
                pngs = [o["data"]["image/png"] for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
                figures.setdefault(tag.removeprefix(FIGURE_TAG), []).extend(base64.b64decode(png) for png in pngs)
        return cell, resources


def drawn_images(notebook: nbformat.NotebookNode) -> Drawn:
    """The PNG images of an executed notebook's `figure-<key>` cells, by key (`TaggedFigures`)."""
    _, resources = TaggedFigures().preprocess(notebook, {})
    figures: Drawn = resources.get("figures", {})
    return figures


def first_drawn(drawn: Drawn, frame: pd.DataFrame, phases: Mapping[str, str | None]) -> dict[str, bytes]:
    """The first image drawn under each key whose phase has rows in frame (None: whatever the rows)."""
    return {
        key: drawn[key][0]
        for key, phase in phases.items()
        if drawn.get(key) and (phase is None or (frame["phase"] == phase).any())
    }


def save_images(images: Mapping[str, bytes], folder: Path) -> dict[str, str]:
    """Each image as <key>.png in folder; returns the paths relative to it, by key."""
    for key, png in images.items():
        (folder / f"{key}.png").write_bytes(png)
    return {key: f"{key}.png" for key in images}
