"""Notebook kernels forked from the process's zygote (toolkit.jupyter.kernel_forks): what a kernel sees is what a
kernel started from scratch sees, and the zygote ends with the process that started it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import nbformat
import psutil
import pytest

from toolkit.jupyter import kernel_forks, kernel_launcher
from toolkit.jupyter.execute import execute_path
from toolkit.jupyter.kernel_zygote import notebook_imports
from toolkit.jupyter.shipped import NOTEBOOKS

pytestmark = pytest.mark.process

SEEN = """\
import json, os, sys
import matplotlib.pyplot as plt
import numpy as np
plt.plot([1, 2, 3])
print(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "pgid": os.getpgid(0), "sid": os.getsid(0),
                  "argv0": sys.argv[0], "cwd": os.getcwd(), "parent": os.environ.get("JPY_PARENT_PID"),
                  "marker": os.environ.get("KERNEL_FORKS_TEST"), "backend": plt.get_backend(),
                  "draw": np.random.rand()}))
"""


def what_a_kernel_sees(tmp_path: Path, name: str) -> tuple[dict[str, object], list[str]]:
    """Execute a notebook that prints what its kernel sees and draws a figure: that, and its outputs' MIME types."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell("X = 0", metadata={"tags": ["parameters"]}),
                      nbformat.v4.new_code_cell(SEEN)]  # fmt: skip
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, tmp_path / "in.ipynb")
    execute_path(tmp_path / "in.ipynb", tmp_path / f"{name}.ipynb", {"X": 1})
    outputs = nbformat.read(tmp_path / f"{name}.ipynb", as_version=4).cells[-1].outputs
    seen = json.loads(next(o["text"] for o in outputs if o["output_type"] == "stream"))
    return seen, sorted(kind for o in outputs for kind in o.get("data", {}))


def test_a_forked_kernel_sees_what_one_started_from_scratch_sees_and_draws_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNEL_FORKS_TEST", "set after the zygote started")
    monkeypatch.setenv("MPLBACKEND", "Agg")  # the tests' own, which a zygote started now imports matplotlib with
    cpu_before = kernel_forks.cpu_seconds()
    first, first_kinds = what_a_kernel_sees(tmp_path, "first")
    monkeypatch.delenv("MPLBACKEND")  # a kernel's own: ipykernel's inline backend
    second, second_kinds = what_a_kernel_sees(tmp_path, "second")
    zygote = kernel_forks.zygote_pid()
    assert zygote is not None and psutil.Process(zygote).ppid() == os.getpid()
    for seen in (first, second):
        assert seen["ppid"] == zygote and seen["parent"] == str(zygote)  # it ends when the zygote does
        assert seen["pgid"] == seen["pid"] and seen["sid"] == os.getsid(0)  # a group of its own, in our session
        assert seen["argv0"] == str(Path(kernel_launcher.__file__)) and seen["cwd"] == str(NOTEBOOKS.resolve())
        assert seen["marker"] == "set after the zygote started"  # the request's environment, not the zygote's
        assert not psutil.pid_exists(int(seen["pid"]))  # reaped by the zygote once it ended
    assert first["draw"] != second["draw"]  # numpy's global generator seeded again in each kernel
    assert first["backend"].lower() == "agg" and first_kinds == []  # as the environment says: drawn, not shown
    assert kernel_forks.cpu_seconds() > cpu_before  # the reaped kernels' CPU, for tests/budget.py

    monkeypatch.setenv(kernel_forks.FORKS_ENV, "0")
    scratch, scratch_kinds = what_a_kernel_sees(tmp_path, "scratch")
    assert scratch["ppid"] == os.getpid() and scratch["parent"] == str(os.getpid())
    assert scratch["pgid"] == scratch["pid"] and scratch["sid"] == os.getsid(0)
    assert scratch["argv0"] == first["argv0"] and scratch["cwd"] == first["cwd"]
    assert second["backend"] == scratch["backend"] and second_kinds == scratch_kinds == ["image/png", "text/plain"]


STARTS_A_KERNEL = """\
import sys
from pathlib import Path
import nbformat
from toolkit.jupyter import kernel_forks
from toolkit.jupyter.execute import execute_path
folder = Path(sys.argv[1])
notebook = nbformat.v4.new_notebook()
notebook.cells = [nbformat.v4.new_code_cell("X = 0", metadata={"tags": ["parameters"]})]
notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nbformat.write(notebook, folder / "in.ipynb")
execute_path(folder / "in.ipynb", folder / "out.ipynb", {"X": 1})
print(f"zygote={kernel_forks.zygote_pid()}", flush=True)
if sys.argv[2] == "hang":
    sys.stdin.read()
"""


@pytest.mark.parametrize("end", ["exit", "kill -9"])
def test_the_zygote_ends_with_the_process_that_started_it(tmp_path: Path, end: str) -> None:
    with subprocess.Popen([sys.executable, "-c", STARTS_A_KERNEL, str(tmp_path), "hang" if end != "exit" else ""],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as owner:  # fmt: skip
        assert owner.stdout is not None
        said = next(line for line in owner.stdout if line.startswith("zygote="))
        zygote = psutil.Process(int(said.removeprefix("zygote=")))
        assert zygote.ppid() == owner.pid
        if end == "kill -9":
            owner.send_signal(signal.SIGKILL)
        assert owner.wait(60) == (0 if end == "exit" else -signal.SIGKILL)
    gone, _ = psutil.wait_procs([zygote], timeout=10)  # its channel closed: it ends (reaped by its owner on exit)
    assert gone or zygote.status() == psutil.STATUS_ZOMBIE


def test_the_zygote_preloads_what_the_notebooks_import_magics_read_as_ipython_reads_them(tmp_path: Path) -> None:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_markdown_cell("import not_code"),
                      nbformat.v4.new_code_cell("%matplotlib inline\nimport pandas\nfrom toolkit.reports import views"),
                      nbformat.v4.new_code_cell("def f(:\n    import broken"),
                      nbformat.v4.new_code_cell("import pandas\nfrom .relative import x\nimport a.b, c")]  # fmt: skip
    nbformat.write(notebook, tmp_path / "n.ipynb")
    assert notebook_imports([tmp_path / "n.ipynb"]) == [
        "pandas",
        "toolkit.reports",
        "toolkit.reports.views",
        "a.b",
        "c",
    ]


def test_a_zygote_that_cannot_start_leaves_the_kernels_to_start_from_scratch_said_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    def fails() -> None:
        raise ConnectionError("the zygote ended")

    monkeypatch.setattr(kernel_forks, "_here", kernel_forks._ThisProcess())  # this process's own, put back after
    monkeypatch.setattr(kernel_forks, "Zygote", fails)
    monkeypatch.delenv("MPLBACKEND", raising=False)
    seen = [what_a_kernel_sees(tmp_path, name)[0] for name in ("first", "second")]
    assert [s["ppid"] for s in seen] == [os.getpid()] * 2 and kernel_forks.zygote_pid() is None
    said = [line for line in capfd.readouterr().err.splitlines() if "zygote" in line]
    assert said == ["notebook kernels start from scratch: their zygote did not start (the zygote ended)"]
