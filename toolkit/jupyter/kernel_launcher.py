"""The notebook kernel the toolkit starts: ipykernel's own, which ends without the interpreter's teardown.

`python -m ipykernel_launcher` returns from its loop once a shutdown request is answered, then runs its exit
handlers and tears the interpreter down: 0.3 CPU-s after the notebooks' imports on a quiet machine (the garbage
collector over pandas, matplotlib and pyarrow), up to 15 s beside busy processes. Twice in test runs an idle kernel
asked to shut down had not ended after 60 s (not reproduced on its own; ipykernel's exit handler, `IPKernelApp.close`,
joins its control thread and terminates its zmq context without a bound). Here the exit handlers get
`EXIT_HANDLERS_S`, and then the process ends at once: every reply was sent before the loop stopped, and a handler
that a notebook registered still runs. `SameSessionProvisioner` (toolkit.jupyter.kernels) starts this module in
place of `ipykernel_launcher`, or forks it from toolkit.jupyter.kernel_zygote with its imports done.

    python -m toolkit.jupyter.kernel_launcher -f CONNECTION_FILE
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

EXIT_HANDLERS_S = 10.0  # ipykernel's own close takes milliseconds when it returns at all
PARENT_POLL_S = 1.0  # how often a kernel looks for its parent, as ipykernel's parent poller does


class ParentWatch(threading.Thread):
    """ipykernel's parent poller (`ParentPollerUnix`): the kernel ends once the process that started it is gone,
    removing first its connection file and the IPC socket files it bound. Nobody else would: the kernel manager
    that names them went with its process (a `kill -9` of a run left five socket files and the connection file in
    the temp folder for each kernel it ran)."""

    def __init__(self, parent_pid: int, clean_up: Callable[[], None]) -> None:
        super().__init__(name="parent-watch", daemon=True)
        self.parent_pid, self.clean_up = parent_pid, clean_up

    def run(self) -> None:
        parent = self.parent_pid if os.getppid() == self.parent_pid else 0  # adopted already: wait for init
        while True:
            ppid = os.getppid()
            if (parent and ppid != parent) or (not parent and ppid == 1):
                self.clean_up()
                os._exit(1)
            time.sleep(PARENT_POLL_S)


def kernel_app() -> Any:
    """ipykernel's `IPKernelApp` with `ParentWatch` in place of its parent poller."""
    from ipykernel.kernelapp import IPKernelApp
    from ipykernel.parentpoller import ParentPollerUnix

    class KernelApp(IPKernelApp):  # type: ignore[misc]
        def init_poller(self) -> None:
            super().init_poller()
            if isinstance(self.poller, ParentPollerUnix):
                self.poller = ParentWatch(self.poller.parent_pid, self.cleanup_connection_file)

    return KernelApp


def run_exit_handlers(bound_s: float) -> bool:
    """Run the registered exit handlers (as the interpreter would) within bound_s; whether they finished."""
    finishing = threading.Thread(target=atexit._run_exitfuncs, name="exit-handlers", daemon=True)
    finishing.start()
    finishing.join(bound_s)
    return not finishing.is_alive()


def main() -> None:
    """ipykernel_launcher's kernel, started as a process of its own."""
    if sys.path and sys.path[0] in ("", os.getcwd()):  # as ipykernel_launcher: the working folder shadows nothing
        del sys.path[0]
    serve()


def serve() -> None:
    """The kernel (argv: sys.argv); once its loop has stopped, the exit handlers within their bound, then exit.
    Here the process ends (toolkit.jupyter.kernel_zygote's forked kernels call this too)."""
    kernel_app().launch_instance()
    finished = run_exit_handlers(EXIT_HANDLERS_S)
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # a stream already closed
            pass
    os._exit(0 if finished else 1)


if __name__ == "__main__":
    main()
