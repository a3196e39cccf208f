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

import contextlib
import dataclasses
import gc
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import psutil
import pytest

from tests.budget import GATE_PASSED_KEY
from tests.processes import assert_stop_leaves_no_vllm_process
from toolkit.servers.autogroups import write_autogroup_nice
from toolkit.servers.embedded.server import (
    EMBEDDING_MODEL_NAME,
    VISION_MODEL_NAME,
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


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """The heap frozen as the session ends: the interpreter's last collections at exit then skip the hundreds of
    thousands of objects that pytest, the test modules and the toolkit made, about 1 s of CPU for every pytest and
    xdist worker (`pytest --collect-only` of the fast tier: 3.3-3.8 s here, 2.6-2.7 s frozen at the end)."""
    gc.freeze()


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


ENGINE_GATE_ENV = "TOOLKIT_ENGINE_GATE"  # make test: a file that appears when the offline tier has finished
# A session server's start bound: beside the offline tier (in its idle CPU) a start takes minutes, not 21 s.
START_TIMEOUT_S = 1200.0 if os.environ.get(ENGINE_GATE_ENV) else ServerConfig.startup_timeout_s


_STARTING = threading.local()  # a SessionServers start's thread: `record`, where it says what it launches


def starting(what: Any) -> None:
    """Tell the SessionServers start running in this thread what it launches: an object whose `process` is the
    server's Popen once launched (SessionServers.promote); nothing outside such a start."""
    if (record := getattr(_STARTING, "record", None)) is not None:
        record(what)


NO_KEY = ""  # vLLM 0.32 serves without a key when VLLM_API_KEY is empty (its middleware drops empty keys)


def start_server(config: ServerConfig, api_key: str = NO_KEY) -> EmbeddedServer:
    """Start a real vLLM or fail the test with the server's log tail (never skip). The key is always given: a start
    runs beside the tests, and the environment it would inherit holds whatever VLLM_API_KEY a test has put there
    meanwhile (a keyless server started during such a test answered the next test 401 in one make test)."""
    server = EmbeddedServer(dataclasses.replace(config, startup_timeout_s=START_TIMEOUT_S), api_key=api_key)
    starting(server)
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
    tests would feel. It logs each request it receives with its adapter (--enable-log-requests): the count by
    adapter that its /metrics lacks."""
    return start_server(ServerConfig(max_model_len=2048, lora=True, log_requests=True))


def start_speculative_server() -> EmbeddedServer:
    """tiny-llama with ngram speculation (no draft model: works on CPU), max_model_len 2048, no API key."""
    return start_server(ServerConfig(max_model_len=2048, speculative_config=NGRAM))


def start_vision_server() -> EmbeddedServer:
    """The tiny vision-language model (`tiny-vision`: one image a chat request), max_model_len 2048, no API key."""
    return start_server(ServerConfig(max_model_len=2048, model=VISION_MODEL_NAME))


def start_server_in_own_session() -> tuple[subprocess.Popen[bytes], str]:
    """The embedded vLLM started from 'another terminal': `python -m toolkit serve` in a session of its own, with
    --stream-interval 4 and the test key; the process and its base URL once healthy."""
    port = free_port()
    command = [sys.executable, "-m", "toolkit", "serve", "--port", str(port), "--max-model-len", "4096",
               "--stream-interval", "4"]  # fmt: skip
    proc = subprocess.Popen(command, cwd=Path(__file__).resolve().parents[1], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, "VLLM_API_KEY": TEST_API_KEY})  # fmt: skip
    starting(SimpleNamespace(process=proc))
    deadline = time.monotonic() + max(START_TIMEOUT_S, 300.0)
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
    "vision_server": start_vision_server,
}
# Started when the speculative server stops (`speculative_server`), not with the others, so that no more vLLMs run at
# once (2.3 GB each here) than before it was added. Its one test runs last in the engine tier
# (tests/integration/conftest.py).
AFTER_SPECULATIVE = {"vision_server"}


AUTOGROUP_IDLE_NICE = 19  # a starting server's own autogroup until a test asks for it (weight 15 against 1024)


def set_autogroup_nice(pid: int, nice: int) -> None:
    """The nice of `pid`'s scheduler autogroup, where it has one of its own (a session apart from the tests'); a
    process that ended, or a write not permitted (below 0 without CAP_SYS_NICE), changes nothing."""
    with contextlib.suppress(OSError):
        if os.getsid(pid) != os.getsid(0):
            write_autogroup_nice(nice, Path(f"/proc/{pid}/autogroup"))


STARTS_AT_ONCE = 2  # a vLLM start is mostly one core: two at a time fill two cores, and the first needed is up first


class SessionServers:
    """Every session server that a collected test uses, started `STARTS_AT_ONCE` at a time in the order the tests
    first ask for them: a vLLM start is three Python processes importing torch and vLLM one after another (~30 CPU-s,
    mostly one core). Started all at once in the idle CPU beside the offline tier, each got a share of what little
    CPU was idle there, none was up at the gate, and the first two tests waited 24 and 22 s for theirs."""

    def __init__(self, items: list[pytest.Item]) -> None:
        used = [name for item in items for name in getattr(item, "fixturenames", ()) if name in SESSION_SERVERS]
        self.order = list(dict.fromkeys(used))  # as the tests first ask for them
        self.pool = ThreadPoolExecutor(max_workers=STARTS_AT_ONCE, thread_name_prefix="vllm-start")
        self.starts: dict[str, Future[Any]] = {}
        self.threads: dict[str, int] = {}  # each running start's thread (native id)
        self.launched: dict[str, Any] = {}  # what each start launches (`starting`)
        self.asked: set[str] = set()  # the servers a test has asked for (`result`)
        self.times: dict[str, tuple[float, float]] = {}  # each finished start's beginning and end (monotonic)
        self.gate_passed = False  # a start begun after the gate: SCHED_IDLE until a test asks for its server

    def start(self, names: set[str]) -> dict[str, Future[Any]]:
        """Begin (queue) the starts of those of `names` that a test uses and that have not begun, in the order the
        tests need them; every start so far."""
        for name in [n for n in self.order if n in names and n not in self.starts]:
            self.starts[name] = self.pool.submit(self._start, name)
        return self.starts

    def _start(self, name: str) -> object:
        self.threads[name] = threading.get_native_id()
        _STARTING.record = lambda what: self._launched(name, what)
        if self.gate_passed:  # the thread, and what it launches: idle until a test asks (a pool thread may be either)
            policy = os.SCHED_OTHER if name in self.asked else os.SCHED_IDLE
            with contextlib.suppress(PermissionError):
                os.sched_setscheduler(0, policy, os.sched_param(0))
        began = time.monotonic()
        try:
            return SESSION_SERVERS[name]()
        finally:
            self.times[name] = (began, time.monotonic())
            self.threads.pop(name, None)  # the pool thread goes on to the next start: promote leaves it alone

    def _launched(self, name: str, what: Any) -> None:
        """`what` a start launched; a server in a session of its own is in an autogroup of its own, where SCHED_IDLE
        holds it back only from its own threads: until a test asks for it, the whole group at nice 19."""
        self.launched[name] = what
        process = getattr(what, "process", None)  # an EmbeddedServer says so before it launches (None)
        if process is not None and self.gate_passed and name not in self.asked:
            set_autogroup_nice(process.pid, AUTOGROUP_IDLE_NICE)

    def promote(self, name: str) -> None:
        """`name`'s start thread and its server's processes back to the normal class (leave_idle_class), when a test
        asks for it: at the gate the servers no test has asked for yet stay SCHED_IDLE, starting in the CPU that the
        tests leave idle. A no-op outside the gate (nothing is SCHED_IDLE)."""
        thread = self.threads.get(name)  # None: not begun, or done
        with contextlib.suppress(ProcessLookupError, PermissionError):  # ended; not permitted (said at the gate)
            if thread is not None and os.sched_getscheduler(thread) == os.SCHED_IDLE:
                os.sched_setscheduler(thread, os.SCHED_OTHER, os.sched_param(0))
        process = getattr(self.launched.get(name), "process", None)
        if process is not None:
            with contextlib.suppress(psutil.NoSuchProcess):
                leave_idle_class(process.pid)
            set_autogroup_nice(process.pid, 0)

    def result(self, name: str) -> Any:
        """The started server (waiting for its start, begun here if it was not), in the normal class."""
        self.asked.add(name)
        self.promote(name)
        started = self.start({name})[name].result()
        self.promote(name)  # its processes, whatever class they were launched in
        return started

    def stop(self) -> None:
        """Stop each, used or not, before the pool's threads end: a launching thread's end sends its server SIGTERM
        (PDEATHSIG), which raced the constrained server's check below (its group had already lost its engine)."""
        for queued in self.starts.values():  # those not begun yet (a session that ended early) never begin
            queued.cancel()
        wait(self.starts.values())
        started: dict[str, Any] = {name: f.result() for name, f in self.starts.items()
                                   if not f.cancelled() and f.exception() is None}  # fmt: skip
        if "server_in_own_session" in started:
            proc, _ = started["server_in_own_session"]
            proc.terminate()
            proc.wait(timeout=60)
        # the module-scoped ones were stopped after their module already: stopped twice, a no-op
        for name in ("vllm_server", "embedding_server", "lora_server", "speculative_server", "vision_server"):
            if name in started:
                started[name].stop()
        if "constrained_server" in started:
            assert_stop_leaves_no_vllm_process(started["constrained_server"])  # API server and engine all end
        self.pool.shutdown(wait=True)


