"""The executed notebook is written at its start and end, and in between at most every SAVE_EVERY_S
(toolkit.jupyter.papermill_engine), where papermill writes it as each cell starts and ends."""

from __future__ import annotations

from pathlib import Path

import nbformat
import papermill.engines
import pytest

from toolkit.jupyter import papermill_engine
from toolkit.jupyter.execute import execute_path

pytestmark = pytest.mark.process


def test_quick_cells_are_saved_together_a_slow_ones_end_on_its_own_and_the_end_always(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    saved: list[list[str]] = []  # each write: every code cell's papermill status
    write = papermill.engines.write_ipynb

    def counting(nb: nbformat.NotebookNode, path: str) -> None:
        saved.append([c.metadata.papermill["status"] for c in nb.cells if c.cell_type == "code"])
        write(nb, path)

    monkeypatch.setattr(papermill.engines, "write_ipynb", counting)
    monkeypatch.setattr(papermill_engine, "SAVE_EVERY_S", 1.0)
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell("X = 0", metadata={"tags": ["parameters"]}),
                      *(nbformat.v4.new_code_cell(f"a{i} = {i}") for i in range(5)),
                      nbformat.v4.new_code_cell("import time\ntime.sleep(1.5)"),
                      nbformat.v4.new_code_cell("print(a4 * X)")]  # fmt: skip
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, tmp_path / "in.ipynb")
    execute_path(tmp_path / "in.ipynb", tmp_path / "out.ipynb", {"X": 3})

    cells = 9  # the injected parameters cell too
    assert saved[0] == ["pending"] * cells and saved[-1] == ["completed"] * cells  # the start and the end
    assert 3 <= len(saved) < 2 + 2 * cells  # papermill's own: the start, each cell's start and end
    assert ["completed"] * (cells - 1) + ["pending"] in saved[1:-1]  # the slow cell's end: its last save 1.5 s old
    executed = nbformat.read(tmp_path / "out.ipynb", as_version=4)
    assert executed.cells[-1].outputs[0]["text"] == "12\n"
