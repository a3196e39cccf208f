"""make test's engine tier waits beside the offline tier as SCHED_IDLE (tests/conftest.py): at the gate, every thread
of it and of what it started goes back to the normal class, so a measuring client is not left waiting for the tick."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import psutil
import pytest

from tests.conftest import leave_idle_class

pytestmark = pytest.mark.process
THREADED = "import threading, time\nthreading.Thread(target=time.sleep, args=(60,)).start()\nprint('up', flush=True)\n"
CHILD = (  # up once its own child (and that child's thread) is up
    f"import subprocess, sys\nchild = subprocess.Popen([sys.executable, '-c', {THREADED!r}], stdout=subprocess.PIPE)\n"
    f"child.stdout.readline()\n{THREADED}"
)


def policies(root: int) -> list[int]:
    processes = [psutil.Process(root), *psutil.Process(root).children(recursive=True)]
    return [os.sched_getscheduler(thread.id) for process in processes for thread in process.threads()]


@pytest.fixture
def idle_tree() -> Iterator[int]:
    """A SCHED_IDLE process with a thread of its own and a child with one, all up; its pid."""
    proc = subprocess.Popen(["chrt", "--idle", "0", sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "up\n"  # both processes and their threads are up
        yield proc.pid
    finally:
        for process in [*psutil.Process(proc.pid).children(recursive=True), psutil.Process(proc.pid)]:
            process.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def test_the_gate_puts_every_thread_of_the_tree_back_in_the_normal_class(
    idle_tree: int, capsys: pytest.CaptureFixture[str]
) -> None:
    before = policies(idle_tree)
    assert len(before) >= 4 and set(before) == {os.SCHED_IDLE}  # two processes, each with a second thread
    leave_idle_class(idle_tree)
    if os.geteuid() == 0:
        assert set(policies(idle_tree)) == {os.SCHED_OTHER} and capsys.readouterr().err == ""
    else:  # leaving SCHED_IDLE takes CAP_SYS_NICE: said in one line, the tier goes on in the idle class
        assert set(policies(idle_tree)) == {os.SCHED_IDLE}
        assert capsys.readouterr().err.startswith("warning: the engine tier stays SCHED_IDLE")


def test_at_the_gate_the_servers_starts_stay_idle_until_a_test_asks(idle_tree: int) -> None:
    """The gate's call: this process's threads leave the idle class but the kept ones (the server starts' threads),
    and its children (the starting servers) stay, until each is asked for (SessionServers.promote walks its tree)."""
    if os.geteuid() != 0:
        pytest.skip("leaving SCHED_IDLE takes CAP_SYS_NICE: the test above checks the one-line warning")
    root = psutil.Process(idle_tree)
    kept = root.threads()[-1].id  # the parent's second thread
    (child,) = root.children()
    leave_idle_class(idle_tree, descend=False, keep={kept})
    assert {t.id: os.sched_getscheduler(t.id) for t in root.threads()} == {
        t.id: os.SCHED_IDLE if t.id == kept else os.SCHED_OTHER for t in root.threads()}  # fmt: skip
    assert set(policies(child.pid)) == {os.SCHED_IDLE}  # a starting server: still idle
    leave_idle_class(child.pid)  # a test asked for it
    assert set(policies(child.pid)) == {os.SCHED_OTHER}
