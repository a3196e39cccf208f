"""Run parameters: validated once, with one-line errors that name the parameter and what is allowed."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from toolkit.base.api_keys import (
    DEFAULT_KEY_ENV,
    ENV_NAME,
    KEY_ENV_NAME,
    env_secret,
    looks_secret,
    redact,
    secret_assignment,
    secret_flag,
)
from toolkit.base.errors import ParamsError
from toolkit.base.yaml_files import allowed_names, read_yaml_mapping
from toolkit.loadgen.tools import tools_problem
from toolkit.method.contexts import parse_contexts
from toolkit.request_options import REQUEST_OPTIONS, MatrixRequestOptions

DEFAULT_CONCURRENCY = [1, 2, 4, 8, 16, 32, 64, 128]
MAX_LABEL = 150  # a run label or a batch variant's label is a folder name
MAX_SECONDS = 24 * 3600.0  # the longest duration or timeout a parameter may ask for
NUMBER_FIELDS = ("duration_s", "max_output", "max_model_len", "kv_budget_tokens", "readiness_timeout_s",
                 "read_timeout_s", "disturbed_retries", "gpu_count", "repeats", "control_window_s",
                 "cell_timeout_s", "batch_size")  # fmt: skip
MAX_BATCH_SIZE = 4096  # inputs in one embeddings request
# What an embeddings matrix cannot take (set, or true): it measures input lengths × simultaneous requests, nothing
# generated, no KV budget planned (max_output is left unused: the notebooks always pass it).
_NOT_FOR_EMBEDDINGS = ("prefill_only_contexts", "per_stream_prompts", "kv_budget_tokens", *REQUEST_OPTIONS)
# Fields whose input is never echoed in an error: it may hold a secret put in the wrong place.
_UNECHOED = {"api_key_env", "base_url", "server_metrics", "launch_command", "command", "env"}
_FLAG_HINTS = {
    "--api-key": "the server gets the key as VLLM_API_KEY from the variable named by api_key_env",
    "--hf-token": "the server inherits HF_TOKEN from the toolkit's environment",
}


SERVER_METRICS_EXAMPLE = "e.g. http://10.0.0.1:8000,http://10.0.0.2:8000 (each server's /metrics, or its full URL)"


def user_info_problem(url: str) -> str | None:
    """Why a server URL may not be used (None: it may): user info (user:password@) would put a secret in files."""
    if "@" in urlsplit(url).netloc:
        return ("holds user info (user:password@); allowed: http(s)://host[:port][/prefix], the key in the "
                "variable named by api_key_env")  # fmt: skip
    return None


def parse_server_metrics(value: Any) -> list[str] | None:
    """`server_metrics`: the `/metrics` URLs to scrape instead of base_url's (replicas behind a gateway), from a
    list or a comma-separated string. Each is a server's URL (`/metrics` appended) or its full `/metrics` URL;
    returned as full URLs, in the order given. ValueError (one line, no input echoed whole) when one is not an
    http(s) URL, holds user info, a query or a fragment, or is given twice; or when none is given."""
    if value is None:
        return None
    items = (value.split(",") if value.strip() else []) if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(x, str) for x in items):
        raise ValueError(f"is not a list of URLs; allowed: {SERVER_METRICS_EXAMPLE}")
    urls: list[str] = []
    for item in (x.strip() for x in items):
        shown = redact(repr(item[:80]))
        if not item.startswith(("http://", "https://")) or not urlsplit(item).hostname:
            raise ValueError(f"{shown} is not an http(s) URL; allowed: {SERVER_METRICS_EXAMPLE}")
        if problem := user_info_problem(item):  # not echoed: the password is in it
            raise ValueError(f"a URL {problem}")
        parts = urlsplit(item)
        if parts.query or parts.fragment or item.endswith(("?", "#")):
            raise ValueError(f"{shown} has a query or fragment; allowed: {SERVER_METRICS_EXAMPLE}")
        url = item.rstrip("/")
        url = url if url.endswith("/metrics") else f"{url}/metrics"
        if url in urls:
            raise ValueError(f"{redact(repr(url))} is given twice; allowed: each server's /metrics once")
        urls.append(url)
    if not urls:
        raise ValueError(f"is empty; allowed: {SERVER_METRICS_EXAMPLE}, or no server_metrics (base_url's /metrics)")
    return urls


class CapacityParams(BaseModel):
    """A params file's `capacity:` block: the traffic to plan for from the run's rate sweep
    (docs/method/capacity-plan.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    target_rps: float | None = Field(None, gt=0)  # requests per second, of the sweep's lengths
    target_multiple: float | None = Field(None, gt=0)  # or: this many times the highest rate the sweep measured
    price_per_gpu_hour: float | None = Field(None, ge=0)  # None: no cost figure
    gpus_per_server: int = Field(1, ge=1)
    headroom: float = Field(0.2, ge=0, lt=1)  # the share of each server's highest rate kept free

    @model_validator(mode="after")
    def _one_target(self) -> CapacityParams:
        if (self.target_rps is None) == (self.target_multiple is None):
            raise ValueError("give one of target_rps (req/s) and target_multiple (× the highest rate measured)")
        return self


class RunParams(MatrixRequestOptions):
    """Everything a matrix run needs; the API key is not here (read from `api_key_env`). What every decode request
    carries besides its prompt (response_format, tools, tool_choice) is its base's (toolkit.request_options)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    base_url: str = "http://127.0.0.1:8000"
    # The /metrics of the servers behind base_url (a gateway's replicas), scraped and summed instead of base_url's
    # (parse_server_metrics); None: base_url's own /metrics.
    server_metrics: list[str] | None = None
    model: str | None = None
    contexts: list[int] | None = None
    prefill_only_contexts: list[int] | None = None
    concurrency: list[int] = Field(default_factory=lambda: list(DEFAULT_CONCURRENCY))
    duration_s: float = Field(30.0, gt=0, le=MAX_SECONDS)
    max_output: int = Field(4096, gt=0)
    # embeddings: the matrix of an embedding model (input length × simultaneous requests, toolkit.matrix.embeddings)
    # instead of prefill and decode; `batch_size` inputs per request (None: 1)
    endpoint: Literal["chat", "completions", "embeddings"] = "chat"
    batch_size: int | None = Field(None, ge=1, le=MAX_BATCH_SIZE)
    run_label: str = Field("run", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=MAX_LABEL)
    api_key_env: str = DEFAULT_KEY_ENV
    max_model_len: int | None = Field(None, gt=0)
    kv_budget_tokens: int | None = Field(None, gt=0)
    per_stream_prompts: bool = False
    readiness_timeout_s: float = Field(120.0, gt=0, le=MAX_SECONDS)
    read_timeout_s: float = Field(300.0, gt=0, le=MAX_SECONDS)
    disturbed_retries: int = Field(2, ge=0, le=10)  # re-measure a decode window that a pause disturbed
    repeats: int = Field(1, ge=1, le=100)  # the whole matrix measured this many times, in rounds
    control_window_s: float = Field(5.0, ge=0, le=MAX_SECONDS)  # drift control cell's window; 0: no control
    # The longest one notebook cell of the run may take; None: from the plan (toolkit.jupyter.watchdog).
    cell_timeout_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    # An open-loop rate sweep measured after the matrix, into the same folder (RateParams fields, checked when
    # the run starts: toolkit.rates.params.run_sweep_values); None: none.
    rate_sweep: dict[str, Any] | None = None
    capacity: CapacityParams | None = None  # a capacity plan from the rate sweep, in the report
    # Descriptive fields of the report.
    title: str | None = None
    hardware_type: str | None = None
    gpu: str | None = None
    gpu_count: int | None = None
    vram: str | None = None
    os: str | None = None
    quantization: str | None = None
    backend: str | None = None
    build: str | None = None
    revision: str | None = None
    launch_command: str | None = None

    @field_validator("contexts", "prefill_only_contexts", mode="before")
    @classmethod
    def _contexts(cls, value: Any, info: Any) -> list[int] | None:
        if value is None:
            return None
        try:
            return parse_contexts(value, parameter=info.field_name)
        except ValueError as exc:
            raise ValueError(str(exc).removeprefix(f"{info.field_name}: ")) from None

    @field_validator("concurrency", mode="before")
    @classmethod
    def _concurrency(cls, value: Any) -> list[int]:
        items = value.split(",") if isinstance(value, str) else value
        whole = isinstance(items, list) and all(
            type(x) is int or (isinstance(x, str) and x.strip().isdigit()) for x in items
        )
        if not whole:
            raise ValueError(f"{value!r} is not a list of integers; allowed: e.g. [1, 2, 4]")
        levels = [int(x) for x in items]
        if not levels or any(n < 1 for n in levels):
            raise ValueError(f"{levels} has a level below 1; allowed: integers >= 1")
        return sorted(set(levels))

    @field_validator(*NUMBER_FIELDS, mode="before")
    @classmethod
    def _not_a_boolean(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("is true or false; allowed: a number")
        return value

    @field_validator("server_metrics", mode="before")
    @classmethod
    def _server_metrics(cls, value: Any) -> list[str] | None:
        return parse_server_metrics(value)

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str) -> str:
        if problem := user_info_problem(value):
            raise ValueError(problem)
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"{value!r} is not an http(s) URL; allowed: e.g. http://127.0.0.1:8000")
        return value.rstrip("/")

    @field_validator("api_key_env")
    @classmethod
    def _key_env(cls, value: str) -> str:
        if not KEY_ENV_NAME.fullmatch(value):
            raise ValueError(
                "is not an upper-case environment variable name; allowed: e.g. VLLM_API_KEY (the "
                "variable's name, never the key itself)"
            )
        return value

    @field_validator("launch_command")
    @classmethod
    def _launch_command(cls, value: str | None, info: Any) -> str | None:
        """Redacted as soon as it is read: the parameters travel (notebooks, Ray tasks) and are written."""
        key_env = info.data.get("api_key_env")
        return None if value is None else redact(value, env_secret(key_env) if key_env else None)

    @model_validator(mode="after")
    def _embeddings(self) -> RunParams:
        if self.endpoint != "embeddings":
            if self.batch_size is not None:
                raise ValueError("batch_size: applies to endpoint embeddings only")
            return self
        if given := [k for k in _NOT_FOR_EMBEDDINGS if getattr(self, k) not in (None, False)]:
            raise ValueError(f"{', '.join(given)}: not with endpoint embeddings (it measures input lengths × "
                             "simultaneous requests: contexts, concurrency, duration_s, batch_size)")  # fmt: skip
        return self

    @model_validator(mode="after")
    def _request_options(self) -> RunParams:
        """Tools on chat only, a tool_choice with tools naming one of them, not beside a response format (as a rate
        sweep's); after `_embeddings`, which refuses either with endpoint embeddings (so here, not in the base
        model, whose validators pydantic runs first)."""
        if problem := tools_problem(self.endpoint, self.tools, self.tool_choice, self.response_format):
            raise ValueError(problem)
        return self

    @property
    def generation_endpoint(self) -> Literal["chat", "completions"]:
        """The generating endpoint a prefill or decode cell sends to (an embeddings run builds no such request)."""
        if self.endpoint == "embeddings":
            raise ValueError("endpoint embeddings: not a generating endpoint")
        return self.endpoint

    def inputs_per_request(self) -> int:
        """The inputs each embeddings request carries."""
        return self.batch_size or 1

    def fingerprint(self) -> dict[str, Any]:
        """The parameters that decide what a finished measurement means (resume must match them); the request
        options only when given."""
        return self.given_request_options() | self.model_dump(
            include={
                "model",
                "contexts",
                "prefill_only_contexts",
                "concurrency",
                "duration_s",
                "max_output",
                "endpoint",
                "per_stream_prompts",
                "kv_budget_tokens",
                "batch_size",
            }
        )


class ServerSpec(BaseModel):
    """The optional `server:` block: a server the toolkit launches for the run, waits for, measures and stops.

    The API key is not here either: when `api_key_env` is set, the server gets it as VLLM_API_KEY.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    command: list[str]
    env: dict[str, str] = Field(default_factory=dict)  # extra variables that are not secrets
    health_timeout_s: float = Field(600.0, gt=0, le=MAX_SECONDS)
    log_file: str | None = None  # default: server.log in the results folder

    @field_validator("command", mode="before")
    @classmethod
    def _command(cls, value: Any) -> list[str]:
        if isinstance(value, str):
            try:
                parts = shlex.split(value)
            except ValueError as exc:  # the command is not shown: it may hold a secret
                raise ValueError(f"cannot be split like a shell command line: {exc}") from None
        elif isinstance(value, list) and all(isinstance(x, str | int | float) for x in value):
            parts = [str(x) for x in value]
        else:
            raise ValueError("is not a list of strings or a command line; allowed: e.g. vllm serve MODEL --port 8000")
        if not parts:
            raise ValueError("is empty; allowed: the server's command line, e.g. vllm serve MODEL --port 8000")
        if flag := next((f for p in parts if (f := secret_flag(p))), None):
            # The flag is not followed by a word: redaction would take that word for its value.
            raise ValueError(
                f"{flag}, however spelled (_ for -, a prefix, =VALUE), has no place here; {_FLAG_HINTS[flag]}"
            )
        if any(secret_assignment(p) for p in parts):
            raise ValueError(
                "a NAME=value word sets a key, token or password; allowed: variables that are not "
                "secrets (the API key comes from the variable named by api_key_env)"
            )
        return parts

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, value: Any) -> dict[str, str]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ValueError("is not a mapping of NAME: value")
        env: dict[str, str] = {}
        for name, item in value.items():
            if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not an environment variable name")
            if looks_secret(name):
                raise ValueError(
                    f"{name} looks like a key, token or password; allowed: variables that are not "
                    "secrets (the API key comes from the variable named by api_key_env)"
                )
            if item is None or isinstance(item, dict | list):
                raise ValueError(f"{name} has no plain value; allowed: a string or a number")
            env[name] = str(item).lower() if isinstance(item, bool) else str(item)
        return env


