"""The embedded vLLM and the measuring notebook kernels stay in the caller's session, each in its own group.

Separate sessions get separate scheduler autogroups, which stall each other for seconds (issue 15).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from toolkit.embedded.server import EmbeddedServer, free_port
from toolkit.publish import execute_path
from toolkit.sessions import autogroup_enabled, check_server_session

PROBE_CELL = "import json, os\nprint(json.dumps({'sid': os.getsid(0), 'pgid': os.getpgid(0), 'pid': os.getpid()}))"


def test_server_in_callers_session_with_its_own_group(vllm_server: EmbeddedServer) -> None:
    assert vllm_server.process is not None
    pid = vllm_server.process.pid
    assert os.getsid(pid) == os.getsid(0)
    assert os.getpgid(pid) == pid != os.getpgid(0)
    assert check_server_session(vllm_server.base_url) is None


def test_papermill_kernel_in_callers_session_with_its_own_group(tmp_path: Path) -> None:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell("X = 0", metadata={"tags": ["parameters"]}),
                      nbformat.v4.new_code_cell(PROBE_CELL)]  # fmt: skip
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    source = tmp_path / "probe.ipynb"
    nbformat.write(notebook, source)
    executed = tmp_path / "probe-out.ipynb"
    execute_path(source, executed, {"X": 1})
    output = nbformat.read(executed, as_version=4).cells[-1].outputs[0]["text"]
    kernel = json.loads(output.strip().splitlines()[-1])
    assert kernel["sid"] == os.getsid(0)
    assert kernel["pgid"] == kernel["pid"] != os.getpgid(0)


@pytest.mark.skipif(not autogroup_enabled(), reason="autogroups are off on this machine: nothing to warn about")
def test_a_server_in_another_session_is_warned_about() -> None:
    port = free_port()
    listener = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while (warning := check_server_session(f"http://127.0.0.1:{port}")) is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert warning is not None
        assert f"another session ({listener.pid})" in warning
    finally:
        listener.kill()
        listener.wait()
