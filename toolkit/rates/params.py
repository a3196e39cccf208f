"""Rate sweep parameters: validated once, one-line errors naming the parameter (as toolkit.params does)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AllowInfNan, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from toolkit.base.api_keys import DEFAULT_KEY_ENV
from toolkit.base.yaml_files import read_yaml_mapping
from toolkit.loadgen.arrivals import Arrival
from toolkit.method.goodput import ServiceLevel
from toolkit.params import (
    MAX_LABEL,
    MAX_SECONDS,
    ParamsError,
    RunParams,
    _one_line,
    parse_server_metrics,
)
from toolkit.rates.classes import TrafficClass, parse_classes
from toolkit.rates.model_mix import is_mix, parse_model_mix
from toolkit.rates.param_rules import check_combinations
from toolkit.rates.rate_values import MAX_TOKENS, Lengths, checked_lengths, parse_lengths, parse_rates, rate_text
from toolkit.rates.request_kinds import (
    ImageCount,
    ImageSize,
    RequestKinds,
    ResponseFormatSpec,
    ToolsFile,
    request_kinds,
)
from toolkit.rates.traces import MIN_TRACE_BLOCK_TOKENS, TraceWindow

__all__ = [
    "DEFAULT_DURATION_S",
    "FROM_THE_RUN",
    "MAX_TOKENS",
    "SWEEP_BLOCK",
    "Lengths",
    "RateParams",
    "load_rate_params",
    "make_rate_params",
    "parse_lengths",
    "parse_rates",
    "rate_text",
    "run_sweep_values",
]

DEFAULT_DURATION_S = 30.0
_MAX_BATCH_SIZE = 4096  # inputs in one embeddings request
SWEEP_BLOCK = "rate_sweep"  # a run params file's block: the sweep `toolkit run` measures after the matrix
# what a `rate_sweep:` block takes from its run
FROM_THE_RUN = ("base_url", "server_metrics", "model", "api_key_env")


class RateParams(BaseModel):
    """An open-loop rate sweep: where, what load, which requests, which service level, where the files go.

    The API key is not here (read from `api_key_env`). Exactly one of `duration_s` and `requests_per_step`
    bounds a step (default: 30 s); an `inf` rate (all at once) needs `requests_per_step`.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    base_url: str = "http://127.0.0.1:8000"
    server_metrics: list[str] | None = None  # the /metrics scraped and summed instead of base_url's (as RunParams)
    # one served name (None: the first served), or a mix NAME=W,NAME=W: each arrival picks its model by weight
    # (toolkit.rates.model_mix; each record's `model`, each step's `models` figures)
    model: str | None = Field(None, min_length=1, max_length=4096)
    api_key_env: str = DEFAULT_KEY_ENV
    # embeddings: non-streaming POSTs to /v1/embeddings of `batch_size` inputs each (toolkit.loadgen.embeddings)
    endpoint: Literal["chat", "completions", "embeddings"] = "chat"
    batch_size: int | None = Field(None, ge=1, le=_MAX_BATCH_SIZE)  # embeddings: inputs per request (default 1)
    rates: list[Annotated[float, AllowInfNan(True)]] = Field(
        default_factory=lambda: [1.0, 2.0, 4.0, 8.0]
    )  # inf: at once
    arrival: Arrival = "poisson"
    burstiness: float = Field(1.0, gt=0, le=1000)
    duration_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    requests_per_step: int | None = Field(None, ge=1, le=1_000_000)
    max_in_flight: int | None = Field(None, ge=1)
    # The drawn gaps scaled so each step's schedule holds the offered rate exactly (benchmarks/schedule_rescale.py:
    # near capacity its points spread less across seeds than a draw kept as it falls).
    rescale_schedule: bool = True
    steady_trim: float = Field(0.1, ge=0, lt=0.5)  # the first and last share of a step: warm-up, cool-down
    # latency percentiles each step reports, besides the median, p90 and p99 that every table shows
    percentiles: list[float] = Field(default_factory=lambda: [50.0, 90.0, 99.0], min_length=1, max_length=20)
    seed: int = 0
    input_tokens: int | Lengths = 128
    output_tokens: int | Lengths = 128
    # traffic classes (toolkit.rates.classes): each arrival of the mix picks one by weight; each its own shape,
    # service level and priority, judged on its own (a step's `classes` figures)
    classes: list[TrafficClass] | None = Field(None, min_length=1)
    # structured output (toolkit.loadgen.structured): "json_object" or "json_schema:FILE", carried by every request;
    # each reply's `schema_valid`, each step's `schema_valid_share`
    response_format: ResponseFormatSpec | None = None
    # tool calls (toolkit.loadgen.tools; chat only): a JSON file of OpenAI function tools every request carries, and
    # the tool_choice sent ("auto", "required", "none" or a function's name; default "required"); each reply's
    # `tool_called` and `tool_args_valid`, each step's `tool_called_share` and `tool_args_valid_share`
    tools: ToolsFile | None = None
    tool_choice: str | None = None
    # images (toolkit.loadgen.images; chat only): every request carries `images` synthetic PNGs of `image_size`
    # ("WxH", default 224x224), each from its own seed, beside its text; each record's `images`
    images: ImageCount = 0
    image_size: ImageSize | None = None
    dataset: str | None = None  # JSONL ("prompt" or "messages", optional "output_tokens") or ShareGPT JSON
    # the server's log, where it writes a line per request received (vLLM --enable-log-requests): each step counts
    # the requests it received by LoRA adapter (toolkit.servers.request_log; each step's `server_log_requests`)
    server_log: str | None = None
    replay: str | None = None  # another tool's result file: one step of its arrival times and lengths (rates.replay)
    # shared-prefix: each prompt starts with one of `prefixes` prefixes of `prefix_tokens` tokens (each step its own),
    # picked uniformly or by Zipf's law (the first the most), then a unique rest. conversation: each arrival is a
    # conversation of `turns` turns (input_tokens: each new message), each re-sending the history. None: cold prompts.
    workload: Literal["shared-prefix", "conversation"] | None = None
    prefixes: int | None = Field(None, ge=1, le=100_000)
    prefix_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    prefix_choice: Literal["uniform", "zipf"] | None = None
    turns: int | None = Field(None, ge=1, le=1000)
    think_time_s: float | None = Field(None, ge=0, le=MAX_SECONDS)  # after a reply, before the next turn
    think_time_dist: Literal["fixed", "exponential"] | None = None  # exponential: drawn per turn, mean think_time_s
    warmup_turns: int | None = Field(None, ge=0, le=1000)  # each conversation's first turns (default 1): not summed
    cold_control: bool = False  # after each conversation step, its prompts' lengths again, cold, at the same times
    # trace: a Mooncake JSONL or Azure CSV trace file replayed as one step (rates.traces): a window of it, faster
    trace: str | None = None
    trace_format: Literal["mooncake", "azure"] | None = None
    time_scale: float | None = Field(None, gt=0, le=1000)  # 2: twice as fast as the trace
    trace_start_s: float | None = Field(None, ge=0)
    trace_duration_s: float | None = Field(None, gt=0)
    # a hash_ids block's tokens (default 512); a block shorter than MIN_TRACE_BLOCK_TOKENS would be mostly its marker
    trace_block_tokens: int | None = Field(None, ge=MIN_TRACE_BLOCK_TOKENS, le=MAX_TOKENS)
    warmup_s: float = Field(0.0, ge=0, le=MAX_SECONDS)  # a step's first seconds: kept, left out of its summary
    cold_prompts: bool = True  # a unique prefix per request: nothing comes from the prefix cache
    drain: bool = True  # before each step, wait until the server runs and queues nothing
    drain_timeout_s: float = Field(120.0, gt=0, le=MAX_SECONDS)
    read_timeout_s: float = Field(300.0, gt=0, le=MAX_SECONDS)
    slo_ttft_ms: float | None = Field(None, gt=0)
    slo_tpot_ms: float | None = Field(None, gt=0)
    slo_e2e_ms: float | None = Field(None, gt=0)
    goodput_target: float = Field(0.99, gt=0, le=1)
    search: bool = False
    search_precision: float = Field(0.1, gt=0, le=1)
    search_max_probes: int = Field(8, ge=1, le=50)
    search_repeats: int = Field(2, ge=0, le=10)  # more steps at a rate the search left undecided, pooled
    ray_address: str | None = None  # send each step from `clients` processes on this Ray cluster
    clients: int = Field(1, ge=1, le=256)
    lag_flag_ms: float = Field(5.0, gt=0)  # a step whose scheduling lag p99 is above this is flagged
    results_dir: str | None = None  # the run folder (default: outputs/<run_label>/<UTC timestamp>/)
    run_label: str = Field("rates", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=MAX_LABEL)

    @property
    def generation_endpoint(self) -> Literal["chat", "completions"]:
        """The generating endpoint a chat or completions sweep sends to (an embeddings sweep builds no such request)."""
        if self.endpoint == "embeddings":
            raise ValueError("endpoint embeddings: not a generating endpoint")
        return self.endpoint

    @field_validator("rates", mode="before")
    @classmethod
    def _rates(cls, value: Any) -> list[float]:
        return parse_rates(value)

    @field_validator("model")
    @classmethod
    def _model(cls, value: str | None) -> str | None:
        if is_mix(value):
            assert value is not None
            parse_model_mix(value)
        return value

    def model_mix(self) -> dict[str, float] | None:
        """The mix's weights by served name; None for one model (a mix of one name is that model)."""
        if not is_mix(self.model):
            return None
        assert self.model is not None
        mix = parse_model_mix(self.model)
        return mix if len(mix) > 1 else None

    @property
    def served_model(self) -> str | None:
        """The one model the sweep is discovered with (its lengths checked against): the mix's first."""
        return next(iter(parse_model_mix(self.model))) if is_mix(self.model) and self.model else self.model

    @field_validator("percentiles", mode="before")
    @classmethod
    def _percentiles(cls, value: Any) -> list[float]:
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list | tuple):
            raise ValueError(f"{value!r} is not a list of percentiles; allowed: e.g. [50, 90, 99, 99.9]")
        found = []
        for item in items:
            try:
                q = float(item.strip() if isinstance(item, str) else item)
            except (TypeError, ValueError):
                q = math.nan
            if isinstance(item, bool) or not 0 < q < 100:
                raise ValueError(f"{item!r} is not a percentile; allowed: numbers between 0 and 100, e.g. 99.9")
            found.append(q)
        return sorted({50.0, 90.0, 99.0, *found})

    def kinds(self, cls: TrafficClass | None = None) -> RequestKinds:
        """The request kinds of every request (of class `cls`'s: the class's own where it gives one)."""
        return request_kinds(self, cls)

    def image_dimensions(self) -> tuple[int, int]:
        """The width and height of every image a request carries."""
        return self.kinds().image_dimensions()

    def most_images(self) -> int:
        """The most images one request carries (its class's where it has classes; 0: no request carries one)."""
        return max([self.kinds(cls).images for cls in self.classes or []] or [self.kinds().images])

    def request_tools(self) -> tuple[list[dict[str, Any]] | None, str | dict[str, Any] | None]:
        """The `tools` and `tool_choice` every request carries (None, None: no tools)."""
        return self.kinds().request_tools()

    def request_format(self) -> dict[str, Any] | None:
        """The `response_format` every request carries (None: none)."""
        return self.kinds().request_format()

    @field_validator("server_metrics", mode="before")
    @classmethod
    def _server_metrics(cls, value: Any) -> list[str] | None:
        return parse_server_metrics(value)

    @field_validator("input_tokens", "output_tokens", mode="before")
    @classmethod
    def _lengths(cls, value: Any) -> int | Lengths:
        return checked_lengths(value)

    @field_validator("base_url", "api_key_env")
    @classmethod
    def _as_run_params(cls, value: str, info: Any) -> str:
        """The same rules as the matrix's parameters (no user info in the URL, a variable name for the key)."""
        try:
            RunParams.model_validate({info.field_name: value})
        except ValidationError as exc:
            raise ValueError(_one_line(exc).split(": ", 1)[1]) from None
        return value.rstrip("/") if info.field_name == "base_url" else value

    @model_validator(mode="before")
    @classmethod
    def _default_duration(cls, values: Any) -> Any:
        if isinstance(values, dict) and values.get("duration_s") is None and values.get("requests_per_step") is None:
            return {**values, "duration_s": DEFAULT_DURATION_S}
        return values

    @model_validator(mode="after")
    def _consistent(self) -> RateParams:
        check_combinations(self)
        return self

    def inputs_per_request(self) -> int:
        """The inputs each embeddings request carries."""
        return self.batch_size or 1

    def trace_window(self) -> TraceWindow:
        """The part of the trace to replay, and how fast."""
        return TraceWindow(self.trace_start_s or 0.0, self.trace_duration_s, self.time_scale or 1.0)

    def conversation_warmup(self) -> int:
        """The first turns of each conversation left out of a step's summary."""
        return 1 if self.warmup_turns is None else self.warmup_turns

    def has_slo(self) -> bool:
        return any(v is not None for v in (self.slo_ttft_ms, self.slo_tpot_ms, self.slo_e2e_ms))

    def service_level(self) -> ServiceLevel:
        return ServiceLevel(self.slo_ttft_ms, self.slo_tpot_ms, self.slo_e2e_ms, self.goodput_target)

    def public(self) -> dict[str, Any]:
        """The parameters as written to sweep.json (no secret is a parameter; `inf` as the string "inf"; a class's
        request kinds only where it gives its own)."""
        data = self.model_dump(mode="python")
        data["rates"] = [rate_text(r) for r in self.rates]
        if self.classes is not None:
            data["classes"] = [c.public() for c in self.classes]
        return data


