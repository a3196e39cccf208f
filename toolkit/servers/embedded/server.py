"""The embedded default server: a real vLLM (CPU) serving the tiny model, on 127.0.0.1 only.

The toolkit never imports vllm: the server runs from the separate `.venv-vllm` interpreter.
"""

from __future__ import annotations

import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from toolkit.base.api_keys import api_key_from_env
from toolkit.base.errors import ParamsError, ServerError
from toolkit.params import RunParams, ServerSpec
from toolkit.servers.embedded.models import (
    CACHE_DIR,
    EMBEDDED_MODELS,
    EMBEDDING_MODEL_NAME,
    LORA_DIR,
    LORA_NAME,
    MODEL_DIR,
    SERVED_MODEL_NAME,
    VISION_MAX_IMAGES,
    VISION_MODEL_NAME,
    VLLM_PYTHON,
    check_vllm_installed,
    ensure_lora,
    ensure_model,
    model_folder,
    vllm_env,
    vllm_settings,
)
from toolkit.servers.embedded.tiny_lora import LORA_RANK
from toolkit.servers.managed import ManagedServer
from toolkit.servers.managed import has_live_member as _has_live_member
from toolkit.servers.request_log import LOG_REQUESTS_FLAG

__all__ = [  # the models' names and folders are models.py's, named here for the callers that launch them
    "DEMO_CONFIG",
    "EMBEDDING_MODEL_NAME",
    "LORA_NAME",
    "MODEL_DIR",
    "SERVED_MODEL_NAME",
    "VISION_MODEL_NAME",
    "VLLM_PYTHON",
    "EmbeddedServer",
    "ServerConfig",
    "ServerError",
    "_has_live_member",
    "embedded_launch",
    "embedded_spec",
    "ensure_lora",
    "ensure_model",
    "ephemeral_range",
    "free_port",
    "launched_embedded",
    "vllm_settings",
]

POOLING_FLAGS = ("--runner", "pooling", "--convert", "embed")
BLOCK_SIZE_TOKENS = 128  # vLLM's KV block size on CPU
LOGGED_PROMPT_CHARS = 32  # `log_requests`: each logged prompt and its token ids cut to this (--max-log-len)
# Tool calls and structured output on the random-weight model. A tool choice other than "none" needs a tool-call
# parser in vLLM 0.32, and the tiny tokenizer has none of the special tokens the llama or hermes parsers look for:
# the pythonic one needs none ("required" and a named tool are decoded against the tools' JSON schema whatever the
# parser). Compact JSON (no whitespace between tokens, xgrammar) lets the random model close its JSON within a few
# dozen tokens; with free whitespace it ran past 64 tokens and no reply kept to the format (measured 2026-12-04).
STRUCTURED_FLAGS = (
    "--tool-call-parser",
    "pythonic",
    "--enable-auto-tool-choice",
    "--structured-outputs-config",
    '{"backend": "xgrammar", "disable_any_whitespace": true}',
)


