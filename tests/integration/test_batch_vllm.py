"""`toolkit batch` end to end on the real vLLM (CPU, tiny model): two variants from a grid over --max-num-seqs.

Each variant's server is launched from the sweep's `server:` block (`--max-num-seqs {max_num_seqs}`), measured
and stopped, one after another. Run under the machine's vLLM lock (`flock /tmp/vllm.lock`).
"""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import TEST_API_KEY
from tests.integration.test_managed_vllm import EXAMPLE, env
from tests.processes import assert_group_gone
from toolkit.base.schema import PHASE_TITLES
from toolkit.batch.index import headline
from toolkit.method.number_format import format_tok_s
from toolkit.results import runs
from toolkit.servers.embedded.server import VLLM_PYTHON, ensure_model, free_port
from toolkit.servers.launch import LAUNCH_FILE

REPO = Path(__file__).resolve().parents[2]
LABELS = ("max_num_seqs=1", "max_num_seqs=2")
RAN = ("Valid", "Requests queued")

pytestmark = pytest.mark.timeout(1200)


def sweep_file(tmp_path: Path) -> Path:
    """params/managed-embedded.yaml's server block on a free port, --max-model-len 2048 and a grid over max_num_seqs."""
    example = yaml.safe_load(EXAMPLE.read_text())
    port = free_port()
    command = (example["server"]["command"].replace(".venv-vllm/bin/python", str(VLLM_PYTHON))
               .replace(".cache/tiny-llama", str(ensure_model())).replace("--port 8011", f"--port {port}")
               .replace("--max-model-len 4096", "--max-model-len 2048"))  # fmt: skip
    sweep = {
        "base_url": f"http://127.0.0.1:{port}", "contexts": ["256"], "concurrency": [1, 2], "duration_s": 2,
        "max_output": 256, "readiness_timeout_s": 30, "control_window_s": 1, "hardware_type": "CPU (no GPU)",
        "server": {**example["server"], "command": command + " --max-num-seqs {max_num_seqs}"},
        "grid": {"max_num_seqs": [1, 2]},
    }  # fmt: skip
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep, sort_keys=False))
    return path


def status_rows(markdown: str) -> list[list[str]]:
    """The rows of compare.md's status differences table."""
    section = markdown.split("## Status differences", 1)[1]
    lines = [line for line in section.splitlines() if line.startswith("| ")][1:]  # without the header
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines]


def assert_server_agrees(m: dict[str, Any]) -> None:
    """As tests/integration/test_matrix_engine.py: the server's token count lies in the client's bracket (± 2 %)."""
    assert m["client_tokens_min"] > 0, m
    assert 0.98 * m["client_tokens_min"] <= m["server_output_tokens"] <= 1.02 * m["client_tokens_max"], m


def test_a_batch_of_two_launched_vllm_variants_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "batch"
    cmd = [sys.executable, "-m", "toolkit", "batch", str(sweep_file(tmp_path)), "--out", str(out)]
    done = subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, timeout=1100)
    (tmp_path / "batch.log").write_text(done.stdout + done.stderr)
    assert done.returncode == 0, done.stderr[-3000:]

    state = json.loads((out / "batch.json").read_text())
    assert state["labels"] == list(LABELS)
    frames = {}
    for label in LABELS:
        folder = out / label
        assert state["variants"][label]["state"] == "done", state["variants"][label]
        for name in ("report.html", "report.md", "results.csv", "run.json", "prefill.ipynb", "decode_matrix.ipynb"):
            assert (folder / name).exists(), (label, name)
        launched = json.loads((folder / LAUNCH_FILE).read_text())
        assert f"--max-num-seqs {label.split('=')[1]}" in launched["command"] and launched["stopped_at"]
        assert_group_gone(launched["pid"], timeout_s=10, what="vLLM")
        frames[label], _ = runs.load_run(folder)
        for m in frames[label].to_dict("records"):
            assert m["status"] in RAN, m
            if m["phase"] == "decode" and m["status"] == "Valid":
                assert_server_agrees(m)
        leaks = [p for p in folder.rglob("*") if p.is_file() and TEST_API_KEY.encode() in p.read_bytes()]
        assert leaks == []
    one = frames["max_num_seqs=1"]
    assert one[(one["phase"] == "decode") & (one["concurrency"] == 2)]["status"].tolist() == ["Requests queued"]

    page = (out / "index.html").read_text()
    for label in LABELS:  # every report linked, with its headline numbers
        row = next(line for line in page.splitlines() if f'href="{label.replace("=", "%3D")}/report.html"' in line)
        numbers = headline(frames[label])
        assert f"{format_tok_s(numbers['prefill_tok_s'], trim_zero=True)} at 256" in row, row
        best = f"{format_tok_s(numbers['best_total_tok_s'])} at 256 × {numbers['best_concurrency']}"
        assert html.escape(best) in row, row
        assert "Valid " in row and "done" in row
    assert 'href="compare/compare.html"' in page

    # The comparison's status differences are exactly those of the runs' own results.csv.
    csv = {label: runs.load_run(out / label)[0] for label in LABELS}
    statuses = {label: {(r["phase"], r["context"], r["concurrency"]): r["status"]
                        for r in frame.to_dict("records")} for label, frame in csv.items()}  # fmt: skip
    cells = sorted(set().union(*statuses.values()), key=lambda k: (k[0] != "prefill", k[1], k[2]))
    expected = [[PHASE_TITLES[p], c, str(n), *(statuses[label].get((p, c, n), "—") for label in LABELS)]
                for p, c, n in cells if len({statuses[label].get((p, c, n)) for label in LABELS}) > 1]  # fmt: skip
    compare_md = (out / "compare" / "compare.md").read_text()
    assert status_rows(compare_md) == expected
    assert ["Sustained decode", "256", "2", "Requests queued", "Valid"] in expected
    assert (out / "compare" / "compare.html").exists()
    assert re.search(r"\| \[max_num_seqs=2\]\(max_num_seqs=2/report\.md\) \| done", (out / "index.md").read_text())
