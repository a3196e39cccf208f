"""An idle kernel is asked to shut down, not interrupted: jupyter_client's SIGINT-before-shutdown made ipykernel log
"ERROR | KeyboardInterrupt caught in kernel." after a notebook that ran fine (make demo, after prefill)."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import nbformat
import psutil
import pytest

from toolkit.jupyter import kernel_launcher
from toolkit.jupyter.execute import execute_path
from toolkit.jupyter.kernels import SameSessionKernelManager, toolkit_kernel_command

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


def test_the_kernel_runs_its_exit_handlers_within_their_bound_and_ends(tmp_path: Path, interrupts: list[float]) -> None:
    """toolkit.jupyter.kernel_launcher: the kernel's exit handlers run (a notebook's own included), one that never
    returns is left after the bound (1 s here, set by the cell), and the idle kernel ends without an interrupt."""
    ran = tmp_path / "ran.txt"
    cell = (
        "import __main__, atexit, os, sys, time\n"
        "__main__.EXIT_HANDLERS_S = 1.0\n"
        "atexit.register(time.sleep, 3600)\n"  # runs last: never returns
        f"atexit.register(lambda: open({str(ran)!r}, 'w').write('ran'))\n"
        "print(os.getpid(), sys.argv[0])"
    )
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell("X = 0", metadata={"tags": ["parameters"]}),
                      nbformat.v4.new_code_cell(cell)]  # fmt: skip
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, tmp_path / "in.ipynb")
    started = time.monotonic()
    execute_path(tmp_path / "in.ipynb", tmp_path / "out.ipynb", {"X": 1})
    took = time.monotonic() - started
    pid, launcher = nbformat.read(tmp_path / "out.ipynb", as_version=4).cells[-1].outputs[0]["text"].split(" ", 1)
    assert launcher.strip() == str(Path(kernel_launcher.__file__))  # started as one, or forked from the zygote
    assert ran.read_text() == "ran"
    assert not psutil.pid_exists(int(pid)) or psutil.Process(int(pid)).status() == psutil.STATUS_ZOMBIE
    assert interrupts == [] and took < SameSessionKernelManager.idle_exit_s.default_value / 2, took


def test_only_this_pythons_ipykernel_launcher_is_replaced() -> None:
    ours = [sys.executable, "-m", "ipykernel_launcher", "-f", "c.json"]
    assert toolkit_kernel_command(ours) == [sys.executable, "-m", "toolkit.jupyter.kernel_launcher", "-f", "c.json"]
    other_python = ["/opt/other/bin/python", "-m", "ipykernel_launcher", "-f", "c.json"]
    other_kernel = [sys.executable, "-m", "other_kernel", "-f", "c.json"]
    for command in (other_python, other_kernel, [sys.executable]):
        assert toolkit_kernel_command(command) == command
