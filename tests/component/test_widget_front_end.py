"""No widget where no one can move it: rate_sweep.ipynb under plain papermill opens no widget comm, while a kernel
whose client opens ipywidgets' control comm, as JupyterLab's widget manager does, gets the sliders.

Both kernels start without TOOLKIT_PROGRESS and without a Jupyter server session (JPY_SESSION_NAME): only the
front end differs.
"""

from __future__ import annotations

import os
import queue
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
import papermill
import pytest
from ipywidgets._version import __control_protocol_version__
from jupyter_client.manager import KernelManager

from tests.rate_folders import write_rate_sweep
from toolkit.base.front_end import CONTROL_COMM_TARGET
from toolkit.reports.rate_views import SLIDERS_ELSEWHERE

pytestmark = [pytest.mark.process, pytest.mark.timeout(300)]
NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
REPO = NOTEBOOKS.parent
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_rate_sweep(tmp_path_factory.mktemp("sweep") / "run")


@pytest.fixture
def no_front_end_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a user's shell gives papermill: neither the toolkit's marker nor a Jupyter server's session."""
    monkeypatch.delenv("TOOLKIT_PROGRESS", raising=False)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    monkeypatch.setenv("PYTHONPATH", str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def outputs(cell: nbformat.NotebookNode) -> list[dict[str, Any]]:
    return [dict(o) for o in cell.get("outputs", [])]


def test_plain_papermill_builds_no_widget(sweep_dir: Path, tmp_path: Path, no_front_end_env: None) -> None:
    output = tmp_path / "rate_sweep.ipynb"
    papermill.execute_notebook(str(NOTEBOOKS / "rate_sweep.ipynb"), str(output), kernel_name="python3",
                               parameters={"RESULTS_DIR": str(sweep_dir)}, cwd=str(NOTEBOOKS),
                               progress_bar=False, execution_timeout=240)  # fmt: skip
    executed = nbformat.read(output, as_version=4)
    shown = [o for cell in executed.cells for o in outputs(cell)]
    assert not [o for o in shown if WIDGET_VIEW in o.get("data", {})]
    (panel,) = [c for c in executed.cells if "rejudge_panel(" in c.source]
    assert [o["data"]["text/markdown"] for o in outputs(panel)] == [SLIDERS_ELSEWHERE]
    assert any(o.get("data", {}).get("text/html") for o in shown)  # the notebook did draw its tables


class FrontEnd:
    """A kernel client that does what a widget-capable front end does: opens the control comm and asks for the
    widgets' state, then runs cells and keeps their display data."""

    def __init__(self, km: KernelManager) -> None:
        self.client = km.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=120)

    def run(self, code: str) -> list[dict[str, Any]]:
        shown: list[dict[str, Any]] = []

        def keep(msg: dict[str, Any]) -> None:
            if msg["msg_type"] in ("display_data", "execute_result"):
                shown.append(msg["content"]["data"])
            elif msg["msg_type"] == "error":
                raise AssertionError("\n".join(msg["content"]["traceback"]))

        reply = self.client.execute_interactive(code, output_hook=keep, timeout=180)
        assert reply["content"]["status"] == "ok", reply["content"]
        return shown

    def open_control_comm(self) -> dict[str, Any]:
        """comm_open on jupyter.widget.control, then request_states once it is open; the update_states reply."""
        session, shell = self.client.session, self.client.shell_channel
        comm_id = uuid.uuid4().hex
        opened = session.msg("comm_open", {"comm_id": comm_id, "target_name": CONTROL_COMM_TARGET, "data": {}},
                             metadata={"version": __control_protocol_version__})  # fmt: skip
        shell.send(opened)
        self.iopub_until(lambda m: m["msg_type"] == "status" and m["content"]["execution_state"] == "idle"
                         and m["parent_header"].get("msg_id") == opened["header"]["msg_id"])  # fmt: skip
        shell.send(session.msg("comm_msg", {"comm_id": comm_id, "data": {"method": "request_states"}}))
        reply = self.iopub_until(lambda m: m["msg_type"] == "comm_msg" and m["content"]["comm_id"] == comm_id)
        return dict(reply["content"]["data"])

    def iopub_until(self, wanted: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        while True:
            try:
                msg = self.client.get_iopub_msg(timeout=60)
            except queue.Empty:
                raise AssertionError("the kernel did not answer on the control comm") from None
            if msg["msg_type"] == "comm_close":
                raise AssertionError("the kernel closed the control comm")
            if wanted(msg):
                return dict(msg)

    def stop(self) -> None:
        self.client.stop_channels()


def test_a_front_end_that_opens_the_control_comm_gets_the_sliders(sweep_dir: Path, no_front_end_env: None) -> None:
    notebook = nbformat.read(NOTEBOOKS / "rate_sweep.ipynb", as_version=4)
    code = [c.source for c in notebook.cells if c.cell_type == "code"]
    panel = next(i for i, source in enumerate(code) if "rejudge_panel(" in source)
    km = KernelManager(kernel_name="python3")
    km.start_kernel(cwd=str(NOTEBOOKS), env={**os.environ, "MPLBACKEND": "Agg"})
    front_end = FrontEnd(km)
    try:
        front_end.run(code[0] + f"\nRESULTS_DIR = {str(sweep_dir)!r}")  # the parameters
        front_end.run(code[1])  # the imports: ipywidgets registers its comm targets
        asked = "from toolkit.base import front_end\nfront_end.widget_front_end()"
        assert front_end.run(asked) == [{"text/plain": "False"}]  # a kernel alone: no front end known yet
        states = front_end.open_control_comm()  # as JupyterLab's widget manager does when it (re)connects
        assert states["method"] == "update_states"
        assert front_end.run(asked) == [{"text/plain": "True"}]
        shown = [data for source in code[2 : panel + 1] for data in front_end.run(source)]
        assert any(WIDGET_VIEW in data for data in shown)
        sliders = front_end.run("[s.description for s in _.children[0].children + _.children[1].children]")
        assert sliders == [{"text/plain": "['TTFT ≤ (ms)', 'TPOT ≤ (ms)', 'end-to-end ≤ (ms)', 'target']"}]
    finally:
        front_end.stop()
        km.shutdown_kernel(now=True)
