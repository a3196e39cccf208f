"""Shared fixtures: one real vLLM (tiny model, CPU) for the whole test session."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from toolkit.servers.embedded.server import EmbeddedServer, ServerConfig, ServerError

TEST_API_KEY = "sk-toolkit-TEST-7f3a9c"  # distinctive, so output scans can look for it


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C deliverable, whoever started the tests: a non-interactive shell starts a background job (`make test
    &`, `nohup`) with SIGINT ignored, which every child inherits. Python then keeps it ignored, and so do Ray's
    `ray.cancel` and the tests that interrupt a run on purpose: they would test nothing. A Python handler here is
    reset to the default at exec, so the processes the tests start get Python's KeyboardInterrupt again."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def start_server(config: ServerConfig, api_key: str | None = None) -> EmbeddedServer:
    """Start a real vLLM or fail the test with the server's log tail (never skip)."""
    server = EmbeddedServer(config, api_key=api_key)
    try:
        return server.start()
    except ServerError as exc:
        pytest.fail(f"embedded vLLM did not start: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def vllm_server() -> Iterator[EmbeddedServer]:
    """The main server: max_model_len 4096, a 1 GiB KV cache, API key required."""
    server = start_server(ServerConfig(max_model_len=4096), api_key=TEST_API_KEY)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def constrained_server() -> Iterator[EmbeddedServer]:
    """A server with a small KV cache (104 blocks = 13,312 tokens) and room for 2 running requests."""
    server = start_server(ServerConfig(max_model_len=4096, kv_blocks=104, max_num_seqs=2))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def api_key_env(monkeypatch: pytest.MonkeyPatch) -> str:
    """Put the main server's key into VLLM_API_KEY for the toolkit under test; returns the variable name."""
    monkeypatch.setenv("VLLM_API_KEY", TEST_API_KEY)
    return "VLLM_API_KEY"


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loopback only: no proxy may reroute test traffic."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    os.environ.setdefault("MPLBACKEND", "Agg")
