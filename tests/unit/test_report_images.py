"""The markdown reports' PNGs are the images the executed notebook drew, found by their cells' `figure-<key>` tags."""

from __future__ import annotations

import base64

import nbformat
import pandas as pd
from nbformat.v4 import new_code_cell, new_notebook, new_output

from toolkit.jupyter.figures import drawn_images
from toolkit.jupyter.reports import compare_images


def cell(tags: list[str], *pngs: bytes) -> nbformat.NotebookNode:
    outputs = [new_output("display_data", data={"image/png": base64.b64encode(p).decode(), "text/plain": "<Figure>"})
               for p in pngs]  # fmt: skip
    return new_code_cell("...", metadata={"tags": tags}, outputs=outputs)


NOTEBOOK = new_notebook(cells=[
    cell(["parameters"], b"not a figure cell"),
    cell(["figure-prefill"], b"P"),
    cell(["figure-ratios"], b"R2", b"R3"),
    cell([], b"an untagged figure"),
    cell(["figure-tradeoff", "notebook-only"], b"T"),
])  # fmt: skip


def test_images_by_tag_in_drawing_order() -> None:
    assert drawn_images(NOTEBOOK) == {"prefill": [b"P"], "ratios": [b"R2", b"R3"], "tradeoff": [b"T"]}


def test_compare_images_are_keyed_as_the_markdown_expects() -> None:
    with_prefill = pd.DataFrame({"phase": ["prefill", "decode"]})
    assert compare_images(with_prefill, NOTEBOOK) == {"prefill": b"P", "ratio-2": b"R2", "ratio-3": b"R3",
                                                      "tradeoff": b"T"}  # fmt: skip
    decode_only = pd.DataFrame({"phase": ["decode"]})  # the prefill cell draws a note then: not a report figure
    assert compare_images(decode_only, NOTEBOOK) == {"ratio-2": b"R2", "ratio-3": b"R3", "tradeoff": b"T"}
