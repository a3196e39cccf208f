"""The engine tier's order: the tests that start no vLLM (the Ray cluster's, against fault servers) run first, while
the session's vLLMs start side by side (tests/conftest.py, `_session_server_starts`).

A vLLM start is three processes importing torch and vLLM one after another, and five together left part of the two
cores idle for their 87 s; the Ray tests' batches use it instead of running after them."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest

FIRST = ("ray_cluster", "speculative_server")  # then the one test of the speculative server, which it stops after


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The Ray cluster's tests first, then the speculative server's, the rest in their order."""
    items.sort(key=lambda item: next((i for i, name in enumerate(FIRST) if name in item.fixturenames), len(FIRST)))


@pytest.fixture(scope="session", autouse=True)
def _session_servers_start_first(_session_server_starts: dict[str, Future[Any]]) -> None:
    """The session's vLLMs begin to start before the first test, whichever it is."""