def make_rate_params(values: dict[str, Any], prefix: str = "") -> RateParams:
    """RateParams, or ParamsError with one line naming the parameter (after `prefix`, e.g. ``rate_sweep.``); the
    classes, a list or a YAML file's path, read first (`parse_classes`: a line naming the class and its field)."""
    if values.get("classes") is not None:
        values = {**values, "classes": parse_classes(values["classes"], f"{prefix}classes")}
    try:
        return RateParams(**values)
    except ValidationError as exc:
        err = exc.errors()[0]
        if not err["loc"]:  # a rule between fields: its message names them, the input is not echoed
            where = f"{prefix.rstrip('.')}: " if prefix else ""
            raise ParamsError(where + err["msg"].removeprefix("Value error, ")) from None
        raise ParamsError(_one_line(exc, RateParams, prefix)) from None


def run_sweep_values(run: Mapping[str, Any], block: Any) -> dict[str, Any]:
    """A run params file's `rate_sweep:` block as RateParams values: the server and the key's variable are the
    run's (its base_url, server_metrics, model, api_key_env; its endpoint and run_label unless the block names its
    own; its model unless the block gives a mix, `model: NAME=W,NAME=W`)."""
    if not isinstance(block, dict):
        raise ParamsError(f"{SWEEP_BLOCK}: must be a mapping of rate sweep parameters, e.g. rates: [1, 2, 4]")
    mixed = {"model"} if is_mix(block.get("model")) else set()  # the block's own model mix (NAME=W,NAME=W)
    if taken := sorted(set(block) & {*FROM_THE_RUN, "results_dir"} - mixed):
        raise ParamsError(f"{SWEEP_BLOCK}.{taken[0]}: set by the run, not the sweep; give it at the top of the file")
    inherited = {k: run[k] for k in (*FROM_THE_RUN, "endpoint", "run_label") if run.get(k) is not None}
    return {**inherited, **block}


def load_rate_params(path: str | Path, **overrides: Any) -> RateParams:
    """A YAML file of RateParams fields, or a run params file with a `rate_sweep:` block; non-None overrides win."""
    data = read_yaml_mapping(path, "params file", ParamsError)
    prefix = ""
    if SWEEP_BLOCK in data:
        data, prefix = run_sweep_values(data, data[SWEEP_BLOCK]), f"{SWEEP_BLOCK}."
    return make_rate_params({**data, **{k: v for k, v in overrides.items() if v is not None}}, prefix)
