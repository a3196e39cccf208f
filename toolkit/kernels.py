"""Notebook kernels that stay in the caller's session, so the measuring client shares the server's autogroup.

jupyter_client starts every kernel with `setsid` (a session of its own). Linux gives each session its own
scheduler autogroup, and on a small machine a busy vLLM in one autogroup starves a client in another for
seconds at a time (docs/METHOD.md, Pauses). These classes launch the kernel exactly as jupyter_client's
local provisioner does, except that it gets a process group of its own (interrupts and kills still reach
the kernel and its children as one) inside the caller's session.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import uuid
from typing import Any

from jupyter_client.connect import KernelConnectionInfo
from jupyter_client.manager import AsyncKernelManager
from jupyter_client.provisioning import LocalProvisioner
from traitlets import default


class SameSessionProvisioner(LocalProvisioner):  # type: ignore[misc]
    """The local provisioner, launching the kernel in its own process group but not in a new session."""

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> KernelConnectionInfo:
        popen_kwargs = self._scrub_kwargs(kwargs)
        popen_kwargs.pop("independent", None)
        env = dict(popen_kwargs.pop("env", None) or os.environ)
        env["JPY_PARENT_PID"] = str(os.getpid())  # the kernel exits when this process does
        stdin = popen_kwargs.pop("stdin", None)
        self.process = subprocess.Popen(
            [os.path.expanduser(part) for part in cmd],
            stdin=subprocess.PIPE if stdin is None else stdin,
            env=env,
            process_group=0,
            **popen_kwargs,
        )
        self.pid = self.process.pid
        self.pgid = os.getpgid(self.pid)
        self.cwd = popen_kwargs.get("cwd") or os.getcwd()
        return self.connection_info


class SameSessionKernelManager(AsyncKernelManager):  # type: ignore[misc]
    """The kernel manager papermill is given: every kernel it starts uses `SameSessionProvisioner`, and talks
    to it over local IPC sockets rather than TCP (no port opened, no plain-text-over-TCP warning)."""

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
            self.provisioner = SameSessionProvisioner(kernel_id=self.kernel_id, kernel_spec=self.kernel_spec,
                                                      parent=self)  # fmt: skip
        return await super()._async_pre_start_kernel(**kw)
