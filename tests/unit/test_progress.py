"""The runner's progress bar: tqdm's notebook widget in JupyterLab, plain text under papermill and terminals."""

from __future__ import annotations

import sys
import types

import pytest

from toolkit.matrix.progress import progress_front_end


class ZMQInteractiveShell:  # the name IPython's kernel shell has
    pass


@pytest.fixture
def in_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.SimpleNamespace(get_ipython=ZMQInteractiveShell)
    monkeypatch.setitem(sys.modules, "IPython", fake)
    monkeypatch.delenv("TOOLKIT_PROGRESS", raising=False)


def test_terminal_gets_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: None))
    monkeypatch.delenv("TOOLKIT_PROGRESS", raising=False)
    assert progress_front_end() == "text"


def test_interactive_kernel_gets_the_widget(in_kernel: None) -> None:
    assert progress_front_end() == "notebook"


def test_papermill_kernel_gets_text(in_kernel: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLKIT_PROGRESS", "text")
    assert progress_front_end() == "text"
