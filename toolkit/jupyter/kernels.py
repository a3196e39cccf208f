"""Notebook kernels that stay in the caller's session, so the measuring client shares the server's autogroup.

jupyter_client starts every kernel with `setsid` (a session of its own). Linux gives each session its own
scheduler autogroup, and on a small machine a busy vLLM in one autogroup starves a client in another for
seconds at a time (docs/method/client.md, Machine pauses). These classes launch the kernel exactly as jupyter_client's
local provisioner does, except that it gets a process group of its own (interrupts and kills still reach
the kernel and its children as one) inside the caller's session.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import uuid
from typing import Any

from jupyter_client.connect import KernelConnectionInfo
from jupyter_client.manager import AsyncKernelManager, in_pending_state
from jupyter_client.provisioning import LocalProvisioner
from traitlets import Float, default

from toolkit.jupyter import kernel_launcher
from toolkit.jupyter.kernel_forks import fork_kernel

IPYKERNEL_LAUNCHER = ["-m", "ipykernel_launcher"]
TOOLKIT_LAUNCHER = ["-m", "toolkit.jupyter.kernel_launcher"]
LAUNCHER_FILE = str(kernel_launcher.__file__)  # a forked kernel's argv[0], as `-m` would have set it


def toolkit_kernel_command(cmd: list[str]) -> list[str]:
    """The kernel spec's command with toolkit.jupyter.kernel_launcher in place of ipykernel_launcher, where the
    spec runs this Python's (the toolkit is importable there); any other spec's command unchanged."""
    if len(cmd) < 3 or cmd[1:3] != IPYKERNEL_LAUNCHER or os.path.realpath(cmd[0]) != os.path.realpath(sys.executable):
        return cmd
    return [cmd[0], *TOOLKIT_LAUNCHER, *cmd[3:]]


class SameSessionProvisioner(LocalProvisioner):  # type: ignore[misc]
    """The local provisioner, launching the kernel in its own process group but not in a new session, and as
    toolkit.jupyter.kernel_launcher (ipykernel's kernel, without the interpreter's teardown at its end): forked
    from this process's zygote (toolkit.jupyter.kernel_forks) where it can, else a process started from scratch."""

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> KernelConnectionInfo:
        cmd = toolkit_kernel_command(cmd)
        popen_kwargs = self._scrub_kwargs(kwargs)
        popen_kwargs.pop("independent", None)
        env = dict(popen_kwargs.pop("env", None) or os.environ)
        env["JPY_PARENT_PID"] = str(os.getpid())  # the kernel exits when this process does
        stdin = popen_kwargs.pop("stdin", None)
        self.cwd = popen_kwargs.get("cwd") or os.getcwd()
        if cmd[1:3] == TOOLKIT_LAUNCHER:
            streams = (_fileno(popen_kwargs.get("stdout"), 1), _fileno(popen_kwargs.get("stderr"), 2))
            forked = await asyncio.to_thread(fork_kernel, [LAUNCHER_FILE, *cmd[3:]], env, self.cwd, streams)
            if forked is not None:
                self.process = forked  # type: ignore[assignment]  # has what the provisioner uses of a Popen
                self.pid, self.pgid = forked.pid, forked.pid
                return self.connection_info
        self.process = subprocess.Popen(
            [os.path.expanduser(part) for part in cmd],
            stdin=subprocess.PIPE if stdin is None else stdin,
            env=env,
            process_group=0,
            **popen_kwargs,
        )
        self.pid = self.process.pid
        self.pgid = os.getpgid(self.pid)
        return self.connection_info


def _fileno(stream: Any, default: int) -> int:
    """The file descriptor a Popen stream argument names (an int, a file, or None for this process's own)."""
    if stream is None:
        return default
    return stream if isinstance(stream, int) else int(stream.fileno())


