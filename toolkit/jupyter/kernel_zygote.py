"""The process notebook kernels are forked from: it imports what the shipped notebooks import once, then forks a
kernel for each request, so a kernel starts with its imports done (toolkit.jupyter.kernel_forks starts it and asks).

    python -m toolkit.jupyter.kernel_zygote FD

FD: one end of a SOCK_SEQPACKET socket pair; each request is one JSON message, and each reply one:
- {"op": "fork", "argv": [...], "env": {...}, "cwd": "..."} with the kernel's stdout and stderr passed as file
  descriptors: {"pid": N}. The child is a process group of its own, in this process's session (as
  toolkit.jupyter.kernels launches one), and becomes toolkit.jupyter.kernel_launcher with that argv, env and cwd.
- {"op": "status", "pid": N}: {"returncode": int or null while it runs} (the child reaped here, once ended).
- {"op": "cpu"}: {"cpu_s": this process's CPU and that of the kernels it has reaped}.
The zygote ends when the other end closes (its owner ended), leaving running kernels to notice it through
ipykernel's parent poller.
"""

from __future__ import annotations

import ast
import contextlib
import gc
import importlib
import importlib.util
import json
import os
import resource
import socket
import sys
from pathlib import Path
from typing import Any

INLINE_BACKEND = "module://matplotlib_inline.backend_inline"  # what ipykernel sets when MPLBACKEND is unset
NOT_PRELOADED = ("matplotlib_inline",)  # its import hooks itself into the running IPython: the kernel's, not ours
USERS_ONLY = ("explore",)  # opened by users in JupyterLab, never executed here: its seaborn would cost 0.9 CPU-s
MESSAGE_BYTES = 1 << 20


def notebook_imports(notebooks: list[Path]) -> list[str]:
    """The modules the notebooks' code cells import (a `from package import name` counted as package.name where that
    is a module), in order of first appearance; magics read as IPython reads them, a cell that is not Python skipped."""
    from IPython.core.inputtransformer2 import TransformerManager

    names: list[str] = []
    for path in notebooks:
        for cell in json.loads(path.read_text()).get("cells", []):
            if cell.get("cell_type") != "code":
                continue
            try:
                tree = ast.parse(TransformerManager().transform_cell("".join(cell.get("source", ""))))
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names += [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names += [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
    return list(dict.fromkeys(names))


def preload(modules: list[str]) -> None:
    """Import the kernel's machinery and each of `modules` that exists (a name that is a function, not a module, is
    skipped), with the matplotlib backend the kernel will have."""
    if not os.environ.get("MPLBACKEND"):
        os.environ["MPLBACKEND"] = INLINE_BACKEND
    importlib.import_module("ipykernel.kernelapp")
    for name in modules:
        if name.startswith(NOT_PRELOADED):
            continue
        try:
            if importlib.util.find_spec(name) is not None:
                importlib.import_module(name)
        except (ImportError, ValueError):  # `from package import function`: not a module
            continue


def cpu_seconds() -> float:
    """This process's CPU and that of the children it has reaped."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def become_kernel(request: dict[str, Any], fds: list[int], channel: socket.socket) -> None:
    """In the forked child: the kernel's streams, folder, environment and argv, then the kernel itself."""
    os.setpgid(0, 0)
    channel.close()
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(fds[0], 1)
    os.dup2(fds[1], 2)
    for fd in fds:
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    if not os.environ.get("MPLBACKEND"):  # as ipykernel does, which matplotlib, imported here before, would miss
        os.environ["MPLBACKEND"] = INLINE_BACKEND
    if "matplotlib" in sys.modules:
        sys.modules["matplotlib"].rcParams["backend"] = os.environ["MPLBACKEND"]
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()  # the global generator, seeded once in the zygote (random reseeds itself)
    # ipykernel reads JPY_PARENT_PID as its class is defined (here: in the zygote, without it); said again here
    sys.argv = [*request["argv"], f"--IPKernelApp.parent_handle={os.environ.get('JPY_PARENT_PID', '0')}"]
    from toolkit.jupyter.kernel_launcher import serve

    serve()


def fork(request: dict[str, Any], fds: list[int], channel: socket.socket) -> int:
    """Fork a kernel; its pid (the child never returns here)."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            become_kernel(request, fds, channel)
        finally:
            os._exit(1)  # a kernel that failed to start must never come back into the zygote's loop
    for fd in fds:
        os.close(fd)
    with contextlib.suppress(PermissionError, ProcessLookupError):  # the child did it first, or has ended
        os.setpgid(pid, pid)  # here too, so the group exists before the reply (the child may not have run yet)
    return pid


def status(pid: int) -> int | None:
    """The child's exit code once it has ended (reaped here), None while it runs."""
    try:
        done, code = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # reaped before
        return -1
    return None if done == 0 else os.waitstatus_to_exitcode(code)


def serve(channel: socket.socket) -> None:
    """Answer requests until the other end closes; then reap the kernels that have ended, and return."""
    while True:
        message, fds, _, _ = socket.recv_fds(channel, MESSAGE_BYTES, 2)
        if not message:
            break
        request = json.loads(message)
        if request["op"] == "fork":
            reply: dict[str, Any] = {"pid": fork(request, fds, channel)}
        elif request["op"] == "status":
            reply = {"returncode": status(int(request["pid"]))}
        else:
            reply = {"cpu_s": cpu_seconds()}
        channel.send(json.dumps(reply).encode())
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                break
        except ChildProcessError:
            break


def main() -> None:
    """Preload, say ready, serve."""
    if sys.path and sys.path[0] in ("", os.getcwd()):  # as ipykernel_launcher: the working folder shadows nothing
        del sys.path[0]
    channel = socket.socket(fileno=int(sys.argv[1]))
    from toolkit.jupyter.shipped import shipped_notebooks

    preload(notebook_imports([path for path in shipped_notebooks() if path.stem not in USERS_ONLY]))
    gc.freeze()  # the imports' objects out of the collector's reach: a kernel's collections do not copy their pages
    channel.send(json.dumps({"ready": os.getpid()}).encode())
    serve(channel)


if __name__ == "__main__":
    main()