SESSION_SERVERS_KEY = pytest.StashKey[SessionServers]()
GATE_TIMEOUT_S = 3600.0


def session_servers(session: pytest.Session) -> SessionServers:
    """The session's servers (none started yet on the first call)."""
    if SESSION_SERVERS_KEY not in session.config.stash:
        session.config.stash[SESSION_SERVERS_KEY] = SessionServers(session.items)
    return session.config.stash[SESSION_SERVERS_KEY]


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    """With TOOLKIT_ENGINE_GATE set (`make test` starts the engine tier beside the offline tier, as SCHED_IDLE):
    start the session's servers now, then wait for the gate file before the first test, so that they start in the
    offline tier's idle CPU instead of after it (two at a time, in the order the tests need them: that tier leaves
    little idle, and the first two were still starting at the gate). At the gate this process leaves the idle class,
    and each server when a test first asks for it (SessionServers.promote): the others go on starting in the CPU the
    tests leave idle. The server in a session of its own is queued at the gate: its own scheduler autogroup would
    take a full share beside the offline tier whatever its policy, so after the gate that autogroup waits at nice 19
    until a test asks for it. The wait is kept apart from the tier's time (tests/budget.py)."""
    gate = os.environ.get(ENGINE_GATE_ENV)
    if not gate or not session.items or session.config.option.collectonly:
        return
    started = time.monotonic()
    servers = session_servers(session)
    servers.start(set(SESSION_SERVERS) - {"server_in_own_session"} - AFTER_SPECULATIVE)
    try:
        while not Path(gate).exists():
            if time.monotonic() - started > GATE_TIMEOUT_S:
                raise pytest.UsageError(f"{ENGINE_GATE_ENV}: {gate} did not appear within {GATE_TIMEOUT_S:g} s")
            time.sleep(0.2)
    except BaseException:
        servers.stop()
        raise
    session.config.stash[GATE_PASSED_KEY] = time.monotonic()
    servers.gate_passed = True
    leave_idle_class(os.getpid(), descend=False, keep=set(servers.threads.values()))
    servers.start({"server_in_own_session"})


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """Each session server's start, from its beginning to its server being up, in seconds from the gate (make test)
    or from the first start: what the first tests waited for."""
    servers = config.stash.get(SESSION_SERVERS_KEY, None)
    if servers is None or not servers.times:
        return
    gate = config.stash.get(GATE_PASSED_KEY, None)
    zero = gate if gate is not None else min(began for began, _ in servers.times.values())
    starts = sorted(servers.times.items(), key=lambda item: item[1][0])
    shown = ", ".join(f"{name} {began - zero:+.0f} to {up - zero:+.0f}" for name, (began, up) in starts)
    terminalreporter.write_line(f"session servers' starts (s from the {'gate' if gate else 'first'}): {shown}")


