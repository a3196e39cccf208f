"""Scheduler autogroups: a local server in another session than the measuring client stalls it; raise our weight.

Linux gives every session (`setsid`) its own scheduler autogroup when `kernel.sched_autogroup_enabled` is 1;
on a small machine a busy vLLM in one autogroup and the client in another starve each other for seconds at
a time (docs/method/client.md, Pauses). Papermill and JupyterLab start every kernel in a session of its own, and a
server started from another terminal has its own too. While it measures such a server, the client raises its
own autogroup's weight (`/proc/self/autogroup`, nice -15: measured in benchmarks/machine_pauses.py) when it
may, and restores it afterwards; when it may not, it says what would help in that layout.
"""

from __future__ import annotations

import errno
import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from urllib.parse import urlsplit

from toolkit.base.errors import ParamsError
from toolkit.servers.listeners import is_this_machine, listening_pids

AUTOGROUP_SETTING = Path("/proc/sys/kernel/sched_autogroup_enabled")
OWN_AUTOGROUP = Path("/proc/self/autogroup")
# The client's autogroup nice while it measures a server in another session; TOOLKIT_AUTOGROUP_NICE=0 turns the
# protection off (for diagnosis and the benchmark's unprotected layout).
DEFAULT_CLIENT_NICE = -15


def autogroup_enabled() -> bool:
    try:
        return AUTOGROUP_SETTING.read_text().strip() == "1"
    except OSError:
        return False


def listening_sessions(base_url: str) -> set[int]:
    """Sessions of the local processes listening on `base_url`'s port."""
    sessions: set[int] = set()
    for pid in listening_pids(base_url):
        try:
            sessions.add(os.getsid(pid))
        except OSError:
            continue
    return sessions


def needs_protection(*, autogroup_enabled: bool, server_sessions: set[int], client_session: int) -> bool:
    """Whether the server (seen in `server_sessions`) runs in another autogroup than the client."""
    return autogroup_enabled and bool(server_sessions - {client_session})


def split_session_warning(*, server_sessions: set[int], client_session: int, pid: int, target_nice: int) -> str:
    """The warning when the client may not raise its own weight: what helps in this layout, with the commands."""
    others = sorted(server_sessions - {client_session})
    return (
        f"warning: the server runs in another session ({', '.join(map(str, others))}) than this client "
        f"({client_session}) and kernel.sched_autogroup_enabled is 1: the two can stall each other for seconds "
        "(cells come out disturbed), and this process may not raise its scheduler weight (needs root or "
        f"CAP_SYS_NICE). Run `sudo sh -c 'echo {target_nice} > /proc/{pid}/autogroup'` before measuring, or "
        'let the toolkit start the server in this session (SERVER = "embedded" in a notebook, a params '
        "`server:` block, python -m toolkit run/demo)."
    )


def parse_autogroup_nice(text: str) -> int:
    """The nice value from `/proc/PID/autogroup` ("/autogroup-25 nice 0")."""
    return int(text.split()[-1])


def own_autogroup_nice() -> int | None:
    """This session's autogroup nice, or None in the root autogroup (the file reads empty: a process whose
    session began before autogroups, e.g. a container's first process and what it starts without `setsid`).
    Root-group tasks are scheduled one by one beside other sessions' groups: no group of ours to starve or raise."""
    text = OWN_AUTOGROUP.read_text()
    return parse_autogroup_nice(text) if text.strip() else None


def client_nice_setting() -> int:
    """The nice the client's autogroup takes while measuring (TOOLKIT_AUTOGROUP_NICE, default -15)."""
    value = os.environ.get("TOOLKIT_AUTOGROUP_NICE", "").strip()
    if not value:
        return DEFAULT_CLIENT_NICE
    if not re.fullmatch(r"-?\d{1,2}", value) or not -20 <= int(value) <= 19:
        raise ParamsError("TOOLKIT_AUTOGROUP_NICE: not a whole number from -20 to 19 (its value is not shown)")
    return int(value)


def write_autogroup_nice(nice: int, autogroup: Path) -> None:
    """Set the nice of the autogroup whose `/proc/PID/autogroup` file is `autogroup`; the kernel refuses writes
    closer than 100 ms apart (EAGAIN) to processes without CAP_SYS_ADMIN, so wait that out once."""
    for attempt in range(2):
        try:
            autogroup.write_text(f"{nice}\n")
            return
        except OSError as error:
            if error.errno != errno.EAGAIN or attempt:
                raise
            time.sleep(0.11)


def _write_own_nice(nice: int) -> None:
    """Set this session's autogroup nice (`write_autogroup_nice`)."""
    write_autogroup_nice(nice, OWN_AUTOGROUP)


@contextmanager
def protected_from_autogroups(base_url: str, say: Callable[[str], None]) -> Iterator[None]:
    """While measuring a local server in another session: this session's autogroup at a higher weight (restored
    afterwards), said in one line; or the warning with what helps, when this process may not raise it."""
    target = client_nice_setting()
    if not (target < 0 and is_this_machine(urlsplit(base_url).hostname) and autogroup_enabled()):
        yield
        return
    client, servers = os.getsid(0), listening_sessions(base_url)
    if not needs_protection(autogroup_enabled=True, server_sessions=servers, client_session=client):
        yield
        return
    try:
        before = own_autogroup_nice()
        if before is not None and before > target:
            _write_own_nice(target)
    except (OSError, ValueError):
        say(split_session_warning(server_sessions=servers, client_session=client, pid=os.getpid(), target_nice=target))
        yield
        return
    if before is None:
        yield
        return
    if before > target:
        say(
            f"autogroups: the server runs in another session; this client's scheduler weight raised (autogroup "
            f"nice {before} -> {target}) while it measures, so the two do not stall each other"
        )
    try:
        yield
    finally:
        if before > target:
            with suppress(OSError):  # the session keeps the higher weight; nothing measured depends on it
                _write_own_nice(before)
