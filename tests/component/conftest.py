"""Fixtures shared by the component tests: fault servers (tests/faultserver.py) started and stopped for a test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.faultserver import FaultServer


@pytest.fixture
def make_fault_server() -> Iterator[Callable[..., FaultServer]]:
    """A factory: `make_fault_server(**options)` starts a `FaultServer(**options)` (its start waits on an event);
    every server it started is stopped at teardown, the last first."""
    started: list[FaultServer] = []

    def make(**options: Any) -> FaultServer:
        server = FaultServer(**options).start()
        started.append(server)
        return server

    yield make
    for server in reversed(started):
        server.stop()


@pytest.fixture
def fault_server(make_fault_server: Callable[..., FaultServer]) -> FaultServer:
    """A fault server with the default options."""
    return make_fault_server()