def leave_idle_class(root: int, *, descend: bool = True, keep: set[int] | None = None) -> None:
    """Every thread of `root` and (`descend`) its descendants back to the normal class (SCHED_OTHER), but the
    threads in `keep`: a SCHED_IDLE thread never preempts another on its wake-up, so a measuring client would wait
    for the scheduler's tick. Threads and processes started later inherit it from their parent. Not permitted (not
    root): said once, the tests run in the idle class."""
    try:
        processes = [psutil.Process(root), *(psutil.Process(root).children(recursive=True) if descend else [])]
        for process in processes:
            with contextlib.suppress(psutil.NoSuchProcess):  # a process that ended meanwhile
                for thread in process.threads():
                    with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
                        if thread.id not in (keep or set()) and os.sched_getscheduler(thread.id) == os.SCHED_IDLE:
                            os.sched_setscheduler(thread.id, os.SCHED_OTHER, os.sched_param(0))
    except PermissionError as exc:
        print(f"warning: the engine tier stays SCHED_IDLE ({exc}): its timings may wait for the tick", file=sys.stderr)


@pytest.fixture(scope="session")
def _session_servers(request: pytest.FixtureRequest) -> Iterator[SessionServers]:
    """The session servers (SessionServers), their starts begun when the first is asked for unless the gate began
    them (the loop's doc); each is stopped at the session's end, used or not."""
    servers = session_servers(request.session)
    servers.start(set(SESSION_SERVERS) - AFTER_SPECULATIVE)
    try:
        yield servers
    finally:
        servers.stop()


