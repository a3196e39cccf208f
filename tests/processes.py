"""Test helpers about processes the toolkit launched."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from toolkit.servers.managed import has_live_member

if TYPE_CHECKING:
    from toolkit.servers.embedded.server import EmbeddedServer


def assert_group_gone(pgid: int, timeout_s: float = 5.0, what: str = "the server") -> None:
    """Fail unless every process of group `pgid` has ended within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while has_live_member(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not has_live_member(pgid), f"processes of {what}'s group {pgid} are still running"


def assert_stop_leaves_no_vllm_process(server: EmbeddedServer) -> None:
    """Stop a running embedded server: its API server and engine processes (two or more, one group) all end."""
    pgid = server.process.pid
    members = [p for p in os.listdir("/proc") if p.isdigit() and _in_group(int(p), pgid)]
    server.stop()
    assert len(members) >= 2, "expected the API server and at least one engine process"
    assert_group_gone(pgid, timeout_s=10, what="the stopped vLLM")
    port_flag = f"--port\0{server.port}\0"
    assert not [p for p in members if _alive(p) and port_flag in _cmdline(p)]


def _alive(pid: str) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text()
    except OSError:
        return ""


def _in_group(pid: int, pgid: int) -> bool:
    try:
        return os.getpgid(pid) == pgid
    except ProcessLookupError:
        return False