@dataclass(frozen=True)
class ServerConfig:
    """Launch settings of the embedded vLLM."""

    port: int | None = None
    max_model_len: int = 8192
    kv_blocks: int | None = None
    max_num_seqs: int | None = None
    stream_interval: int = 1
    kv_cache_gib: int = 1
    speculative_config: str | None = None  # JSON for --speculative-config, e.g. the ngram method (works on CPU)
    scheduling_policy: str = "fcfs"  # "priority": vLLM serves each request's `priority` field, lower first
    startup_timeout_s: float = 240.0
    log_path: Path | None = None
    model: str = SERVED_MODEL_NAME  # EMBEDDED_MODELS: tiny-llama generates, tiny-embedding embeds, tiny-vision sees
    lora: bool = False  # also serve the LoRA adapter LORA_NAME on the model
    log_requests: bool = False  # a log line per request received, naming its adapter (toolkit.servers.request_log)

    @property
    def embeds(self) -> bool:
        return self.model == EMBEDDING_MODEL_NAME

    def check(self) -> None:
        """Refuse settings vLLM would only reject after a slow start-up."""
        if self.max_model_len < 256:
            raise ParamsError(f"max_model_len: {self.max_model_len} is too small; allowed: >= 256")
        # vLLM keeps one block back (the null block), so one request of max_model_len needs one more.
        needed = -(-self.max_model_len // BLOCK_SIZE_TOKENS) + 1
        if self.kv_blocks is not None and self.kv_blocks < needed:
            raise ParamsError(
                f"kv_blocks: {self.kv_blocks} blocks of {BLOCK_SIZE_TOKENS} tokens cannot hold one request of "
                f"max_model_len {self.max_model_len}; allowed: >= {needed}"
            )
        if self.max_num_seqs is not None and self.max_num_seqs < 1:
            raise ParamsError(f"max_num_seqs: {self.max_num_seqs}; allowed: >= 1")
        if self.stream_interval < 1:
            raise ParamsError(f"stream_interval: {self.stream_interval}; allowed: >= 1")
        if self.model not in EMBEDDED_MODELS:
            raise ParamsError(f"model: {self.model!r}; allowed: {', '.join(EMBEDDED_MODELS)}")
        if self.scheduling_policy not in ("fcfs", "priority"):
            raise ParamsError(f"scheduling_policy: {self.scheduling_policy!r}; allowed: fcfs, priority")
        if self.embeds and (self.speculative_config or self.stream_interval != 1):
            raise ParamsError(f"model: {EMBEDDING_MODEL_NAME} generates nothing; it takes no speculative_config "
                              "or stream_interval")  # fmt: skip
        if self.lora and self.model != SERVED_MODEL_NAME:
            raise ParamsError(f"lora: {self.model} takes no LoRA adapter; allowed with {SERVED_MODEL_NAME}")


# `make demo` and a notebook's SERVER = "embedded": small enough that the matrix shows Requests queued and Over
# capacity (a KV cache of 64 blocks = 8,192 tokens, at most 2 sequences at once).
DEMO_CONFIG = ServerConfig(max_model_len=4096, kv_blocks=64, max_num_seqs=2)


EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")  # Linux: the ports bind(0) and connect() get
LOWEST_PORT = 10000  # below it, well-known and registered services
PORT_TRIES = 64


def ephemeral_range(path: Path = EPHEMERAL_RANGE) -> tuple[int, int] | None:
    """The kernel's range of ports for bind(0) and outgoing connections, or None where it cannot be read."""
    try:
        low, high = (int(field) for field in path.read_text().split())
    except (OSError, ValueError):
        return None
    return low, high


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A port free on 127.0.0.1 now, below the kernel's ephemeral range where there is room: a vLLM binds it only
    after its imports (8 s here, minutes beside a busy machine), and meanwhile any process asking for a port of the
    ephemeral range (a notebook kernel takes five, a fake server one) may be given the same one. It happened once in
    a `make test`: a session vLLM's port taken by another process before vLLM bound it. Else the kernel's choice."""
    known = ephemeral_range()
    if known is not None and known[0] - LOWEST_PORT >= PORT_TRIES:
        for _ in range(PORT_TRIES):
            port = random.randrange(LOWEST_PORT, known[0])
            if _bindable(port):
                return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch_command(config: ServerConfig, port: int, model_dir: Path, lora_dir: Path = LORA_DIR) -> list[str]:
    """The vLLM command line (the API key travels in the environment, never on the command line). The embedding
    model runs the pooling runner, without the flags that only generation has; `config.lora` adds the adapter in
    `lora_dir`."""
    cmd = [
        str(VLLM_PYTHON),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        config.model,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        str(config.max_model_len),
        "--dtype",
        "bfloat16",
        "--enforce-eager",
    ]
    if config.embeds:
        return [*cmd, *POOLING_FLAGS, *_sizes(config)]
    cmd += [
        "--enable-prefix-caching",
        "--enable-prompt-tokens-details",  # each reply's usage says how many prompt tokens the cache held
        "--enable-per-request-metrics",  # each stream's final chunk has the request's own timing (vLLM >= 0.32)
        *STRUCTURED_FLAGS,
        *_sizes(config),
    ]
    if config.lora:
        cmd += ["--enable-lora", "--lora-modules", f"{LORA_NAME}={lora_dir}", "--max-lora-rank", str(LORA_RANK)]
    if config.log_requests:  # the prompt and its tokens cut to LOGGED_PROMPT_CHARS: a line stays short
        cmd += [LOG_REQUESTS_FLAG, "--max-log-len", str(LOGGED_PROMPT_CHARS)]
    if config.stream_interval != 1:
        cmd += ["--stream-interval", str(config.stream_interval)]
    if config.scheduling_policy != "fcfs":
        cmd += ["--scheduling-policy", config.scheduling_policy]
    if config.speculative_config:
        # the final chunk's metrics also hold the request's acceptance histogram (vLLM refuses the flag without
        # speculation)
        cmd += ["--speculative-config", config.speculative_config, "--per-request-spec-decode-metrics", "summary"]
    return cmd


def _ensure_lora_if(config: ServerConfig) -> Path:
    """The adapter's folder, written first where the config serves it."""
    return ensure_lora() if config.lora else LORA_DIR


def _sizes(config: ServerConfig) -> list[str]:
    """The KV cache's blocks and the running sequences, where set."""
    sizes = [] if config.kv_blocks is None else ["--num-gpu-blocks-override", str(config.kv_blocks)]
    return sizes + ([] if config.max_num_seqs is None else ["--max-num-seqs", str(config.max_num_seqs)])


def embedded_spec(config: ServerConfig, port: int) -> ServerSpec:
    """The embedded vLLM as a params `server:` block, for runs that launch it (`toolkit demo`)."""
    config.check()
    return ServerSpec(
        command=launch_command(config, port, model_folder(config.model), _ensure_lora_if(config)),
        env=vllm_settings(config.kv_cache_gib),
        health_timeout_s=config.startup_timeout_s,
    )


def config_for(params: RunParams, config: ServerConfig = DEMO_CONFIG, images: int = 0) -> ServerConfig:
    """The embedded vLLM a run needs: `tiny-embedding` for an embeddings run (endpoint embeddings), `tiny-vision`
    for one whose requests carry `images` (the most one request carries; ParamsError past what it takes), else
    `config`."""
    if params.endpoint == "embeddings":
        return replace(config, model=EMBEDDING_MODEL_NAME)
    if images > VISION_MAX_IMAGES:
        raise ParamsError(f"rate_sweep.images: {images} a request; the embedded vision model ({VISION_MODEL_NAME}) "
                          f"takes {VISION_MAX_IMAGES}")  # fmt: skip
    return replace(config, model=VISION_MODEL_NAME) if images else config


def embedded_launch(
    params: RunParams, config: ServerConfig = DEMO_CONFIG, images: int = 0
) -> tuple[RunParams, ServerSpec]:
    """The embedded vLLM as a run's `server:` block on a free port (the embedding model for an embeddings run, the
    vision model for one whose requests carry `images`), and the params pointed at it."""
    port = free_port()
    spec = embedded_spec(config_for(params, config, images), port)
    return params.model_copy(update={"base_url": f"http://127.0.0.1:{port}"}), spec


@contextmanager
def launched_embedded(params: RunParams, results_dir: Path, config: ServerConfig = DEMO_CONFIG) -> Iterator[RunParams]:
    """The embedded vLLM launched for one run as a `server:` block would be (recorded in server.json, stopped on
    exit, error or interrupt); yields the params pointed at it."""
    from toolkit.servers.launch import (
        launched_server,  # launch imports environment and the engine probe: only when used
    )

    params, spec = embedded_launch(params, config)
    results_dir.mkdir(parents=True, exist_ok=True)
    with launched_server(spec, params, results_dir, api_key_from_env(params.api_key_env)):
        yield params


class EmbeddedServer:
    """Start the real vLLM on 127.0.0.1, wait for `/health`, stop it with all its engine processes.

    One instance of :class:`toolkit.servers.managed.ManagedServer`: this class only builds the command and environment.
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
        self.managed: ManagedServer | None = None
        self.command: list[str] = []

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        return None if self.managed is None else self.managed.process

    def start(self) -> EmbeddedServer:
        """Launch vLLM through ManagedServer: its own process group, inside the caller's session."""
        check_vllm_installed()
        model_dir = model_folder(self.config.model)
        self.command = launch_command(self.config, self.port, model_dir, _ensure_lora_if(self.config))
        env = vllm_env(self.config.kv_cache_gib)
        if self._api_key is not None:
            env["VLLM_API_KEY"] = self._api_key
        self.managed = ManagedServer(
            self.command,
            base_url=self.base_url,
            env=env,
            log_path=self.log_path,
            health_timeout_s=self.config.startup_timeout_s,
            name="vLLM",
        )
        self.managed.start()
        return self

    def log_tail(self, lines: int = 40) -> str:
        return "(no log)" if self.managed is None else self.managed.log_tail(lines)

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM the whole process group (API server and engine cores), SIGKILL what remains."""
        if self.managed is not None:
            self.managed.stop(timeout_s)

    def __enter__(self) -> EmbeddedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_forever(config: ServerConfig) -> int:
    """Foreground server for `python -m toolkit serve`: print the URL, stop cleanly on Ctrl-C, SIGTERM or SIGHUP."""
    server = EmbeddedServer(config)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
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
