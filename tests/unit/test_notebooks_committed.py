"""The committed notebooks are documents: no outputs, short visible cells under markdown headings."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))
NAMES = [path.stem for path in NOTEBOOKS]
PUBLISHED = ["prefill", "decode_matrix", "report", "compare"]  # what `toolkit run` and `toolkit compare` execute
DOCUMENTS = [*PUBLISHED, "rate_sweep"]  # read as documents, like the published ones
SHORT = 5  # lines of a code cell a reader takes in at a glance


def test_the_published_notebooks_are_among_them() -> None:
    assert set(PUBLISHED) <= set(NAMES)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NAMES)
def test_no_outputs_and_no_execution_counts(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [], cell.source
            assert cell.execution_count is None, cell.source


@pytest.mark.parametrize("name", DOCUMENTS)
def test_cells_read_top_to_bottom(name: str) -> None:
    notebook = nbformat.read(NOTEBOOKS[NAMES.index(name)], as_version=4)
    cells = notebook.cells
    assert cells[0].cell_type == "markdown" and cells[0].source.startswith("# ")
    assert notebook.metadata.kernelspec.name == "python3"
    headings = [c for c in cells if c.cell_type == "markdown" and c.source.startswith("## ")]
    assert len(headings) >= 2
    (parameters,) = [c for c in cells if "parameters" in c.metadata.get("tags", [])]
    assert not parameters.metadata.get("jupyter", {}).get("source_hidden")  # the reader edits it
    hidden = [c for c in cells if c.metadata.get("jupyter", {}).get("source_hidden")]
    assert len(hidden) == 1 and "import" in hidden[0].source  # only plumbing is hidden
    for cell in cells:
        assert "remove-input" not in cell.metadata.get("tags", [])
        if cell.cell_type == "code" and cell not in (parameters, *hidden):
            assert len(cell.source.splitlines()) <= SHORT, cell.source
            assert "display(" not in cell.source or "for " in cell.source  # one result per cell, loops aside
