"""server.json: what run.json says about the launch, and the note an Error cell gets when the server died."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from toolkit.base.errors import ResultsError
from toolkit.results.store import write_json_atomic
from toolkit.servers.launch import LAUNCH_FILE, exit_note, launch_info
from toolkit.servers.managed import exit_description


def _record(tmp_path: Path, **fields: object) -> None:
    base = {"launched_by": "toolkit", "command": "VLLM_API_KEY=<redacted> vllm serve m", "pid": None,
            "log_file": str(tmp_path / "server.log"), "exit_code": None, "log_tail": None, "stopped_at": None,
            "engine": {"version": "0.32.0", "commit": None, "build": "cpu"}}  # fmt: skip
    write_json_atomic(tmp_path / LAUNCH_FILE, base | fields)


def _dead_pid() -> int:
    done = subprocess.Popen(["true"])
    done.wait()
    return done.pid


def test_a_found_server_has_no_launch(tmp_path: Path) -> None:
    assert launch_info(tmp_path) == {"launched_by_toolkit": False}
    assert exit_note(tmp_path) is None


def test_a_launched_server_is_described(tmp_path: Path) -> None:
    _record(tmp_path, pid=12345, startup_s=21.5)
    info = launch_info(tmp_path)
    assert info["launched_by_toolkit"] is True and info["command"].startswith("VLLM_API_KEY=<redacted> ")
    assert info["engine"]["build"] == "cpu" and info["startup_s"] == 21.5


def test_the_note_names_the_exit_and_the_log_tail(tmp_path: Path) -> None:
    _record(tmp_path, pid=_dead_pid(), exit_code=-9, log_tail="INFO engine step\nINFO last line")
    assert exit_note(tmp_path) == ("the server was killed by SIGKILL (exit -9); last lines of its log:\n"
                                   "INFO engine step\nINFO last line")  # fmt: skip
    assert exit_description(3) == "exited with code 3"


def test_no_note_while_the_server_runs_or_after_the_toolkit_stopped_it(tmp_path: Path) -> None:
    _record(tmp_path, pid=os.getpid())
    assert exit_note(tmp_path) is None  # alive: the cell failed for another reason
    _record(tmp_path, pid=_dead_pid(), stopped_at="2026-01-01T00:00:00+00:00")
    assert exit_note(tmp_path) is None


def test_a_server_gone_without_a_recorded_exit(tmp_path: Path) -> None:
    pid = _dead_pid()
    _record(tmp_path, pid=pid)
    assert exit_note(tmp_path, wait_s=0.3) == f"the server (pid {pid}) is gone; its exit status was not recorded"


def test_a_newer_or_damaged_record_is_refused_in_one_line_not_taken_for_no_launch(tmp_path: Path) -> None:
    """server.json of a newer toolkit is not 'found running': it is refused as every reader refuses it."""
    (tmp_path / LAUNCH_FILE).write_text('{"schema_version": 99, "launched_by": "toolkit", "pid": 12345}')
    with pytest.raises(ResultsError, match=r"server\.json: schema_version 99 is newer than this toolkit reads"):
        launch_info(tmp_path)
    (tmp_path / LAUNCH_FILE).write_text("{not json")
    with pytest.raises(ResultsError, match=r"server\.json: not a JSON document .*damaged"):
        exit_note(tmp_path)
