"""The embedded default server: a real vLLM (CPU) serving the tiny model, on 127.0.0.1 only.

The toolkit never imports vllm: the server runs from the separate `.venv-vllm` interpreter.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE_DIR = Path(os.environ.get("TOOLKIT_CACHE", REPO_ROOT / ".cache"))
VLLM_PYTHON = Path(os.environ.get("TOOLKIT_VLLM_PYTHON", REPO_ROOT / ".venv-vllm" / "bin" / "python"))
MODEL_DIR = CACHE_DIR / "tiny-llama"
SERVED_MODEL_NAME = "tiny-llama"
BLOCK_SIZE_TOKENS = 128  # vLLM's KV block size on CPU
BUILDER = Path(__file__).with_name("build_tiny_model.py")


class ServerError(RuntimeError):
    """The embedded server could not be started; the message carries the log tail."""


@dataclass(frozen=True)
class ServerConfig:
    """Launch settings of the embedded vLLM."""

    port: int | None = None
    max_model_len: int = 8192
    kv_blocks: int | None = None
    max_num_seqs: int | None = None
    stream_interval: int = 1
    kv_cache_gib: int = 1
    startup_timeout_s: float = 240.0
    log_path: Path | None = None

    def check(self) -> None:
        """Refuse settings vLLM would only reject after a slow start-up."""
        if self.max_model_len < 256:
            raise ValueError(f"max_model_len: {self.max_model_len} is too small; allowed: >= 256")
        # vLLM keeps one block back (the null block), so one request of max_model_len needs one more.
        needed = -(-self.max_model_len // BLOCK_SIZE_TOKENS) + 1
        if self.kv_blocks is not None and self.kv_blocks < needed:
            raise ValueError(
                f"kv_blocks: {self.kv_blocks} blocks of {BLOCK_SIZE_TOKENS} tokens cannot hold one request of "
                f"max_model_len {self.max_model_len}; allowed: >= {needed}"
            )
        if self.max_num_seqs is not None and self.max_num_seqs < 1:
            raise ValueError(f"max_num_seqs: {self.max_num_seqs}; allowed: >= 1")
        if self.stream_interval < 1:
            raise ValueError(f"stream_interval: {self.stream_interval}; allowed: >= 1")


def ensure_model(model_dir: Path = MODEL_DIR) -> Path:
    """Build the tiny model once (seeded, offline); later calls reuse the cached folder."""
    if (model_dir / "toolkit-tiny-model.json").exists():
        return model_dir
    if not VLLM_PYTHON.exists():
        raise ServerError(f"{VLLM_PYTHON} not found: run `make vllm` first")
    model_dir.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(VLLM_PYTHON), str(BUILDER), str(model_dir)], check=True, env=_vllm_env(1))
    return model_dir


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _vllm_env(kv_cache_gib: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        VLLM_CPU_KVCACHE_SPACE=str(kv_cache_gib),
        VLLM_HOST_IP="127.0.0.1",
        VLLM_TARGET_DEVICE="cpu",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        TOKENIZERS_PARALLELISM="false",
    )
    return env


def launch_command(config: ServerConfig, port: int, model_dir: Path) -> list[str]:
    """The vLLM command line (the API key travels in the environment, never on the command line)."""
    cmd = [
        str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model_dir),
        "--served-model-name", SERVED_MODEL_NAME,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--max-model-len", str(config.max_model_len),
        "--dtype", "bfloat16",
        "--enforce-eager",
        "--enable-prefix-caching",
    ]  # fmt: skip
    if config.kv_blocks is not None:
        cmd += ["--num-gpu-blocks-override", str(config.kv_blocks)]
    if config.max_num_seqs is not None:
        cmd += ["--max-num-seqs", str(config.max_num_seqs)]
    if config.stream_interval != 1:
        cmd += ["--stream-interval", str(config.stream_interval)]
    return cmd


class EmbeddedServer:
    """Start the real vLLM on 127.0.0.1, wait for `/health`, stop it with all its engine processes.

    Use as a context manager: `with EmbeddedServer(ServerConfig()) as server: server.base_url`.
    """

    def __init__(self, config: ServerConfig | None = None, *, api_key: str | None = None) -> None:
        """`api_key` overrides VLLM_API_KEY for this server only; it goes to vLLM through its environment."""
        self.config = config or ServerConfig()
        self._api_key = api_key
        self.config.check()
        self.port = self.config.port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = self.config.log_path or CACHE_DIR / "logs" / f"vllm-{self.port}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.command: list[str] = []

    def start(self) -> EmbeddedServer:
        """Launch vLLM in a process group of its own (stopped as one) inside the caller's session.

        Not a new session: Linux gives every session its own scheduler autogroup, and a busy vLLM in one
        autogroup starves a client in another for seconds at a time (docs/METHOD.md, Pauses).
        """
        model_dir = ensure_model()
        self.command = launch_command(self.config, self.port, model_dir)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = _vllm_env(self.config.kv_cache_gib)
        if self._api_key is not None:
            env["VLLM_API_KEY"] = self._api_key
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                self.command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, process_group=0,
            )  # fmt: skip
        self._wait_healthy()
        return self

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.config.startup_timeout_s
        assert self.process is not None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.stop()
                raise ServerError(f"vLLM exited with code {self.process.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(self.base_url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise ServerError(f"vLLM did not answer /health within {self.config.startup_timeout_s:g} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM the whole process group (API server and engine cores), SIGKILL what remains."""
        if self.process is None:
            return
        pgid = self.process.pid
        for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            end = time.monotonic() + wait_s
            while time.monotonic() < end and _group_alive(pgid):
                self.process.poll()
                time.sleep(0.2)
            if not _group_alive(pgid):
                break
        self.process.poll()

    def __enter__(self) -> EmbeddedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    # Zombies of our own child still count until reaped; reap and look again.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(-pgid, os.WNOHANG)
    return _has_live_member(pgid)


def _has_live_member(pgid: int) -> bool:
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def serve_forever(config: ServerConfig) -> int:
    """Foreground server for `python -m toolkit serve`: print the URL, stop cleanly on Ctrl-C/SIGTERM."""
    server = EmbeddedServer(config)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        server.start()
        print(server.base_url, flush=True)
        print(f"log: {server.log_path}", file=sys.stderr, flush=True)
        while server.process is not None and server.process.poll() is None:
            time.sleep(0.5)
        print(f"vLLM exited:\n{server.log_tail()}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        server.stop()
