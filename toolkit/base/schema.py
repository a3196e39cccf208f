"""The one result schema: a versioned record per measurement, shared by runner, importer and reports."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

from toolkit.base.errors import ResultsError

SCHEMA_VERSION = 1

Phase = Literal["prefill", "decode", "embeddings"]
Status = Literal["Valid", "Requests queued", "Over capacity", "Error"]

PHASES: tuple[Phase, ...] = ("prefill", "decode", "embeddings")  # the order a run measures them and reports show them
PHASE_TITLES: dict[str, str] = dict(zip(PHASES, ("Prefill", "Sustained decode", "Embeddings"), strict=True))
STATUSES: tuple[str, ...] = ("Valid", "Requests queued", "Over capacity", "Error")
RAN_STATUSES: tuple[Status, ...] = ("Valid", "Requests queued")  # the cell ran: its numbers exist


@dataclass(frozen=True)
class Measurement:
    """One prefill measurement, one sustained-decode cell or one embeddings cell, as docs/method/ defines them.

    Throughput fields are None when the cell was not run (Over capacity) or failed (Error).
    For prefill, ``total_tok_s`` is prompt tokens per second of the cold request.
    """

    phase: Phase
    context_tokens: int
    context: str
    concurrency: int
    status: Status
    total_tok_s: float | None = None
    per_request_tok_s: float | None = None
    ttft_ms: float | None = None
    tbt_ms: float | None = None
    avg_active: float | None = None
    completed: int | None = None
    output_tokens: int | None = None
    measured_s: float | None = None
    prompt_tokens: int | None = None
    # Extras beyond the published reports.
    ttft_p90_ms: float | None = None
    ttft_p99_ms: float | None = None
    tbt_p90_ms: float | None = None  # over the window's gaps between tokens; TTFT's p90 and p99 need 10 and 100 values
    tbt_p99_ms: float | None = None
    tbt_p90_low_ms: float | None = None  # their 95 % distribution-free bounds (None: no bound at that end)
    tbt_p90_high_ms: float | None = None
    tbt_p99_low_ms: float | None = None
    tbt_p99_high_ms: float | None = None
    ttft_p90_low_ms: float | None = None  # TTFT's, by the same rule
    ttft_p90_high_ms: float | None = None
    ttft_p99_low_ms: float | None = None
    ttft_p99_high_ms: float | None = None
    per_request_tok_s_p10: float | None = None
    # 95 % half-widths from the kept window's `sub_windows` equal parts (batch means, toolkit.method.spread) and,
    # for the median TTFT, from order statistics (at least 6 requests); None: no spread (imported, prefill, a
    # window too short for an honest interval).
    total_tok_s_ci: float | None = None
    per_request_tok_s_ci: float | None = None
    tbt_ms_ci: float | None = None
    sub_windows: int | None = None
    window_dof: float | None = None  # the t dof those half-widths were read at (None: before it was recorded)
    ttft_ms_ci: float | None = None
    ttft_ms_low: float | None = None  # the median TTFT's interval's own ends (order statistics, not symmetric)
    ttft_ms_high: float | None = None
    # Repeats (docs/method/spread.md, Repeats): the record's round of the matrix (1-based; None: one round). A cell's
    # combined row (toolkit.results.rounds) holds the median of its usable rounds, how many, and their spread.
    round: int | None = None
    repeats: int | None = None
    total_tok_s_repeat_min: float | None = None
    total_tok_s_repeat_max: float | None = None
    total_tok_s_repeat_ci: float | None = None  # 95 % Student's t half-width of the mean across rounds
    per_request_tok_s_repeat_ci: float | None = None
    ttft_ms_repeat_ci: float | None = None
    client_avg_active: float | None = None
    concurrency_held: float | None = None  # average running (client side: decoding) / N; below 0.9 is flagged
    readiness_queued: bool | None = None  # the readiness gate ended on waiting requests (plateau or timeout)
    tokens_per_chunk: float | None = None  # > 1 with --stream-interval or speculative decoding
    requests_started: int | None = None
    server_output_tokens: int | None = None  # vllm:generation_tokens_total delta between the edge scrapes
    client_tokens_server_interval: int | None = None  # client's tokens between the same scrapes
    client_tokens_min: int | None = None  # the server read its counters somewhere inside each scrape: the client's
    client_tokens_max: int | None = None  # tokens between the scrapes' inner and outer edges bracket its count
    server_tbt_ms: float | None = None  # mean inter-token latency on the engine's clock between the same scrapes
    # Speculative decoding between the same scrapes; None when the server exports no such counters.
    spec_drafts: int | None = None
    spec_draft_tokens: int | None = None
    spec_accepted_tokens: int | None = None
    spec_acceptance_rate: float | None = None  # accepted / drafted tokens
    spec_mean_accepted_len: float | None = None  # tokens per draft step: 1 + accepted / drafts
    # From the acceptance histograms of the requests that ended in the window (vLLM's per-request metrics,
    # toolkit.method.speculation): the acceptance rate of draft positions 1, 2, … as comma-separated fractions 0–1
    # ("0.620,0.310": 62 % of the verify steps accepted the first draft token, 31 % the second), and the verify
    # steps counted. None when no request said.
    spec_acceptance_by_position: str | None = None
    spec_request_steps: int | None = None
    server_prompt_tokens: int | None = None  # prompt tokens the server counted during the cell
    cached_tokens: int | None = None  # prefix-cache hit tokens (server counter delta)
    max_waiting: int | None = None
    waiting_fraction: float | None = None
    preemptions: int | None = None
    kv_usage_peak: float | None = None
    kv_budget_tokens: int | None = None
    status_basis: str | None = None  # "server" or "client" (/metrics unreachable or not vLLM's)
    # why the server's figures of a decode window were refused (its generation counter went back or grew past what
    # the streams can decode): the cell was judged client-side, its server-side counts left empty
    metrics_problem: str | None = None
    client_saturated: bool | None = None
    loop_lag_p99_ms: float | None = None
    loop_lag_max_ms: float | None = None
    max_sample_gap_s: float | None = None  # longest window stretch without a server sample
    longest_silence_s: float | None = None  # longest window stretch in which no stream received a token
    disturbed: str | None = None  # why the window cannot be trusted (a pause), after the runner's retries
    attempts: int | None = None  # windows measured for this cell (> 1: earlier ones were disturbed)
    client_cpu_pct: float | None = None
    # GPUs inside the window (NVML, toolkit.servers.gpu); None without GPU telemetry.
    gpu_power_w: float | None = None  # mean draw of all GPUs together
    gpu_temp_peak_c: float | None = None  # hottest reading of any GPU
    gpu_sm_clock_mhz: float | None = None  # mean SM clock over GPUs and readings
    gpu_throttled: bool | None = None  # a GPU held its clocks down for power or heat
    gpu_energy_w: float | None = None  # mean draw of all GPUs from their energy counters (not power samples)
    joules_per_token: float | None = None  # gpu_energy_w / total_tok_s
    tokens_per_joule: float | None = None
    # Where the cell's wall time went (seconds): readiness ramp, every window, disturbed windows redone, drain.
    cell_wall_s: float | None = None
    readiness_s: float | None = None
    windows_s: float | None = None
    retries_s: float | None = None
    drain_s: float | None = None
    # Where a decode cell's time went (toolkit.method.breakdown): medians over its requests that ended in the window
    # on the server's clock (basis "per-request"), else means of the server's histograms ("histograms"), else "".
    breakdown_basis: Literal["per-request", "histograms", ""] | None = None
    queue_p50_ms: float | None = None
    server_ttft_p50_ms: float | None = None
    wire_ttft_p50_ms: float | None = None  # the client's TTFT less the server's queue and TTFT: outside the engine
    decode_p50_ms: float | None = None
    server_itl_p50_ms: float | None = None
    client_itl_p50_ms: float | None = None  # the same requests' mean time between tokens on the client's clock
    timed_requests: int | None = None
    timing_mismatches: int | None = None  # requests whose server timing exceeds the client's clock
    queue_mean_ms: float | None = None
    server_ttft_mean_ms: float | None = None
    wire_ttft_mean_ms: float | None = None
    decode_mean_ms: float | None = None
    api_ttft_mean_ms: float | None = None  # the API process's own TTFT (vllm:time_to_first_token_seconds), mean
    # An embeddings cell (phase "embeddings", toolkit.matrix.embeddings): `concurrency` loops, each sending a request
    # of `batch_size` inputs of `context_tokens` tokens as soon as its last reply came. Over the window, from the
    # requests whose reply ended in it: inputs and their prompt tokens per second, each with its 95 % half-width
    # (batch means, toolkit.method.spread), and the end-to-end latency's percentiles with their 95 %
    # distribution-free bounds (toolkit.method.quantile_bounds). `client_prompt_tokens`: the prompt tokens the
    # replies of the whole cell counted, beside the server's counter over the same cell (`server_prompt_tokens`).
    batch_size: int | None = None
    items_s: float | None = None
    items_s_ci: float | None = None
    input_tok_s: float | None = None
    input_tok_s_ci: float | None = None
    e2e_p50_ms: float | None = None
    e2e_p50_low_ms: float | None = None
    e2e_p50_high_ms: float | None = None
    e2e_p90_ms: float | None = None
    e2e_p90_low_ms: float | None = None
    e2e_p90_high_ms: float | None = None
    e2e_p99_ms: float | None = None
    e2e_p99_low_ms: float | None = None
    e2e_p99_high_ms: float | None = None
    client_prompt_tokens: int | None = None
    # A decode cell whose requests carried a response format or tools (RunParams.response_format, .tools): of the
    # cell's completed requests, the share whose reply kept to the format (parsed as JSON, matched the schema), that
    # called a tool, and that called it with arguments valid under its parameters (toolkit.loadgen.reply_checks).
    # None: the requests carried no such thing.
    schema_valid_share: float | None = None
    tool_called_share: float | None = None
    tool_args_valid_share: float | None = None
    error: str | None = None
    run_id: str | None = None
    started_at: str | None = None
    schema_version: int = SCHEMA_VERSION

    @property
    def key(self) -> tuple[str, int, int]:
        """Identity of the measurement inside a run (used for resume)."""
        return (self.phase, self.context_tokens, self.concurrency)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measurement:
        """Build from a stored dict; unknown keys from newer schemas are ignored."""
        version = data.get("schema_version", SCHEMA_VERSION)
        if version > SCHEMA_VERSION:
            raise ResultsError(f"schema_version {version} is newer than this toolkit's {SCHEMA_VERSION}")
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(Measurement))
