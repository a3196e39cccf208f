"""The key is redacted at a notebook's exits: the executed notebook on disk (a failed one included) and the kernel
output relayed to the terminal, whatever the notebook printed or raised."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from papermill.exceptions import PapermillExecutionError

from toolkit.base.errors import NotebookError
from toolkit.jupyter.execute import execute_path

pytestmark = pytest.mark.process
KEY = "sk-live-" + "ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789" * 2  # 124 characters


def pieces_of_the_key(text: str) -> list[str]:
    return sorted({KEY[i : i + 8] for i in range(len(KEY) - 7) if KEY[i : i + 8] in text})


def test_a_failed_notebook_that_echoed_the_key_keeps_none_of_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("NOTEBOOK_TEST_KEY", KEY)
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    notebook.cells = [
        nbformat.v4.new_code_cell('API_KEY_ENV = "VLLM_API_KEY"', metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("import os, sys\nkey = os.environ[API_KEY_ENV]\n"
                                  "print('a gateway echoed', key)\nprint('and to stderr', key, file=sys.stderr)"),
        nbformat.v4.new_code_cell("raise RuntimeError('HTTP 401: bad key ' + key[:40] + '...')"),  # cut by a server
    ]  # fmt: skip
    nbformat.write(notebook, tmp_path / "in.ipynb")
    with pytest.raises(NotebookError) as raised:  # papermill's PapermillExecutionError, translated
        execute_path(tmp_path / "in.ipynb", tmp_path / "out.ipynb", {"API_KEY_ENV": "NOTEBOOK_TEST_KEY"})
    assert isinstance(raised.value.__cause__, PapermillExecutionError) and pieces_of_the_key(raised.value.line) == []
    on_disk = (tmp_path / "out.ipynb").read_text()
    printed = capfd.readouterr()
    assert pieces_of_the_key(on_disk) == [] and pieces_of_the_key(printed.out + printed.err) == []
    assert on_disk.count("<redacted>") >= 3 and "HTTP 401: bad key <redacted>..." in on_disk
    assert "a gateway echoed <redacted>" in printed.out + printed.err  # relayed, redacted
