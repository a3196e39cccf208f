"""toolkit.base.folder_lock (one writer, its kernels inside it) and toolkit.matrix.run_folder (what a resumed run
compares)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from toolkit.base.errors import RunRefused
from toolkit.base.folder_lock import LOCK_FILE, hold
from toolkit.matrix.discovery import ServerInfo
from toolkit.matrix.run_folder import server_differences
from toolkit.results.run_document import RunDocument

REPO = Path(__file__).resolve().parents[2]

HOLD = """
import sys, time
from pathlib import Path
from toolkit.base.folder_lock import hold
with hold(Path(sys.argv[1])):
    print("held", flush=True)
    sys.stdin.readline()
"""
TRY = """
import sys
from pathlib import Path
from toolkit.base.folder_lock import hold
with hold(Path(sys.argv[1])):
    print("inside")
"""


def test_the_lock_file_holds_the_pid_and_goes_with_the_run(tmp_path: Path) -> None:
    with hold(tmp_path):
        assert (tmp_path / LOCK_FILE).read_text() == f"{os.getpid()}\n"
        with hold(tmp_path):  # this process again (a run and its own matrix): allowed, the outer lock stays
            pass
        assert (tmp_path / LOCK_FILE).exists()
    assert list(tmp_path.iterdir()) == []


def test_a_folder_it_created_and_left_empty_is_removed(tmp_path: Path) -> None:
    with hold(tmp_path / "new"):
        assert (tmp_path / "new").is_dir()
    assert not (tmp_path / "new").exists()
    with hold(tmp_path / "kept"):
        (tmp_path / "kept" / "run.json").write_text("{}")
    assert sorted(p.name for p in (tmp_path / "kept").iterdir()) == ["run.json"]


def test_a_lock_left_by_a_killed_run_is_taken_over(tmp_path: Path) -> None:
    (tmp_path / LOCK_FILE).write_text("999999999\n")  # its holder is gone: nobody holds the flock
    with hold(tmp_path):
        assert (tmp_path / LOCK_FILE).read_text().strip() != "999999999"


@pytest.mark.process
def test_another_process_is_refused_naming_the_holder_and_its_children_are_not(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], cwd=REPO, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        busy = rf"^out: {tmp_path} is in use by another toolkit run \(pid {holder.pid}\); wait for it to end"
        with pytest.raises(RunRefused, match=busy), hold(tmp_path):
            pass
    finally:
        holder.communicate("\n", timeout=10)
    with hold(tmp_path):  # a child of the holder runs inside its lock, as a notebook kernel of a run does
        child = subprocess.run([sys.executable, "-c", TRY, str(tmp_path)], cwd=REPO, capture_output=True, text=True)
    assert child.stdout.strip() == "inside", child.stderr


SERVER = ServerInfo(base_url="http://127.0.0.1:8000", model="m", max_model_len=4096, version="0.10",
                    kv_budget_tokens=8192, kv_budget_source="metrics", block_size=16, prefix_caching=True,
                    metrics_available=True)  # fmt: skip
RECORDED = RunDocument(
    server={"model": "m", "max_model_len": 4096, "kv_budget_tokens": 8192}, launch_command="vllm serve m"
)


@pytest.mark.parametrize(
    ("server", "command", "expected"),
    [
        (SERVER, "vllm serve m", ""),
        (replace(SERVER, version="0.11", base_url="http://other:1"), "vllm serve m", ""),  # not what is compared
        (replace(SERVER, kv_budget_tokens=None), "vllm serve m", ""),  # unknown now: not a difference
        (replace(SERVER, model="n"), "vllm serve m", "model: 'm' -> 'n'"),
        (replace(SERVER, max_model_len=2048, kv_budget_tokens=4096), "vllm serve m",
         "max_model_len: 4096 -> 2048, KV budget tokens: 8192 -> 4096"),
        (None, "vllm serve n", "launch command: 'vllm serve m' -> 'vllm serve n'"),
    ],
)  # fmt: skip
def test_what_a_resumed_run_compares(server: ServerInfo | None, command: str, expected: str) -> None:
    assert server_differences(RECORDED, server, command) == expected


def test_the_port_in_a_launch_command_is_not_a_difference() -> None:
    recorded = RunDocument(launch_command="python -m vllm --model m --port 41001 --max-model-len 4096")
    assert server_differences(recorded, None, "python -m vllm --model m --port 52777 --max-model-len 4096") == ""
    assert server_differences(recorded, None, "python -m vllm --model m --port=52777 --max-model-len 8192") != ""


def test_a_lock_file_that_is_a_symbolic_link_is_refused_and_its_target_left_alone(tmp_path: Path) -> None:
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / LOCK_FILE).symlink_to(target)
    with pytest.raises(RunRefused, match=r"\.lock is a symbolic link; the lock must be a plain file"), hold(folder):
        pass
    assert target.read_text() == "keep me"
