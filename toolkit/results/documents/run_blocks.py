"""run.json's blocks as typed models (toolkit.results.run_document): the fields their producers write are named, every
other key an older or newer file holds is kept and written back in the order read (`Block`).

`hardware`, `engine` and `run` are no blocks here: they are the report's display label -> text maps, free-form by
nature (`dict[str, str]` in RunDocument).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, JsonValue

from toolkit.method.drift import CONTROL_KEY
from toolkit.results.documents.base import Block, Number


class LaunchBlock(Block):
    """How the server came to be: toolkit.servers.launch.launch_info (from the run's server.json)."""

    launched_by_toolkit: bool = Field(default=False, description="Whether the toolkit launched the server.")
    command: str | None = Field(default=None, description="The command line as it ran, the key `<redacted>`.")
    log_file: str | None = Field(default=None, description="The server's log.")
    started_at: str | None = Field(default=None, description="When it started (ISO 8601, UTC).")
    startup_s: Number | None = Field(default=None, description="Seconds from launch to its first /health.")
    engine: dict[str, JsonValue] | None = Field(
        default=None, description="vLLM's version, commit and build in the server's environment (or its error)."
    )


class ServerBlock(Block):
    """The server found: toolkit.matrix.discovery.ServerInfo (an imported sweep's: its model only)."""

    base_url: str | None = Field(default=None, description="Where it answered.")
    model: str | None = Field(default=None, description="The served model.")
    max_model_len: int | None = Field(default=None, description="Its context length.")
    version: str | None = Field(default=None, description="vLLM's version as the server said it.")
    kv_budget_tokens: int | None = Field(default=None, description="Its KV cache in tokens; None: unknown.")
    kv_budget_source: str | None = Field(default=None, description="Where the KV budget was read.")
    block_size: int | None = Field(default=None, description="Its KV cache block size.")
    prefix_caching: bool | None = Field(default=None, description="Whether prefix caching is on.")
    metrics_available: bool | None = Field(default=None, description="Whether its /metrics answered.")
    metrics_problem: str | None = Field(default=None, description="Why server-side figures are unavailable.")
    cache_config_problem: str | None = Field(default=None, description="The cache sizes refused as unknown.")
    models: list[dict[str, JsonValue]] | None = Field(default=None, description="Its /v1/models entries.")
    cache_config: dict[str, str] | None = Field(default=None, description="Its cache_config metric's labels.")
    metrics_endpoints: list[str] | None = Field(default=None, description="`server_metrics`: the URLs scraped.")
    metrics_source: str | None = Field(default=None, description="The line saying so; None: base_url's.")


class MachineBlock(Block):
    """This machine: toolkit.servers.machine.machine_facts."""

    os: str | None = None
    kernel: str | None = None
    cpu_model: str | None = None
    cpu_cores: int | None = None
    cpu_physical_cores: int | None = None
    memory_bytes: int | None = None


class GpuDevice(Block):
    """One GPU: toolkit.servers.gpu.gpu_facts."""

    name: str | None = None
    memory_bytes: int | None = None


class GpusBlock(Block):
    """This machine's GPUs: toolkit.servers.gpu.installed_gpus."""

    devices: list[GpuDevice] | None = None
    driver: str | None = None
    cuda: str | None = Field(default=None, description="The driver's CUDA version (12.4).")
    error: str | None = Field(default=None, description="Why the details could not be read.")


class EnvironmentBlock(Block):
    """The client's software and machine: toolkit.matrix.environment.environment_info, and run_info's additions."""

    toolkit_version: str | None = None
    python: str | None = None
    platform: str | None = None
    git_revision: str | None = None
    machine: MachineBlock | None = None
    gpus: GpusBlock | None = None
    server_on_this_machine: bool | None = Field(default=None, description="Whether the server runs here.")
    speculative_config: dict[str, JsonValue] | str | None = Field(
        default=None, description="The launch command's speculative config (its text when not JSON)."
    )


class ParamsBlock(Block):
    """The run's parameters: toolkit.params.RunParams without launch_command; a rate sweep's run, the sweep's
    (toolkit.rates.params.RateParams.public). The fields run.json's readers use are named."""

    base_url: str | None = None
    model: str | None = None
    endpoint: str | None = None
    run_label: str | None = None
    api_key_env: str | None = None
    duration_s: Number | None = None
    max_output: int | None = None
    revision: str | None = None


class FingerprintBlock(Block):
    """The parameters a resumed run must match: toolkit.params.RunParams.fingerprint."""

    model: str | None = None
    contexts: list[int] | None = None
    prefill_only_contexts: list[int] | None = None
    concurrency: list[int] | None = None
    duration_s: Number | None = None
    max_output: int | None = None
    endpoint: str | None = None
    per_stream_prompts: bool | None = None
    kv_budget_tokens: int | None = None
    batch_size: int | None = None


class OverheadBlock(Block):
    """Measured against wall seconds: toolkit.method.overhead.matrix_overhead."""

    measured_s: Number | None = None
    wall_s: Number | None = None
    ratio: Number | None = None
    prefill_s: Number | None = None
    readiness_s: Number | None = None
    windows_s: Number | None = None
    retries_s: Number | None = None
    drain_s: Number | None = None
    other_s: Number | None = None


class ControlReading(Block):
    """One control measurement: toolkit.matrix.control.control_reading."""

    after_round: int | None = None
    started_at: str | None = None
    status: str | None = None
    total_tok_s: Number | None = None
    total_tok_s_ci: Number | None = None
    sub_windows: int | None = None
    window_dof: Number | None = None
    disturbed: str | None = None


class ControlBlock(Block):
    """The machine's change over the run: toolkit.matrix.control.control_block."""

    cell: str | None = None
    context_tokens: int | None = None
    window_s: Number | None = None
    measurements: list[ControlReading] | None = None
    change: Number | None = None
    change_low: Number | None = None
    change_high: Number | None = None
    drift: Number | None = None
    drift_basis: str | None = None

    @classmethod
    def of_run(cls, run_info: Mapping[str, Any] | None) -> ControlBlock:
        """A run's control block as its run.json (or the dict shown from it) holds it; empty without one."""
        return cls.model_validate((run_info or {}).get(CONTROL_KEY) or {})


class CapacityBlock(Block):
    """The traffic the report's capacity plan is for: toolkit.params.CapacityParams."""

    target_rps: Number | None = None
    target_multiple: Number | None = None
    price_per_gpu_hour: Number | None = None
    gpus_per_server: int | None = None
    headroom: Number | None = None
