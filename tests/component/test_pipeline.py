"""`toolkit run`, `toolkit demo` and a batch variant go through one pipeline (toolkit.jupyter.pipeline.run_one).

Each launches a server that answers /health and dies at the first other request (the preflight's): each says so
in the same words, fails, and leaves the server recorded as stopped. Before the pipeline, only `toolkit run`
said it (the demo said nothing, the batch other words). The demo's embedded vLLM is swapped for that server.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.tiny_params import tiny_params
from toolkit.servers.embedded.server import free_port
from toolkit.servers.launch import LAUNCH_FILE

REPO = Path(__file__).resolve().parents[2]
KEY_ENV = "PIPELINE_TEST_KEY"  # unset: the server needs no key

pytestmark = [pytest.mark.process, pytest.mark.timeout(240)]

DYING = """
import http.server, os, sys
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path != "/health":
            os._exit(7)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
    do_POST = do_GET
print("dying server: up", flush=True)
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""

DIED = re.compile(r"error: the server exited with code 7 during the run \(log: (\S+)\); finished measurements are "
                  r"kept, its cells are Error; rerun with --resume")  # fmt: skip

DEMO = """
import sys
from toolkit.params import ServerSpec
from toolkit.servers.embedded import server
server.embedded_spec = lambda config, port: ServerSpec(command=[sys.executable, "-c", {dying!r}, str(port)])
from toolkit.cli import main
sys.exit(main({args!r}))
"""


def common(port: int) -> dict[str, Any]:
    server = {"command": [sys.executable, "-c", DYING, str(port)], "health_timeout_s": 30}
    return tiny_params(base_url=f"http://127.0.0.1:{port}", contexts=["64"], api_key_env=KEY_ENV,
                       control_window_s=0.5, server=server)  # fmt: skip


def env() -> dict[str, str]:
    values = {k: v for k, v in os.environ.items() if k != KEY_ENV}
    values["PYTHONPATH"] = str(REPO) + os.pathsep + values.get("PYTHONPATH", "")
    return values | {"MPLBACKEND": "Agg", "NO_PROXY": "127.0.0.1,localhost"}


def toolkit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env(), capture_output=True, text=True, timeout=180)


def assert_stopped_after_dying(folder: Path) -> None:
    record = json.loads((folder / LAUNCH_FILE).read_text())
    assert record["exit_code"] == 7 and record["stopped_at"], record
    assert "dying server: up" in (folder / "server.log").read_text()


def test_run_reports_the_server_that_died(tmp_path: Path) -> None:
    params, out = tmp_path / "params.yaml", tmp_path / "out"
    params.write_text(yaml.safe_dump(common(free_port())))
    done = toolkit("-m", "toolkit", "run", str(params), "--out", str(out))
    assert done.returncode != 0
    died = DIED.search(done.stderr)
    assert died and died.group(1) == str(out / "server.log"), done.stderr[-2000:]
    assert "server: launching" in done.stdout and "healthy" in done.stdout
    assert_stopped_after_dying(out)


def test_a_batch_variant_reports_the_server_that_died(tmp_path: Path) -> None:
    sweep, out = tmp_path / "sweep.yaml", tmp_path / "out"
    sweep.write_text(yaml.safe_dump({**common(free_port()), "variants": [{"label": "a"}]}))
    done = toolkit("-m", "toolkit", "batch", str(sweep), "--out", str(out))
    assert done.returncode == 1, done.stderr[-2000:]
    assert json.loads((out / "batch.json").read_text())["variants"]["a"]["state"] == "failed"
    log = (out / "a" / "run.log").read_text()  # the variant's own lines
    died = DIED.search(log)
    assert died and died.group(1) == str(out / "a" / "server.log"), log[-2000:]
    assert "server: launching" in log and "healthy" in log
    assert_stopped_after_dying(out / "a")


def test_demo_reports_the_server_that_died(tmp_path: Path) -> None:
    params = tmp_path / "demo.yaml"
    params.write_text(yaml.safe_dump({k: v for k, v in common(0).items() if k not in ("server", "base_url")}))
    args = ["demo", "--params", str(params), "--outputs", str(tmp_path / "outputs")]
    done = toolkit("-c", DEMO.format(dying=DYING, args=args))
    assert done.returncode != 0
    (out,) = (tmp_path / "outputs" / "run").iterdir()  # outputs/<run_label>/<timestamp>/
    died = DIED.search(done.stderr)
    assert died and died.group(1) == str(out / "server.log"), done.stderr[-2000:]
    assert "server: launching" in done.stdout and "healthy" in done.stdout
    assert_stopped_after_dying(out)
