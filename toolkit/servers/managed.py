"""A server process the toolkit launches: its own process group in the caller's session, `/health`, stop.

Not a new session: Linux gives every session its own scheduler autogroup, and a busy vLLM in one autogroup
starves a client in another for seconds at a time (docs/method/client.md, Machine pauses).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from toolkit.base.errors import HealthTimeout, PortTaken, ServerError
from toolkit.base.tls import tls_context
from toolkit.servers.listeners import listening_pids, port_listeners

TAIL_BYTES = 64 * 1024
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # what stops a run and its launched server
# Where vLLM makes its ZMQ sockets: the temporary folder by default, and a stopped vLLM leaves them there (three a
# launch), as it leaves its torch.distributed file store (`vllm_dist_<hex>`, one a launch: 203 of them in this
# machine's /tmp on 2026-12-07). Unless the caller's environment names a socket folder, each launch gets a folder of
# its own as both its socket folder and its TMPDIR, removed when it stops.
IPC_ENV = "VLLM_RPC_BASE_PATH"
TMP_ENV = "TMPDIR"
SOCKET_PATH_MAX = 107  # bytes of a Unix socket's path (sun_path, its NUL aside)
SOCKET_NAME_CHARS = 36  # vLLM names each socket by a UUID


def port_taken(base_url: str) -> str | None:
    """What already holds `base_url`'s port (a local listener's pid, or an answer), or None when it is free."""
    url = urlsplit(base_url)
    port = url.port or (443 if url.scheme == "https" else 80)
    if pids := sorted(set(listening_pids(base_url))):
        return f"port {port} is already listened on by pid {', '.join(map(str, pids))}"
    try:
        with socket.create_connection((url.hostname or "127.0.0.1", port), timeout=2):
            return f"{base_url} already answers"
    except OSError:
        return None


def strangers(base_url: str, pgid: int) -> list[str]:
    """The local listeners on `base_url`'s port outside process group `pgid`, as `pid N`: one whose owner cannot
    be seen (another user's) counts, since it could be answering in the launched server's place."""
    listeners = port_listeners(base_url)
    found = ["a process this user cannot see"] if None in listeners else []
    for pid in sorted({pid for pid in listeners if pid is not None}):
        try:
            if os.getpgid(pid) != pgid:
                found.append(f"pid {pid}")
        except ProcessLookupError:
            continue
    return found


def resolve_executable(command: Sequence[str], env: Mapping[str, str]) -> str | None:
    """The program the command runs (a path, or found on the server's PATH), or None when there is none."""
    return shutil.which(command[0], path=env.get("PATH", os.defpath))


def exit_description(code: int) -> str:
    """``exited with code 1`` or ``was killed by SIGKILL (exit -9)``."""
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name} (exit {code})"
    return f"exited with code {code}"


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def stop_with_launcher() -> Callable[[], None] | None:
    """A `preexec_fn` that has the kernel SIGTERM the child once its launcher is gone, even killed by SIGKILL.

    Linux's PR_SET_PDEATHSIG, armed between fork and exec (None where libc has no prctl). The signal comes when
    the launching *thread* ends: every server is stopped before the thread that started it moves on.
    """
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    launcher = os.getpid()

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != launcher:  # the launcher died before the signal was armed
            os.kill(os.getpid(), signal.SIGTERM)

    return arm


class ManagedServer:
    """Launch `command`, wait until `base_url/health` answers 200, stop the whole process group.

    `on_exit(code)` is called from a watcher thread when the process ends before `stop()` was asked for.
    Use as a context manager: `with ManagedServer(cmd, base_url=url, env=env, log_path=p) as server: ...`.
    """

    def __init__(
        self,
        command: Sequence[str],
        *,
        base_url: str,
        env: Mapping[str, str],
        log_path: Path,
        health_timeout_s: float = 600.0,
        name: str = "the server",
        on_exit: Callable[[int], None] | None = None,
    ) -> None:
        self.command = list(command)
        self.base_url = base_url.rstrip("/")
        self.env = dict(env)
        self.log_path = Path(log_path)
        self.health_timeout_s = health_timeout_s
        self.name = name
        self.on_exit = on_exit
        self.process: subprocess.Popen[bytes] | None = None
        self.started_at: str | None = None
        self._log_start = 0  # where this launch's lines begin in the (appended) log
        self._stopping = threading.Event()
        self.launch_tmp: Path | None = None  # this launch's socket and temporary folder, while it runs

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    @property
    def exit_code(self) -> int | None:
        """The exit status once the process has ended (negative: killed by that signal), else None."""
        return None if self.process is None else self.process.poll()

    def start(self) -> ManagedServer:
        """Launch in a process group of its own inside the caller's session; return once `/health` answers.

        Should this process die without stopping it (SIGKILL, a crash), the server gets SIGTERM from the kernel.
        """
        if resolve_executable(self.command, self.env) is None:
            raise ServerError(f"{self.command[0]!r} not found: not an executable path, nor on PATH")
        if taken := port_taken(self.base_url):
            raise PortTaken(f"{taken}: another server runs there; stop it or choose another port")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.started_at = datetime.now(UTC).isoformat(timespec="seconds")
        with open(self.log_path, "ab") as log:
            self._log_start = log.tell()
            env = self.env if IPC_ENV in self.env else self._with_launch_tmp(self.env)
            try:
                self.process = subprocess.Popen(
                    self.command,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=env,
                    process_group=0,
                    preexec_fn=stop_with_launcher(),
                )
            except BaseException:
                self._remove_launch_tmp()
                raise
        self._wait_healthy()
        if others := strangers(self.base_url, self.process.pid):
            self.stop()
            raise PortTaken(
                f"{', '.join(others)} answers at {self.base_url}, outside {self.name}'s "
                "process group: another server took the port, or the command left the group (it must "
                "exec the server); stop it or choose another port"
            )
        threading.Thread(target=self._watch, name=f"watch-{self.process.pid}", daemon=True).start()
        return self

    def _wait_healthy(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + self.health_timeout_s
        while time.monotonic() < deadline:
            if (code := self.process.poll()) is not None:
                self.stop()
                raise ServerError(
                    f"{self.name} {exit_description(code)} before answering /health", self.log_tail(), self.log_path
                )
            try:
                health = httpx.get(self.base_url + "/health", timeout=2, trust_env=False, verify=tls_context())
                if health.status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise HealthTimeout(
            f"{self.name} did not answer {self.base_url}/health within {self.health_timeout_s:g} s",
            self.log_tail(),
            self.log_path,
        )

    def _watch(self) -> None:
        assert self.process is not None
        code = self.process.wait()
        if not self._stopping.is_set() and self.on_exit is not None:
            self.on_exit(code)

    def log_tail(self, lines: int = 40) -> str:
        """The last `lines` lines this launch wrote to its log."""
        try:
            with open(self.log_path, "rb") as log:
                size = log.seek(0, os.SEEK_END)
                log.seek(max(self._log_start, size - TAIL_BYTES))
                text = log.read().decode(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM the whole process group (API server and engine cores), SIGKILL what remains.

        A Ctrl-C, SIGTERM or SIGHUP while it waits (a second one, after the one that stopped the run) cuts the
        wait short: SIGKILL at once. A launched process that left its group is killed by itself.
        """
        if self.process is None:
            return
        self._stopping.set()
        pgid = self.process.pid
        with _signals_set_event() as hurry:
            never = threading.Event()  # SIGKILL's wait is not cut short
            for sig, wait_s, cut_short in ((signal.SIGTERM, timeout_s, hurry), (signal.SIGKILL, 5.0, never)):
                try:
                    os.killpg(pgid, sig)
                except ProcessLookupError:
                    break
                end = time.monotonic() + wait_s
                while time.monotonic() < end and group_alive(pgid) and not cut_short.wait(0.2):
                    self.process.poll()
                if not group_alive(pgid):
                    break
        if self.process.poll() is None:  # not in its group any more (setsid)
            self.process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(5)
        self._remove_launch_tmp()

    def _with_launch_tmp(self, env: dict[str, str]) -> dict[str, str]:
        """`env` naming a new folder for this launch as its socket folder and its TMPDIR; as it was where a
        socket's path there would be too long (a long TMPDIR), so that vLLM's defaults apply."""
        folder = Path(tempfile.mkdtemp(prefix="tk-launch-"))
        if len(os.fsencode(folder)) + 1 + SOCKET_NAME_CHARS > SOCKET_PATH_MAX:
            folder.rmdir()
            return env
        self.launch_tmp = folder
        return {**env, IPC_ENV: str(folder), TMP_ENV: str(folder)}

    def _remove_launch_tmp(self) -> None:
        folder, self.launch_tmp = self.launch_tmp, None
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)

    def __enter__(self) -> ManagedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def _signals_set_event() -> Iterator[threading.Event]:
    """An event that STOP_SIGNALS set while the block runs, instead of their handlers (main thread only)."""
    event = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield event
        return
    previous = {sig: signal.signal(sig, lambda *_: event.set()) for sig in STOP_SIGNALS}
    try:
        yield event
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def group_alive(pgid: int) -> bool:
    """Whether any process of group `pgid` still runs (zombies of our own children are reaped first)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(ChildProcessError):
        os.waitpid(-pgid, os.WNOHANG)
    return has_live_member(pgid)


def proc_stat(path: Path) -> tuple[str, int] | None:
    """A process's state letter and process group from its `/proc/<pid>/stat`; None when it is gone or unreadable.

    The fields after the command name, which is in parentheses and may hold any character: state, ppid, pgrp, ...
    """
    try:
        fields = path.read_text().rsplit(")", 1)[1].split()
        return fields[0], int(fields[2])
    except (OSError, IndexError, ValueError):
        return None


def process_running(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie."""
    stat = proc_stat(Path(f"/proc/{pid}/stat"))
    return stat is not None and stat[0] != "Z"


def has_live_member(pgid: int) -> bool:
    """Whether /proc shows a process of group `pgid` that is not a zombie."""
    for path in Path("/proc").glob("[0-9]*/stat"):
        stat = proc_stat(path)
        if stat is not None and stat[1] == pgid and stat[0] != "Z":
            return True
    return False
