"""Shared fixtures (one real vLLM, tiny model, CPU, for the whole test session) and the test tiers.

Every test belongs to one tier, a registered marker (pyproject.toml), by cost:
- `unit`: pure logic, nothing started (tests/unit by default);
- `component`: the toolkit in this process against fake servers in threads (tests/component by default);
- `process`: starts a Python process: a notebook kernel, a `toolkit` command, a launched fake server;
- `engine`: a real vLLM or a Ray cluster (tests/integration).
A test outside tests/integration that starts a Python process without the `process` marker fails, naming the
command: the inner loop (`make test-fast`, `-m "unit or component"`) stays free of kernels and subprocesses.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.processes import assert_stop_leaves_no_vllm_process
from toolkit.servers.embedded.server import (
    EMBEDDING_MODEL_NAME,
    EmbeddedServer,
    ServerConfig,
    ServerError,
    free_port,
)

TEST_API_KEY = "sk-toolkit-TEST-7f3a9c"  # distinctive, so output scans can look for it
NGRAM = '{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3}'  # the speculative server's


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C deliverable, whoever started the tests: a non-interactive shell starts a background job (`make test
    &`, `nohup`) with SIGINT ignored, which every child inherits. Python then keeps it ignored, and so do Ray's
    `ray.cancel` and the tests that interrupt a run on purpose: they would test nothing. A Python handler here is
    reset to the default at exec, so the processes the tests start get Python's KeyboardInterrupt again."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


TIERS = ("unit", "component", "process", "engine")
DEFAULT_TIER = {"unit": "unit", "component": "component", "integration": "engine"}  # by the test's folder


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test without a tier marker gets its folder's; one with two tiers is an error."""
    for item in items:
        tiers = sorted({mark.name for mark in item.iter_markers()} & set(TIERS))
        if len(tiers) > 1:
            raise pytest.UsageError(f"{item.nodeid}: more than one tier marker: {', '.join(tiers)}")
        if not tiers:
            folder = Path(str(item.path)).parent.name
            item.add_marker(DEFAULT_TIER.get(folder, "unit"))


def _starts_python(args: object) -> bool:
    """Whether a Popen command line runs a Python interpreter (a kernel, `python -m toolkit`, vLLM)."""
    command = [args] if isinstance(args, str | bytes | os.PathLike) else list(args)  # type: ignore[call-overload]
    if not command:
        return False
    program = os.fsdecode(command[0])
    return program == sys.executable or os.path.basename(program.split()[0]).startswith("python")


