"""The real vLLM killed mid-cell (issue: faults): that cell is Error with a message that says what happened,
the results so far are kept, and after a restart on the same port `--resume` finishes the run."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import start_server
from toolkit.matrix import decode
from toolkit.matrix.runner import run_matrix
from toolkit.params import make_params
from toolkit.results.store import RESULTS_FILE, load_measurements
from toolkit.servers.embedded.server import ServerConfig, free_port


def _signal_window_open(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Set when a decode cell's streams are ready, i.e. its measurement window opens."""
    opened = threading.Event()
    wait_ready = decode._wait_ready

    async def wait_ready_then_signal(*args: Any) -> bool:
        ready = await wait_ready(*args)
        opened.set()
        return ready

    monkeypatch.setattr(decode, "_wait_ready", wait_ready_then_signal)
    return opened


def test_vllm_killed_mid_cell_then_restarted_and_resumed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    config = ServerConfig(port=port, max_model_len=1024)
    params = make_params({"base_url": f"http://127.0.0.1:{port}", "contexts": ["256"], "concurrency": [1, 2],
                          "duration_s": 8, "max_output": 640, "readiness_timeout_s": 60,
                          "disturbed_retries": 0, "control_window_s": 0})  # fmt: skip
    out = tmp_path / "run"  # no drift control: the kill must land in a measured cell
    server = start_server(config)
    window_open = _signal_window_open(monkeypatch)
    box: dict[str, object] = {}
    try:
        runner = threading.Thread(target=lambda: box.update(first=run_matrix(params, out, progress=False)))
        runner.start()
        assert window_open.wait(timeout=180), "the first decode cell never opened its window"
        time.sleep(1.0)  # inside the 8 s window, its stream decoding
        os.killpg(server.process.pid, signal.SIGKILL)  # no goodbye: the engine and the API server die at once
        runner.join(timeout=300)
        assert not runner.is_alive(), "the run did not finish after the server died"
    finally:
        server.stop()
    first = {m.key: m for m in box["first"]}
    assert first[("prefill", 256, 1)].status == "Valid"  # finished before the kill: kept
    killed = first[("decode", 256, 1)]
    assert killed.status == "Error" and killed.total_tok_s is None, killed
    said = ("connection", "closed", "reset", "refused", "ended before [done]")  # what the client saw of it
    assert any(word in killed.error.lower() for word in said), killed.error
    assert first[("decode", 256, 2)].status == "Error"  # the server was gone: recorded, and the run went on
    on_disk = load_measurements(out / RESULTS_FILE)
    assert [m.key for m in on_disk][:1] == [("prefill", 256, 1)]

    restarted = start_server(config)
    try:
        final = {m.key: m for m in run_matrix(params, out, resume=True, progress=False)}
    finally:
        restarted.stop()
    assert final[("prefill", 256, 1)] == first[("prefill", 256, 1)]  # not redone
    for n in (1, 2):  # measured again on the restarted server (a pause may leave one queued or flagged)
        assert final[("decode", 256, n)].status in ("Valid", "Requests queued"), final
        assert final[("decode", 256, n)].output_tokens > 0 and final[("decode", 256, n)].error is None
