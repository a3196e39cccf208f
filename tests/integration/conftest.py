"""The engine tier's order: the speculative server's one test first, so that its vLLM (tests/conftest.py,
`speculative_server`) is stopped after it and no more vLLMs run at once than the five other session servers and one
that a test launches.

Tried and left (2026-12-05): the Ray cluster's tests first, while the session's vLLMs started from before the first
test. It saved about 60 s, but in one fresh-clone run of four the Ray head timed out during its start beside six
starting vLLMs ("The current node timed out during startup"), and all four Ray tests failed. `make test` now runs
the Ray module apart, beside the offline tier (the Makefile's RAY_TESTS)."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The speculative server's test first, the rest in their order."""
    items.sort(key=lambda item: "speculative_server" not in item.fixturenames)
