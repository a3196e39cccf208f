"""An idle kernel is asked to shut down, not interrupted: jupyter_client's SIGINT-before-shutdown made ipykernel log
"ERROR | KeyboardInterrupt caught in kernel." after a notebook that ran fine (make demo, after prefill)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import nbformat
import psutil
import pytest

from toolkit.jupyter.execute import execute_path
from toolkit.jupyter.kernels import SameSessionKernelManager

pytestmark = pytest.mark.process


@pytest.fixture
def interrupts(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every SIGINT the kernel manager sends, as a time stamp."""
    sent: list[float] = []
    original = SameSessionKernelManager._async_interrupt_kernel

    async def counting(self: SameSessionKernelManager) -> None:
        sent.append(time.monotonic())
        await original(self)

    monkeypatch.setattr(SameSessionKernelManager, "_async_interrupt_kernel", counting)
    return sent


def test_a_finished_notebook_shuts_its_kernel_down_without_an_interrupt(
    tmp_path: Path, interrupts: list[float], capfd: pytest.CaptureFixture[str]
) -> None:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell("X = 0", metadata={"tags": ["parameters"]}),
                      nbformat.v4.new_code_cell("print(X * 2)")]  # fmt: skip
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, tmp_path / "in.ipynb")
    for x in range(3):
        execute_path(tmp_path / "in.ipynb", tmp_path / "out.ipynb", {"X": x})
        assert nbformat.read(tmp_path / "out.ipynb", as_version=4).cells[-1].outputs[0]["text"] == f"{x * 2}\n"
    assert interrupts == []
    assert "KeyboardInterrupt" not in capfd.readouterr().err


def test_a_busy_kernel_is_still_interrupted_and_ends(interrupts: list[float]) -> None:
    async def scenario() -> int:
        manager = SameSessionKernelManager(kernel_name="python3", polite_shutdown_s=1.0)
        await manager.start_kernel()
        client = manager.client()
        client.start_channels()
        await client.wait_for_ready(timeout=30)
        client.execute("import time\nwhile True: time.sleep(0.1)")
        await asyncio.sleep(1.0)
        pid = manager.provisioner.pid
        await manager.shutdown_kernel()
        client.stop_channels()
        return int(pid)

    pid = asyncio.run(scenario())
    assert len(interrupts) == 1
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
