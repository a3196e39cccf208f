"""Papermill's and nbconvert's errors become the toolkit's at the boundary: a notebook cell that raised, or an
executed notebook nbconvert cannot convert, is a NotebookError, which the command line prints as one line naming
the notebook, the cell and the exception (exit 1); the executed notebook stays on disk."""

from __future__ import annotations

import argparse
from pathlib import Path

import nbformat
import pytest
from papermill.exceptions import PapermillExecutionError

from toolkit import cli
from toolkit.base.errors import NotebookError
from toolkit.cli import folders
from toolkit.jupyter.convert import html_report
from toolkit.jupyter.execute import execute_path


def raising_notebook(path: Path) -> None:
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    notebook.cells = [
        nbformat.v4.new_markdown_cell("# a notebook that fails"),
        nbformat.v4.new_code_cell("x = 1"),
        nbformat.v4.new_code_cell('raise ValueError("x is wrong\\nsecond line")'),
        nbformat.v4.new_code_cell("never = True"),
    ]
    nbformat.write(notebook, path)


@pytest.mark.process
def test_a_cell_that_raised_is_one_line_naming_the_notebook_and_cell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    raising_notebook(tmp_path / "in.ipynb")
    output = tmp_path / "report.ipynb"

    def command(args: argparse.Namespace) -> int:
        execute_path(tmp_path / "in.ipynb", output, {})
        return 0

    monkeypatch.setattr(folders, "_compare", command)  # the parser binds the function when main builds it
    status = cli.main(["compare", "a", "b", "--out", str(tmp_path / "c")])
    err = capsys.readouterr().err
    assert status == 1 and NotebookError.exit_code == 1
    assert err == (
        f"error: report.ipynb: cell 2 failed: ValueError: x is wrong; the executed notebook, its traceback in it, "
        f"is {output}\n"
    )
    assert "Traceback" not in err and "second line" not in err
    executed = nbformat.read(output, as_version=4)  # kept, the traceback in the cell that raised
    errors = [o["ename"] for c in executed.cells if c.cell_type == "code" for o in c.outputs if "ename" in o]
    assert errors == ["ValueError"]


def test_a_cell_without_an_execution_count_is_named_by_its_position(tmp_path: Path) -> None:
    from toolkit.jupyter.execute import failure_line

    cause = PapermillExecutionError(3, None, "raise KeyError", "KeyError", "", [])
    line = failure_line(tmp_path / "compare.ipynb", cause)
    assert line.startswith("compare.ipynb: cell 4 failed: KeyError; ")  # no execution count: its position


def test_a_notebook_nbconvert_cannot_convert_is_one_line_naming_it() -> None:
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    notebook.metadata["papermill"] = {"output_path": "/runs/a/report.ipynb"}
    notebook.cells[0]["execution_count"] = "three"  # a damaged notebook: nbconvert's validation refuses it
    with pytest.raises(NotebookError) as raised:
        html_report(notebook)
    assert raised.value.line.startswith(
        "/runs/a/report.ipynb: nbconvert could not convert it to HTML: NotebookValidationError: 'three' is not of"
    )
    assert isinstance(raised.value.__cause__, nbformat.ValidationError)
