"""The engine tier's session servers (tests/conftest.py, SessionServers): started two at a time in the order the tests
first ask for them; after the gate a start no test has asked for yet runs SCHED_IDLE, and the server a test asks for
is in the normal class when the test gets it, whether its start was still running or had ended."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable, Iterator
from types import SimpleNamespace

import pytest

import tests.conftest as shared
from tests.conftest import STARTS_AT_ONCE, SessionServers, starting

pytestmark = pytest.mark.process
NAMES = ("first", "second", "third", "fourth")


class FakeStarts:
    """Session servers whose starts launch `sleep` and end when released; what ran at once, and in which order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: set[str] = set()
        self.most = 0
        self.order: list[str] = []
        self.release = {name: threading.Event() for name in NAMES}
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, name: str) -> Callable[[], object]:
        def run() -> object:
            with self.lock:
                self.running.add(name)
                self.most = max(self.most, len(self.running))
                self.order.append(name)
            server = SimpleNamespace(process=None)  # as an EmbeddedServer: said before it launches
            starting(server)
            server.process = proc = subprocess.Popen(["sleep", "60"])
            self.procs.append(proc)
            try:
                assert self.release[name].wait(30), f"{name} was never released"
                return server
            finally:
                with self.lock:
                    self.running.discard(name)

        return run


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeStarts]:
    starts = FakeStarts()
    monkeypatch.setattr(shared, "SESSION_SERVERS", {name: starts.start(name) for name in NAMES})
    yield starts
    for event in starts.release.values():
        event.set()
    for proc in starts.procs:
        proc.kill()
        proc.wait()


def servers_for(order: list[str]) -> SessionServers:
    """SessionServers over tests that ask for `order`'s servers in that order (a server asked twice counts once)."""
    items = [SimpleNamespace(fixturenames=["tmp_path", name]) for name in order]
    return SessionServers(items)  # type: ignore[arg-type]


def test_two_start_at_once_in_the_order_the_tests_need_them(fake: FakeStarts) -> None:
    servers = servers_for(["third", "first", "third", "fourth", "second"])
    futures = servers.start(set(NAMES))
    for name in ("third", "first", "fourth", "second"):  # each released in turn: the next queued one begins
        fake.release[name].set()
        futures[name].result(timeout=30)
    servers.pool.shutdown(wait=True)
    assert fake.order == ["third", "first", "fourth", "second"] and fake.most == STARTS_AT_ONCE
    assert set(servers.times) == set(NAMES) and all(began <= up for began, up in servers.times.values())


@pytest.mark.skipif(os.geteuid() != 0, reason="leaving SCHED_IDLE takes CAP_SYS_NICE (test_engine_gate.py checks it)")
def test_after_the_gate_a_start_is_idle_until_asked_and_the_server_asked_for_is_normal(fake: FakeStarts) -> None:
    servers = servers_for(["first", "second"])
    servers.gate_passed = True
    futures = servers.start({"first", "second"})
    fake.release["first"].set()  # its start ends before any test asks for it
    done = futures["first"].result(timeout=30)
    assert os.sched_getscheduler(done.process.pid) == os.SCHED_IDLE  # launched from its start's idle thread
    assert servers.result("first") is done  # asked for: the server's processes leave the idle class
    assert os.sched_getscheduler(done.process.pid) == os.SCHED_OTHER

    while getattr(servers.launched.get("second"), "process", None) is None:  # still starting when asked for
        assert futures["second"].running(), "the second start never launched"
        threading.Event().wait(0.01)
    running = servers.launched["second"].process.pid
    assert os.sched_getscheduler(running) == os.SCHED_IDLE
    got: dict[str, SimpleNamespace] = {}
    asker = threading.Thread(target=lambda: got.update(server=servers.result("second")))
    asker.start()
    for _ in range(1000):  # promoted while its start still runs
        if os.sched_getscheduler(running) == os.SCHED_OTHER:
            break
        threading.Event().wait(0.01)
    assert os.sched_getscheduler(running) == os.SCHED_OTHER and asker.is_alive()
    fake.release["second"].set()
    asker.join(30)
    assert got["server"].process.pid == running
    servers.pool.shutdown(wait=True)


def test_a_session_that_ends_early_never_begins_the_starts_still_queued(fake: FakeStarts) -> None:
    servers = servers_for(["first", "second", "third"])
    futures = servers.start({"first", "second", "third"})
    while len(fake.running) < STARTS_AT_ONCE:  # both slots busy: the third waits in the queue
        threading.Event().wait(0.01)
    stopper = threading.Thread(target=servers.stop)
    stopper.start()
    for _ in range(1000):
        if futures["third"].cancelled():
            break
        threading.Event().wait(0.01)
    assert futures["third"].cancelled()
    fake.release["first"].set()
    fake.release["second"].set()
    stopper.join(30)
    assert not stopper.is_alive() and fake.order == ["first", "second"]
