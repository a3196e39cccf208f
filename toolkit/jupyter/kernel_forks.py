"""Notebook kernels forked from a zygote that has imported what the notebooks import, once per process.

A kernel started from scratch spends about 1.5 CPU-s importing ipykernel, pandas, matplotlib and the toolkit's
reports before its first cell; a run starts three or more, a batch three a variant (benchmarks/kernel_forks.py).
The first kernel of a process starts the zygote (toolkit.jupyter.kernel_zygote), and every kernel after it is
forked from it with those imports done. Linux only; `TOOLKIT_KERNEL_FORKS=0` starts every kernel from scratch, as
does a zygote that could not start (its error is printed once). The zygote ends with the process that started it.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

FORKS_ENV = "TOOLKIT_KERNEL_FORKS"
ANSWER_S = 120.0  # the zygote's imports, then each answer; about 1.5 s and 1 ms on a quiet 2-core machine
END_S = 5.0  # how long a closing process waits for its zygote to end (so the kernels' CPU is counted as its children's)
MESSAGE_BYTES = 1 << 16


class Zygote:
    """The zygote process and the channel to it; requests from several threads are answered one at a time."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "toolkit.jupyter.kernel_zygote", str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            process_group=0,  # a terminal's Ctrl-C is for this process, which stops the kernels itself
        )
        theirs.close()
        ours.settimeout(ANSWER_S)
        self.channel = ours
        self.lock = threading.Lock()
        try:
            self.pid = int(self._answer()["ready"])
        except ConnectionError:  # it ended (its error on stderr) or never said ready: reaped here
            self.process.kill()
            self.close()
            raise

    def ask(self, request: dict[str, Any], fds: tuple[int, ...] = ()) -> dict[str, Any]:
        """Send one request (with file descriptors), return its answer; ConnectionError when there is none."""
        with self.lock:
            try:
                socket.send_fds(self.channel, [json.dumps(request).encode()], list(fds))
            except OSError as exc:
                raise ConnectionError(str(exc)) from None
            return self._answer()

    def _answer(self) -> dict[str, Any]:
        try:
            message = self.channel.recv(MESSAGE_BYTES)
        except OSError as exc:  # a timeout too
            raise ConnectionError(str(exc)) from None
        if not message:
            raise ConnectionError("the zygote ended")
        answer: dict[str, Any] = json.loads(message)
        return answer

    def close(self) -> None:
        """Close the channel (the zygote ends on it) and reap the zygote, within END_S."""
        self.channel.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(END_S)


class ForkedKernel:
    """A forked kernel, with what jupyter_client's local provisioner uses of a subprocess.Popen."""

    stdin = stdout = stderr = None

    def __init__(self, pid: int, zygote: Zygote) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._zygote = zygote
        try:
            self._exited: int | None = os.pidfd_open(pid)  # readable once the kernel has ended
        except OSError:
            self._exited = None

    def poll(self) -> int | None:
        """The exit code once the kernel has ended (the zygote reaps it), else None."""
        if self.returncode is None:
            try:
                self.returncode = self._zygote.ask({"op": "status", "pid": self.pid})["returncode"]
            except ConnectionError:  # its kernels are no longer its children: ended or not, by the pid alone
                self.returncode = None if _exists(self.pid) else -1
            if self.returncode is not None and self._exited is not None:
                os.close(self._exited)
                self._exited = None
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the kernel's end (readable on its pidfd; without one, asked every 50 ms); TimeoutExpired after
        `timeout`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
            if self._exited is not None:
                select.select([self._exited], [], [], left)
            else:
                time.sleep(0.05 if left is None else min(0.05, left))
        return code

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class _ThisProcess:
    """This process's zygote, whether it failed to start, and the lock its start is made under."""

    zygote: Zygote | None = None
    failed: bool = False
    starting: threading.Lock = field(default_factory=threading.Lock)


_here = _ThisProcess()


def forks_kernels() -> bool:
    """Whether kernels are forked here: on Linux, unless TOOLKIT_KERNEL_FORKS=0 or the zygote failed to start."""
    return sys.platform == "linux" and os.environ.get(FORKS_ENV, "1") != "0" and not _here.failed


def _zygote() -> Zygote | None:
    """This process's zygote, started on first use; None where it cannot start (said once, on stderr)."""
    with _here.starting:
        if _here.zygote is None and not _here.failed:
            try:
                _here.zygote = Zygote()
                atexit.register(_here.zygote.close)
            except OSError as exc:
                _here.failed = True
                print(f"notebook kernels start from scratch: their zygote did not start ({exc})", file=sys.stderr)
        return _here.zygote


def fork_kernel(argv: list[str], env: dict[str, str], cwd: str, streams: tuple[int, int]) -> ForkedKernel | None:
    """A kernel (toolkit.jupyter.kernel_launcher with `argv`) forked from this process's zygote, writing to the
    `streams` (stdout, stderr) file descriptors; None where kernels are not forked (the caller starts it itself)."""
    if not forks_kernels():
        return None
    zygote = _zygote()
    if zygote is None:
        return None
    env = {**env, "JPY_PARENT_PID": str(zygote.pid)}  # the kernel's parent: it ends when the zygote does
    try:
        answer = zygote.ask({"op": "fork", "argv": argv, "env": env, "cwd": cwd}, streams)
    except ConnectionError:
        _forget()
        return None
    return ForkedKernel(int(answer["pid"]), zygote)


def zygote_pid() -> int | None:
    """The pid of this process's zygote, None before its first kernel (or where kernels are not forked)."""
    return None if _here.zygote is None else _here.zygote.pid


def cpu_seconds() -> float:
    """The CPU of this process's zygote and of the kernels it has reaped so far (0 without one)."""
    if _here.zygote is None:
        return 0.0
    try:
        return float(_here.zygote.ask({"op": "cpu"})["cpu_s"])
    except ConnectionError:
        return 0.0


def _forget() -> None:
    """Drop this process's zygote, one that is gone: the next kernel starts another."""
    zygote, _here.zygote = _here.zygote, None
    if zygote is not None:
        zygote.channel.close()


def _after_fork_in_child() -> None:
    """A process forked from this one starts its own zygote: the parent's channel is closed here, and the lock that
    another thread may have held at the fork is a new one."""
    _forget()
    _here.starting = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