@pytest.fixture(scope="session")
def vllm_server(_session_servers: SessionServers) -> EmbeddedServer:
    """The main server: max_model_len 4096, a 1 GiB KV cache, API key required."""
    return _session_servers.result("vllm_server")


@pytest.fixture(scope="session")
def constrained_server(_session_servers: SessionServers) -> EmbeddedServer:
    """A server with a small KV cache (104 blocks = 13,312 tokens) and room for 2 running requests."""
    return _session_servers.result("constrained_server")


@pytest.fixture(scope="session")
def server_in_own_session(_session_servers: SessionServers) -> str:
    """The embedded vLLM in a session of its own with --stream-interval 4 and the test key; its base URL. One launch
    serves two tests that each need a server apart from the main one: plain papermill against a server in another
    session (tests/integration/test_sessions.py) and chunks of 4 tokens (test_matrix_engine.py's stream-interval
    test)."""
    return str(_session_servers.result("server_in_own_session")[1])


@pytest.fixture(scope="session")
def embedding_server(_session_servers: SessionServers) -> EmbeddedServer:
    """The tiny model served as an embedding model: /v1/embeddings only (no chat or completions), no API key."""
    return _session_servers.result("embedding_server")


@pytest.fixture(scope="session")
def lora_server(_session_servers: SessionServers) -> EmbeddedServer:
    """tiny-llama and its random-weight LoRA adapter `tiny-lora` on one server, no API key."""
    return _session_servers.result("lora_server")


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
def speculative_server(_session_servers: SessionServers) -> Iterator[EmbeddedServer]:
    """tiny-llama with ngram speculation, no API key. One test uses it: it runs first (tests/integration/conftest.py)
    and the server stops after its module, so that no more vLLMs are up at once than before it was started beside
    the others (about 2.5 GB each); the vision server starts in its place (AFTER_SPECULATIVE)."""
    server = _session_servers.result("speculative_server")
    yield server
    server.stop()
    _session_servers.start(AFTER_SPECULATIVE)


@pytest.fixture(scope="module")
def vision_server(_session_servers: SessionServers) -> Iterator[EmbeddedServer]:
    """The tiny vision-language model, no API key; stopped after its module (one test uses it)."""
    server = _session_servers.result("vision_server")
    yield server
    server.stop()
