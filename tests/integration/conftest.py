"""The engine tier's order: the speculative server's one test first, so that its vLLM (tests/conftest.py,
`speculative_server`) is stopped after it and no more vLLMs run at once than the five other session servers and one
that a test launches; the vision server's one test last, its vLLM started when the speculative one stops.

Tried and left (2026-12-05): the Ray cluster's tests first, while the session's vLLMs started from before the first
test. It saved about 60 s, but in one fresh-clone run of four the Ray head timed out during its start beside six
starting vLLMs ("The current node timed out during startup"), and all four Ray tests failed. `make test` now runs
the Ray module apart, beside the offline tier (the Makefile's RAY_TESTS)."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The speculative server's test first, the vision server's last, the rest in their order."""
    items.sort(key=lambda item: 0 if "speculative_server" in item.fixturenames else 2 if "vision_server" in
               item.fixturenames else 1)  # fmt: skip
