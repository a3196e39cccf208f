"""Autogroups on every path: the toolkit's own layout (one session), plain papermill against a server in its own
session (the measuring kernel raises its weight), and a notebook that starts the embedded server itself.

Separate sessions get separate scheduler autogroups, which stall each other for seconds
(docs/method/client.md, Machine pauses).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import psutil
import pytest
import yaml

from tests.conftest import TEST_API_KEY
from tests.processes import assert_group_gone
from toolkit.jupyter.execute import execute_path
from toolkit.results.store import ResultStore, latest_by_key
from toolkit.servers.autogroups import OWN_AUTOGROUP, autogroup_enabled, own_autogroup_nice, protected_from_autogroups
from toolkit.servers.embedded.server import EmbeddedServer, free_port

REPO = Path(__file__).resolve().parents[2]
PROBE_CELL = "import json, os\nprint(json.dumps({'sid': os.getsid(0), 'pgid': os.getpgid(0), 'pid': os.getpid()}))"
# Whether this process may raise its autogroup's weight (root, or CAP_SYS_NICE): probed, not assumed.
needs_autogroups = pytest.mark.skipif(not autogroup_enabled(), reason="autogroups are off: nothing to protect from")


def may_raise_weight() -> bool:
    """Whether a process in a session of its own (as papermill and JupyterLab start kernels) may raise the weight
    of its new autogroup: probed in such a process, since this one may be in the root autogroup, which has none."""
    probe = "from pathlib import Path; Path('/proc/self/autogroup').write_text('-1\\n')"
    return subprocess.run([sys.executable, "-c", probe], start_new_session=True, capture_output=True).returncode == 0


def test_server_in_callers_session_with_its_own_group(vllm_server: EmbeddedServer) -> None:
    assert vllm_server.process is not None
    pid = vllm_server.process.pid
    assert os.getsid(pid) == os.getsid(0)
    assert os.getpgid(pid) == pid != os.getpgid(0)
    said: list[str] = []
    with protected_from_autogroups(vllm_server.base_url, said.append):
        pass
    assert said == []  # one session, one autogroup: nothing to raise


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


@needs_autogroups
def test_a_server_in_another_session_raises_the_clients_weight_or_warns() -> None:
    port = free_port()
    listener = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while not any(c.laddr and c.laddr.port == port for c in psutil.net_connections("tcp")):
            assert time.monotonic() < deadline, "the listener did not start"
            time.sleep(0.1)
        before = own_autogroup_nice()
        privileged = may_raise_weight()
        said: list[str] = []
        with protected_from_autogroups(f"http://127.0.0.1:{port}", said.append):
            during = own_autogroup_nice()
        if before is None:  # the root autogroup (CI's first process): no group of ours competes with the server's
            assert said == [] and during is None and OWN_AUTOGROUP.read_text() == ""
            return
        assert len(said) == 1
        if privileged:
            assert during == -15 and "weight raised" in said[0]
        else:  # no privilege here: the warning instead, with the command that would help
            assert (
                during == before and said[0].startswith("warning:") and f"another session ({listener.pid})" in said[0]
            )
        assert own_autogroup_nice() == before
    finally:
        listener.kill()
        listener.wait()


@needs_autogroups
def test_plain_papermill_against_a_server_in_its_own_session_measures_clean(
    server_in_own_session: str, tmp_path: Path
) -> None:
    """The issue's layout: 5 of 6 cells were disturbed here before the kernel raised its weight. The server
    (conftest's, shared with the stream-interval test) sends chunks of 4 tokens: the matrix does not mind."""
    privileged = may_raise_weight()
    out = tmp_path / "run"
    parameters = {"BASE_URL": server_in_own_session, "CONTEXTS": "512,1K", "CONCURRENCY": "1,2,4", "DURATION_S": 3,
                  "CONTROL_WINDOW_S": 1, "MAX_OUTPUT": 512, "RESULTS_DIR": str(out)}  # fmt: skip
    subprocess.run([sys.executable, "-m", "papermill", "notebooks/decode_matrix.ipynb", str(tmp_path / "out.ipynb"),
                    "-y", yaml.safe_dump(parameters)], cwd=REPO, check=True, capture_output=True,
                   env={**{k: v for k, v in os.environ.items() if k != "TOOLKIT_AUTOGROUP_NICE"},
                        "VLLM_API_KEY": TEST_API_KEY})  # fmt: skip
    executed = (tmp_path / "out.ipynb").read_text()
    if not privileged:
        assert "may not raise its scheduler weight" in executed, "no privilege: the warning must say what helps"
        pytest.skip("this process may not raise its autogroup's weight: the warning was checked, nothing measured")
    assert "weight raised (autogroup nice 0 -> -15)" in executed
    cells = [m for m in latest_by_key(ResultStore(out).load()).values() if m.phase == "decode"]
    assert len(cells) == 6
    assert [(m.context_tokens, m.concurrency, m.disturbed) for m in cells if m.disturbed] == []
    assert all(m.attempts == 1 for m in cells), [(m.context_tokens, m.concurrency, m.attempts) for m in cells]


def test_a_notebook_starts_the_embedded_server_itself_and_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "run"
    parameters = {"SERVER": "embedded", "CONTEXTS": "512", "MAX_OUTPUT": 512, "RESULTS_DIR": str(out)}
    before = {p.pid for p in psutil.process_iter()}
    subprocess.run([sys.executable, "-m", "papermill", "notebooks/prefill.ipynb", str(tmp_path / "out.ipynb"),
                    "-y", yaml.safe_dump(parameters)], cwd=REPO, check=True, capture_output=True)  # fmt: skip
    cells = list(latest_by_key(ResultStore(out).load()).values())
    assert [(m.phase, m.context_tokens, m.status) for m in cells] == [("prefill", 512, "Valid")]
    assert cells[0].total_tok_s and cells[0].total_tok_s > 0  # prompt tok/s of the cold request
    record = json.loads((out / "server.json").read_text())
    run = json.loads((out / "run.json").read_text())
    assert run["launch"]["launched_by_toolkit"] and "vllm.entrypoints.openai.api_server" in run["launch"]["command"]
    assert record["stopped_at"] and record["pid"]
    assert_group_gone(int(record["pid"]), what="the notebook's embedded vLLM")
    leftover = [p.info for p in psutil.process_iter(["pid", "cmdline"]) if p.pid not in before
                and "vllm.entrypoints" in " ".join(p.info["cmdline"] or [])]  # fmt: skip
    assert leftover == []