@pytest.fixture(autouse=True)
def _tier_starts_no_python(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """In the `unit` and `component` tiers, starting a Python process (a kernel, a `toolkit` command) fails."""
    if request.node.get_closest_marker("process") or request.node.get_closest_marker("engine"):
        return
    original = subprocess.Popen.__init__

    def guarded(self: subprocess.Popen[bytes], args: object, *rest: object, **kwargs: object) -> None:
        if _starts_python(args):
            raise AssertionError(f"this test starts a Python process ({args!r}): mark it @pytest.mark.process")
        original(self, args, *rest, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(subprocess.Popen, "__init__", guarded)


def start_server(config: ServerConfig, api_key: str | None = None) -> EmbeddedServer:
    """Start a real vLLM or fail the test with the server's log tail (never skip)."""
    server = EmbeddedServer(config, api_key=api_key)
    try:
        return server.start()
    except ServerError as exc:
        pytest.fail(f"embedded vLLM did not start: {exc}", pytrace=False)


def _healthy(base_url: str) -> bool:
    try:
        return httpx.get(base_url + "/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def start_main_server() -> EmbeddedServer:
    """The main server: max_model_len 4096, a 1 GiB KV cache, API key required."""
    return start_server(ServerConfig(max_model_len=4096), api_key=TEST_API_KEY)


def start_constrained_server() -> EmbeddedServer:
    """A server with a small KV cache (104 blocks = 13,312 tokens) and room for 2 running requests."""
    return start_server(ServerConfig(max_model_len=4096, kv_blocks=104, max_num_seqs=2))


def start_embedding_server() -> EmbeddedServer:
    """The tiny model as an embedding model (`tiny-embedding`: vLLM's pooling runner), max_model_len 2048."""
    return start_server(ServerConfig(max_model_len=2048, model=EMBEDDING_MODEL_NAME))


def start_lora_server() -> EmbeddedServer:
    """tiny-llama with its LoRA adapter served beside it as `tiny-lora` (issue 47), max_model_len 2048. Its own
    server: --enable-lora slows the base model's decode by about 28 % on this CPU, which the main server's timing
    tests would feel."""
    return start_server(ServerConfig(max_model_len=2048, lora=True))


def start_speculative_server() -> EmbeddedServer:
    """tiny-llama with ngram speculation (no draft model: works on CPU), max_model_len 2048, no API key."""
    return start_server(ServerConfig(max_model_len=2048, speculative_config=NGRAM))


def start_server_in_own_session() -> tuple[subprocess.Popen[bytes], str]:
    """The embedded vLLM started from 'another terminal': `python -m toolkit serve` in a session of its own, with
    --stream-interval 4 and the test key; the process and its base URL once healthy."""
    port = free_port()
    command = [sys.executable, "-m", "toolkit", "serve", "--port", str(port), "--max-model-len", "4096",
               "--stream-interval", "4"]  # fmt: skip
    proc = subprocess.Popen(command, cwd=Path(__file__).resolve().parents[1], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, "VLLM_API_KEY": TEST_API_KEY})  # fmt: skip
    deadline = time.monotonic() + 300
    while not any(c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN
                  for c in psutil.net_connections("tcp")):  # fmt: skip
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail("the embedded vLLM in its own session did not start", pytrace=False)
        time.sleep(0.5)
    base_url = f"http://127.0.0.1:{port}"
    while not _healthy(base_url):  # listening comes before the engine is ready
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail("the embedded vLLM in its own session never became healthy", pytrace=False)
        time.sleep(0.2)
    return proc, base_url


SESSION_SERVERS: dict[str, Callable[[], object]] = {
    "vllm_server": start_main_server,
    "constrained_server": start_constrained_server,
    "server_in_own_session": start_server_in_own_session,
    "embedding_server": start_embedding_server,
    "lora_server": start_lora_server,
    "speculative_server": start_speculative_server,
}


@pytest.fixture(scope="session")
def _session_server_starts(request: pytest.FixtureRequest) -> Iterator[dict[str, Future[Any]]]:
    """Every session server that a collected test uses, started side by side when the first is asked for: a vLLM
    start is three Python processes importing torch and vLLM one after another (~21 s, mostly one core). Each is
    stopped at the session's end, used or not."""
    needed = {name for item in request.session.items for name in getattr(item, "fixturenames", ())}
    pool = ThreadPoolExecutor(max_workers=len(SESSION_SERVERS), thread_name_prefix="vllm-start")
    starts = {name: pool.submit(start) for name, start in SESSION_SERVERS.items() if name in needed}
    try:
        yield starts
    finally:
        # Stopped before the pool's threads end: a launching thread's end sends its server SIGTERM (PDEATHSIG), which
        # raced the constrained server's check below (its group had already lost its engine, 2026-12-05).
        wait(starts.values())
        started: dict[str, Any] = {name: f.result() for name, f in starts.items() if f.exception() is None}
        if "server_in_own_session" in started:
            proc, _ = started["server_in_own_session"]
            proc.terminate()
            proc.wait(timeout=60)
        for name in ("vllm_server", "embedding_server", "lora_server", "speculative_server"):  # stopped twice: a no-op
            if name in started:
                started[name].stop()
        if "constrained_server" in started:
            assert_stop_leaves_no_vllm_process(started["constrained_server"])  # API server and engine all end
        pool.shutdown(wait=True)


@pytest.fixture(scope="session")
def vllm_server(_session_server_starts: dict[str, Future[Any]]) -> EmbeddedServer:
    """The main server: max_model_len 4096, a 1 GiB KV cache, API key required."""
    return _session_server_starts["vllm_server"].result()


@pytest.fixture(scope="session")
def constrained_server(_session_server_starts: dict[str, Future[Any]]) -> EmbeddedServer:
    """A server with a small KV cache (104 blocks = 13,312 tokens) and room for 2 running requests."""
    return _session_server_starts["constrained_server"].result()


@pytest.fixture(scope="session")
def server_in_own_session(_session_server_starts: dict[str, Future[Any]]) -> str:
    """The embedded vLLM in a session of its own with --stream-interval 4 and the test key; its base URL. One launch
    serves two tests that each need a server apart from the main one: plain papermill against a server in another
    session (tests/integration/test_sessions.py) and chunks of 4 tokens (test_matrix_engine.py's stream-interval
    test)."""
    return str(_session_server_starts["server_in_own_session"].result()[1])


@pytest.fixture(scope="session")
def embedding_server(_session_server_starts: dict[str, Future[Any]]) -> EmbeddedServer:
    """The tiny model served as an embedding model: /v1/embeddings only (no chat or completions), no API key."""
    return _session_server_starts["embedding_server"].result()


@pytest.fixture(scope="session")
def lora_server(_session_server_starts: dict[str, Future[Any]]) -> EmbeddedServer:
    """tiny-llama and its random-weight LoRA adapter `tiny-lora` on one server, no API key."""
    return _session_server_starts["lora_server"].result()


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


@pytest.fixture(scope="module")
def speculative_server(_session_server_starts: dict[str, Future[Any]]) -> Iterator[EmbeddedServer]:
    """tiny-llama with ngram speculation, no API key. One test uses it: it runs first (tests/integration/conftest.py)
    and the server stops after its module, so that no more vLLMs are up at once than before it was started beside
    the others (about 2.5 GB each)."""
    server = _session_server_starts["speculative_server"].result()
    yield server
    server.stop()
