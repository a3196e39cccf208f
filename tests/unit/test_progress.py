"""Widgets only where a widget front end is attached: the progress bar and the sliders ask one check
(toolkit.base.front_end), which plain papermill kernels, the toolkit's own kernels and terminals fail."""

from __future__ import annotations

import sys
import types

import pytest

from toolkit.base import front_end
from toolkit.matrix.progress import progress_front_end


class ZMQInteractiveShell:  # the name IPython's kernel shell has
    pass


@pytest.fixture
def in_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ZMQ kernel with no front end known: no control comm, no Jupyter server session."""
    fake = types.SimpleNamespace(get_ipython=ZMQInteractiveShell)
    monkeypatch.setitem(sys.modules, "IPython", fake)
    monkeypatch.delenv("TOOLKIT_PROGRESS", raising=False)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    monkeypatch.delitem(sys.modules, "ipywidgets.widgets.widget", raising=False)


def control_comm(monkeypatch: pytest.MonkeyPatch, comm: object | None) -> None:
    """ipywidgets' Widget class as a front end's control comm leaves it (None: never opened)."""
    widget = types.SimpleNamespace(Widget=type("Widget", (), {"_control_comm": comm}))
    monkeypatch.setitem(sys.modules, "ipywidgets.widgets.widget", widget)


def test_terminal_gets_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: None))
    monkeypatch.delenv("TOOLKIT_PROGRESS", raising=False)
    monkeypatch.setenv("JPY_SESSION_NAME", "x.ipynb")
    assert progress_front_end() == "text"


def test_plain_papermill_kernel_gets_text(in_kernel: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ZMQ kernel alone is not a front end: nbclient opens no control comm and has no server session."""
    control_comm(monkeypatch, None)
    assert not front_end.widget_front_end()
    assert progress_front_end() == "text"


def test_control_comm_opened_gets_the_widget(in_kernel: None, monkeypatch: pytest.MonkeyPatch) -> None:
    control_comm(monkeypatch, object())
    assert front_end.control_comm_opened()
    assert progress_front_end() == "notebook"


def test_jupyter_server_session_gets_the_widget(in_kernel: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """JupyterLab's widget manager opened the control comm before ipywidgets was imported: the session tells."""
    monkeypatch.setenv("JPY_SESSION_NAME", "/home/me/rate_sweep.ipynb")
    assert not front_end.control_comm_opened()
    assert progress_front_end() == "notebook"


def test_toolkit_kernel_gets_text_whatever_is_attached(in_kernel: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLKIT_PROGRESS", "text")
    monkeypatch.setenv("JPY_SESSION_NAME", "x.ipynb")
    control_comm(monkeypatch, object())
    assert progress_front_end() == "text"
