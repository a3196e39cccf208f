"""The engine tier's order: the speculative server's one test first, so that its vLLM (tests/conftest.py,
`speculative_server`) is stopped after it and no more vLLMs run at once than the five other session servers and one
that a test launches.

Tried and left (2026-12-05): the Ray cluster's tests first, while the session's vLLMs started from before the first
test. It saved about 60 s, but in one fresh-clone run of four the Ray head timed out during its start beside six
starting vLLMs ("The current node timed out during startup"), and all four Ray tests failed.

The Ray module runs before test_matrix_engine.py: its interrupted-variant tests mostly wait (a core of two idle),
and the server in a session of its own starts beside them (test_ray.py's `own_session_server_starting`), so that
its first test, test_matrix_engine.py's stream-interval one, does not wait for it (32.1 s in make test, with a
core idle; 3.5 s after). Beside the Ray sweep test instead, that test took 55.4 s against 37.7 s."""

from __future__ import annotations

import pytest

MOVED, BEFORE = "test_ray.py", "test_matrix_engine.py"  # the Ray module just before the matrix's (the docstring)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The speculative server's test first, the Ray module's before test_matrix_engine.py's, the rest in their
    order."""
    modules = list(dict.fromkeys(item.path.name for item in items))
    if MOVED in modules and BEFORE in modules:
        modules.remove(MOVED)
        modules.insert(modules.index(BEFORE), MOVED)
    items.sort(key=lambda item: ("speculative_server" not in item.fixturenames, modules.index(item.path.name)))