NESTED: dict[str, type[BaseModel]] = {"capacity": CapacityParams}  # RunParams' blocks with fields of their own


def _one_line(exc: ValidationError, model: type[BaseModel] = RunParams, prefix: str = "") -> str:
    err = exc.errors()[0]
    if not err["loc"] and err["type"] == "value_error":  # a check across fields: its message names them
        return prefix + err["msg"].removeprefix("Value error, ")
    where = prefix + (".".join(str(x) for x in err["loc"]) or "params")
    if err["type"] == "extra_forbidden":
        nested = NESTED.get(str(err["loc"][0])) if len(err["loc"]) > 1 else None  # a block's own fields
        return f"{where}: unknown parameter; {allowed_names(str(err['loc'][-1]), (nested or model).model_fields)}"
    if err["type"] == "missing":
        return f"{where}: required"
    msg = err["msg"].removeprefix("Value error, ")
    if _UNECHOED & set(map(str, err["loc"])) or "got" in msg:  # a misplaced secret stays unprinted
        return f"{where}: {msg}"
    return f"{where}: {msg} (got {redact(repr(err.get('input')))})"


def make_params(values: dict[str, Any]) -> RunParams:
    try:
        return RunParams(**values)
    except ValidationError as exc:
        raise ParamsError(_one_line(exc)) from None


def make_server_spec(values: Any) -> ServerSpec:
    if not isinstance(values, dict):
        raise ParamsError(f"server: must be a mapping; allowed keys: {', '.join(ServerSpec.model_fields)}")
    try:
        return ServerSpec(**values)
    except ValidationError as exc:
        raise ParamsError(_one_line(exc, ServerSpec, "server.")) from None


def load_run_file(path: str | Path, **overrides: Any) -> tuple[RunParams, ServerSpec | None]:
    """Read a YAML params file: its parameters (non-None overrides from the command line win) and server block."""
    data = read_yaml_mapping(path, "params file", ParamsError)
    server = data.pop("server", None)
    data.update({k: v for k, v in overrides.items() if v is not None})
    params = make_params(data)
    return params, None if server is None else make_server_spec(server)


def load_params(path: str | Path, **overrides: Any) -> RunParams:
    """Read a YAML params file; non-None overrides (from the command line) win. A server block is checked too."""
    return load_run_file(path, **overrides)[0]