class SameSessionKernelManager(AsyncKernelManager):  # type: ignore[misc]
    """The kernel manager papermill is given: every kernel it starts uses `SameSessionProvisioner`, and talks
    to it over local IPC sockets rather than TCP (no port opened, no plain-text-over-TCP warning), and asks an idle
    kernel to shut down before interrupting it."""

    # Whether a kernel is idle is asked, not guessed from how long it takes to exit: an idle kernel answers a
    # kernel_info request at once, one still running a cell (an interrupted run) does not. Under load (CI's three test
    # workers on two cores) an idle kernel once took over 5 s to exit after a fixed 5 s wait, and was interrupted.
    # An idle kernel's exit: 0.2 s through toolkit.jupyter.kernel_launcher (its exit handlers bounded at 10 s), up to
    # 15.5 s through ipykernel_launcher beside busy processes (benchmarks/kernel_shutdown.py); twice that at most.
    polite_shutdown_s = Float(5.0, help="how long a kernel has to answer kernel_info before it counts as busy")
    idle_exit_s = Float(30.0, help="how long an idle kernel asked to shut down may take before it is interrupted")

    @default("transport")
    def _transport_default(self) -> str:
        return "ipc"

    @default("ip")
    def _ip_default(self) -> str:
        """The IPC sockets' path prefix: absolute and this kernel's own. jupyter_client's default, `kernel-ipc`, is
        relative: the kernel binds it in its working folder (notebooks/) while the manager picks free numbers in
        its own, so two kernels at once (a batch's --jobs, two runs) got the same sockets."""
        if self.transport != "ipc":
            return str(super()._ip_default())
        return os.path.join(tempfile.gettempdir(), f"toolkit-kernel-{uuid.uuid4().hex[:16]}-ipc")

    async def _async_pre_start_kernel(self, **kw: Any) -> tuple[list[str], dict[str, Any]]:
        if self.provisioner is None:
            self.kernel_id = self.kernel_id or kw.pop("kernel_id", str(uuid.uuid4()))
            self.provisioner = SameSessionProvisioner(
                kernel_id=self.kernel_id, kernel_spec=self.kernel_spec, parent=self
            )
        return await super()._async_pre_start_kernel(**kw)

    @in_pending_state  # type: ignore[misc]
    async def _async_shutdown_kernel(self, now: bool = False, restart: bool = False) -> None:
        """Ask first; interrupt only a kernel that did not exit. jupyter_client sends SIGINT before every shutdown
        request, and one that lands while the kernel still finishes its last reply makes ipykernel log
        "ERROR | KeyboardInterrupt caught in kernel." after a notebook that ran fine."""
        if not self.owns_kernel:
            return
        self.shutting_down = True
        self.stop_restarter()
        if self.has_kernel and now:
            await self._async_interrupt_kernel()
            await self._async_kill_kernel(restart=restart)
        elif self.has_kernel and await self._answers_kernel_info(self.polite_shutdown_s):
            await self._async_request_shutdown(restart=restart)
            try:
                await asyncio.wait_for(self._async_wait(pollinterval=0.05), timeout=self.idle_exit_s)
                assert self.provisioner is not None
                await self.provisioner.wait()
            except TimeoutError:  # asked while idle, yet still there: jupyter_client's own sequence
                await self._interrupt_and_finish(restart)
        elif self.has_kernel:  # still running a cell (an interrupted run)
            await self._interrupt_and_finish(restart)
        await self._async_cleanup_resources(restart=restart)

    async def _answers_kernel_info(self, timeout_s: float) -> bool:
        """Whether the kernel answers a kernel_info request on its shell channel within timeout_s (it is idle)."""
        client = self.client()
        client.start_channels(shell=True, iopub=False, stdin=False, hb=False, control=False)
        try:
            await client.kernel_info(reply=True, timeout=timeout_s)
            return True
        except TimeoutError:
            return False
        finally:
            client.stop_channels()

    async def _interrupt_and_finish(self, restart: bool) -> None:
        """jupyter_client's own shutdown sequence: interrupt, ask, then wait and kill."""
        await self._async_interrupt_kernel()
        await self._async_request_shutdown(restart=restart)
        await self._async_finish_shutdown(restart=restart)

    shutdown_kernel = _async_shutdown_kernel  # the base class binds its own function to this name


def resolve_lazy_classes() -> None:
    """Make, in this one thread, the first instances of the classes that papermill makes for each notebook.

    traitlets names some classes of a trait by string (`Configurable.parent`, the kernel manager's `session` and
    `client_factory`, the provisioner's `kernel_spec`) and resolves each on its class's first instance, checking
    that it is still a string and then reading it again. Two threads making their first instances at once race
    there: one reads the class that the other has just stored, and its notebook fails with `TypeError:
    import_item accepts strings, not '<class 'traitlets.traitlets.MetaHasTraits'>'` (`batch --jobs 2`, seen once
    in a `make test`). Called before notebooks run in several threads of one process."""
    from types import SimpleNamespace

    import nbformat
    from papermill.clientwrap import PapermillNotebookClient

    manager = SameSessionKernelManager(kernel_name="python3")
    manager.client()
    SameSessionProvisioner()
    PapermillNotebookClient(SimpleNamespace(nb=nbformat.v4.new_notebook()), km=manager)
