"""Is a local server in another session than the measuring client? Then autogroups can stall them both.

Linux gives every session (`setsid`) its own scheduler autogroup when `kernel.sched_autogroup_enabled` is 1;
on a small machine a busy vLLM in one autogroup and the client in another starve each other for seconds at
a time (docs/METHOD.md, Pauses). The run warns once when it sees that layout.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

import psutil

AUTOGROUP_SETTING = Path("/proc/sys/kernel/sched_autogroup_enabled")
LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}


def split_session_warning(*, autogroup_enabled: bool, server_sessions: set[int], client_session: int) -> str | None:
    """The warning to print, or None when the server shares the client's session (or autogroups are off)."""
    others = server_sessions - {client_session}
    if not autogroup_enabled or not others:
        return None
    return (
        f"warning: the server runs in another session ({', '.join(map(str, sorted(others)))}) than this client "
        f"({client_session}) and kernel.sched_autogroup_enabled is 1: the two can stall each other for seconds "
        "(cells come out disturbed). Start the server from the same shell without setsid/nohup-style detaching, "
        "or let the toolkit start it (python -m toolkit serve, make demo)."
    )


def autogroup_enabled() -> bool:
    try:
        return AUTOGROUP_SETTING.read_text().strip() == "1"
    except OSError:
        return False


def listening_pids(base_url: str) -> list[int]:
    """Processes on this machine listening on a loopback `base_url`'s port (empty when none can be seen)."""
    url = urlsplit(base_url)
    if url.hostname not in LOOPBACK_HOSTS:
        return []
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        connections = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, OSError):
        return []
    return [c.pid for c in connections if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid]


def listening_sessions(base_url: str) -> set[int]:
    """Sessions of the local processes listening on `base_url`'s port."""
    sessions: set[int] = set()
    for pid in listening_pids(base_url):
        try:
            sessions.add(os.getsid(pid))
        except OSError:
            continue
    return sessions


def check_server_session(base_url: str) -> str | None:
    """The split-session warning for a server on this machine at `base_url`, or None."""
    if urlsplit(base_url).hostname not in LOOPBACK_HOSTS or not autogroup_enabled():
        return None
    return split_session_warning(
        autogroup_enabled=True, server_sessions=listening_sessions(base_url), client_session=os.getsid(0)
    )
