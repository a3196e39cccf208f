"""A params file's `server:` block for one run: launch, record what ran, stop; and how the server ended.

The launching process (`toolkit run`) writes server.json into the results folder: the command that ran (the
key shown as `<redacted>`, paths as toolkit.results.local_paths shows them), the engine found in the server's own Python
environment, and, if the server dies before it is stopped, its exit status and log tail. The notebook kernels
that measure read it from there.
"""

from __future__ import annotations

import os
import shlex
import signal
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from toolkit.base.api_keys import REDACTED, redact, redact_and_cut, scrub
from toolkit.base.errors import HealthTimeout, ParamsError, PortTaken, ServerError
from toolkit.params import RunParams, ServerSpec
from toolkit.results.documents.server import LAUNCH_FILE, ServerRecord, read_server_record
from toolkit.results.local_paths import public_paths
from toolkit.servers.machine import engine_facts
from toolkit.servers.managed import (
    STOP_SIGNALS,
    ManagedServer,
    exit_description,
    port_taken,
    process_running,
    resolve_executable,
)

DEFAULT_LOG = "server.log"
EXIT_TAIL_LINES = 12


def server_env(spec: ServerSpec, api_key: str | None) -> dict[str, str]:
    """The server's environment: this one, the block's `env`, and VLLM_API_KEY only from `api_key_env`."""
    env = {**os.environ, **spec.env}
    env.pop("VLLM_API_KEY", None)
    if api_key:
        env["VLLM_API_KEY"] = api_key
    return env


def shown_command(command: Sequence[str], extra_env: Mapping[str, str], api_key: str | None) -> str:
    """The command line as it ran, with the variables the toolkit set in front; the key is `<redacted>`.

    Paths are shown as a published report may show them: relative inside the repository, `~` for the home.
    """
    assignments = [f"VLLM_API_KEY={REDACTED}"] if api_key else []
    # The names were checked (ServerSpec: no keys, tokens, passwords); a value may still carry a credential (a
    # proxy's or an index's user:password@, a token= in a URL) and is scrubbed like the command.
    assignments += [scrub(f"{name}={shlex.quote(value)}", api_key) for name, value in extra_env.items()]
    return public_paths(" ".join([*assignments, scrub(shlex.join(command), api_key)]))


def log_path(spec: ServerSpec, results_dir: Path) -> Path:
    return Path(spec.log_file) if spec.log_file else results_dir / DEFAULT_LOG


def check_command(spec: ServerSpec, api_key: str | None) -> None:
    """Refuse a command whose program does not exist, before anything is created or launched."""
    if resolve_executable(spec.command, server_env(spec, api_key)) is None:
        raise ParamsError(f"server.command: {spec.command[0]!r} not found (not an executable path, nor on PATH)")


_RECORD_LOCK = threading.Lock()  # the watcher thread and the launching thread both update server.json


def _update_record(results_dir: Path, **fields: Any) -> None:
    with _RECORD_LOCK:
        held = read_server_record(results_dir)
        _write_record(results_dir, {**(held.as_dict() if held else {}), **fields})


def _write_record(results_dir: Path, fields: dict[str, Any]) -> None:
    path = results_dir / LAUNCH_FILE
    ServerRecord.written(fields, path).write(path)


@contextmanager
def launched_server(
    spec: ServerSpec, params: RunParams, results_dir: Path, api_key: str | None
) -> Iterator[ManagedServer]:
    """Launch the block's server (its command checked by the caller: `check_command`), wait for `/health` on
    base_url, record it; stop it on exit, error or Ctrl-C. `api_key`: the run's, read once where it began.

    SIGTERM or SIGHUP to this process stops the server too (turned into KeyboardInterrupt while the server runs).
    Refused before anything is written when base_url's port is taken already.
    """
    if taken := port_taken(params.base_url):
        raise ServerError(f"base_url: {taken}: another server runs there; stop it or choose another port")
    env = server_env(spec, api_key)
    server = ManagedServer(
        spec.command,
        base_url=params.base_url,
        env=env,
        log_path=log_path(spec, results_dir),
        health_timeout_s=spec.health_timeout_s,
        on_exit=lambda code: _update_record(
            results_dir, exit_code=code, log_tail=redact(server.log_tail(EXIT_TAIL_LINES), api_key)
        ),
    )
    restore = stop_signals_as_interrupt()
    try:
        # Written before the launch (a resumed run's old record goes), completed after: an exit the watcher
        # records in between is kept.
        _write_record(
            results_dir,
            {
                "launched_by": "toolkit",
                "command": shown_command(spec.command, spec.env, api_key),
                "base_url": params.base_url,
                "pid": None,
                "log_file": str(server.log_path),
                "exit_code": None,
                "log_tail": None,
                "stopped_at": None,
            },
        )
        started = time.monotonic()
        try:
            server.start()
        except PortTaken as exc:
            raise ServerError(f"base_url: {redact(exc.reason, api_key)}") from None
        except ServerError as exc:
            field = "server.health_timeout_s" if isinstance(exc, HealthTimeout) else "server.command"
            last = next((x for x in reversed(exc.log_tail.splitlines()) if x.strip()), "")
            hint = f"; last log line: {redact_and_cut(last, 200, api_key)}" if last else ""
            raise ServerError(f"{field}: {exc.reason}{hint} (log: {exc.log_path})") from None
        _update_record(
            results_dir, pid=server.pid, started_at=server.started_at, startup_s=round(time.monotonic() - started, 1)
        )
        _update_record(results_dir, engine=engine_facts(spec.command, env))
        yield server
    finally:
        server.stop()
        if server.pid is not None:
            _update_record(results_dir, stopped_at=datetime.now(UTC).isoformat(timespec="seconds"))
        restore()


def stop_signals_as_interrupt() -> Any:
    """Turn SIGTERM, SIGHUP and SIGINT into KeyboardInterrupt (main thread only); returns what restores them.

    SIGINT too: with Python's default handler in place, asyncio.Runner (papermill's client runs on one) swaps in
    its own, which only cancels the running task; nbclient can absorb that and go on executing the notebook.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def interrupt(*_: object) -> None:
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, interrupt) for sig in STOP_SIGNALS}
    return lambda: [signal.signal(sig, handler) for sig, handler in previous.items()]


def exit_note(results_dir: str | Path, wait_s: float = 5.0) -> str | None:
    """Why the launched server is gone (exit status and log tail), for an Error cell; None while it runs.

    The launching process records the exit a moment after the server died: wait up to `wait_s` for it.
    """
    record = read_server_record(results_dir)
    if record is None or not record.pid or record.stopped_at:
        return None
    pid = record.pid
    deadline = time.monotonic() + wait_s
    while record.exit_code is None:
        if process_running(pid):
            return None
        if time.monotonic() > deadline:
            return f"the server (pid {pid}) is gone; its exit status was not recorded"
        time.sleep(0.1)
        record = read_server_record(results_dir) or record
    tail = record.log_tail or "(empty log)"
    return f"the server {exit_description(record.exit_code)}; last lines of its log:\n{tail}"


def launch_info(results_dir: str | Path) -> dict[str, Any]:
    """What run.json says about the server's launch: launched by the toolkit (with what) or found running."""
    record = read_server_record(results_dir)
    if record is None:
        return {"launched_by_toolkit": False}
    keep = ("command", "log_file", "started_at", "startup_s", "engine")
    return {"launched_by_toolkit": True, **{k: getattr(record, k) for k in keep}}
