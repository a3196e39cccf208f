"""The matrix runner: prefill first per context, then its cells by concurrency; append, resume, progress."""

from __future__ import annotations

import asyncio
import secrets as random_ids
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from tqdm import tqdm

from toolkit.base.api_keys import ApiKey, env_secret, redact
from toolkit.base.errors import CellFailure, RunRefused
from toolkit.base.folder_lock import hold
from toolkit.base.schema import Measurement
from toolkit.loadgen.client import StreamClient
from toolkit.loadgen.embeddings import EmbeddingClient
from toolkit.matrix.control import make_control
from toolkit.matrix.decode import CellSpec, drain, measure_decode_cell
from toolkit.matrix.discovery import ServerInfo, discover
from toolkit.matrix.embeddings import EmbeddingSpec, check_endpoint, input_text, measure_embeddings_cell
from toolkit.matrix.environment import run_info
from toolkit.matrix.failures import EXPECTED_FAILURES
from toolkit.matrix.heap import frozen_heap
from toolkit.matrix.plan import Phase, Plan, make_plan
from toolkit.matrix.prefill import measure_prefill
from toolkit.matrix.progress import progress_bar
from toolkit.matrix.prompts import build_prompt, marker
from toolkit.matrix.round_loop import measure_in_rounds
from toolkit.matrix.run_folder import launch_command, open_run
from toolkit.matrix.server_api import ServerAPI
from toolkit.matrix.traces import write_trace
from toolkit.method.capacity import is_over_capacity
from toolkit.method.contexts import format_context
from toolkit.method.disturbed import disturbed_count_text
from toolkit.method.overhead import matrix_overhead, overhead_line
from toolkit.params import ParamsError, RunParams
from toolkit.results.rounds import combine_rounds, latest_by_round, still_to_do
from toolkit.results.run_document import RunDocument
from toolkit.results.store import ResultStore, check_writable
from toolkit.servers.autogroups import protected_from_autogroups
from toolkit.servers.gpu import GpuSampler, energy_per_token, telemetry, window_telemetry
from toolkit.servers.launch import exit_note, launch_info

T = TypeVar("T")


async def run_matrix_async(
    params: RunParams,
    out_dir: str | Path,
    *,
    phases: Sequence[Phase] = ("prefill", "decode", "embeddings"),
    resume: bool = False,
    attach: bool = False,
    progress: bool = True,
    api_key: ApiKey | None = None,
) -> list[Measurement]:
    """Run (or continue) the matrix; every finished measurement is appended to results.jsonl at once.

    `api_key`: the key the caller read already; None: read here (a notebook's kernel, where the run enters).

    A notebook's kernel checks here again what it needs to run alone, as a notebook run by hand does: the key, the
    server's facts and the plan, the run in the folder (`toolkit run` checked them once in its own process)."""
    out = Path(out_dir)
    key = (api_key or ApiKey.from_env(params.api_key_env)).value
    with hold(out):  # under `toolkit run`, the lock its process holds
        return await _run_matrix(params, out, key, phases=phases, resume=resume, attach=attach, progress=progress)


async def _run_matrix(
    params: RunParams,
    out: Path,
    api_key: str | None,
    *,
    phases: Sequence[Phase],
    resume: bool,
    attach: bool,
    progress: bool,
) -> list[Measurement]:
    store = ResultStore(out)
    async with (
        ServerAPI(params.base_url, api_key=api_key, metrics_urls=params.server_metrics) as api,
        _embedder(params, api_key) as embedder,
    ):
        server = await discover_for(api, params)
        plan = make_plan(params, server.max_model_len)
        if still_to_do(plan.keys(phases), params.repeats, store.load()):  # before anything is written or sent
            await check_endpoint(api, params, server.model, api_key)
        launch = launch_info(out)
        existing = open_run(
            out, params, resume=resume, attach=attach, server=server, command=launch_command(params, launch, api_key)
        )
        check_writable(out)  # before any load: a folder we cannot write would lose every measurement
        both = "prefill" in phases and "decode" in phases
        info = existing or run_info(
            params, server, random_ids.token_hex(4), api_key, prefill_in_warmup=both, launch=launch
        )
        if existing is None:
            info.save(out)
        earlier = store.load()
        todo = still_to_do(plan.keys(phases), params.repeats, earlier)  # (cell, round), round after round
        decode_todo = any(k[0] == "decode" for k, _round in todo)
        control = make_control(out, plan.decode_contexts, params.duration_s, params.control_window_s)
        say = partial(tqdm.write, file=sys.stderr)
        if todo and server.metrics_problem:
            say(f"server-side statuses unavailable ({server.metrics_problem}): cells are judged client-side")
        elif todo and server.metrics_source:
            say(server.metrics_source)
        if todo and server.cache_config_problem:
            say(server.cache_config_problem)
        gpus = telemetry(say) if decode_todo else nullcontext()
        shielded = protected_from_autogroups(params.base_url, say) if todo else nullcontext()
        async with StreamClient(params.base_url, api_key=api_key, read_timeout_s=params.read_timeout_s) as client:
            with shielded, gpus as gpu_sampler, frozen_heap():  # no full GC pass stalls the loop while it measures
                runner = _Runner(params, server, info.run_id or "", api, client, store, earlier, gpu_sampler, embedder)
                total = len(plan.keys(phases)) * params.repeats
                bar = progress_bar(
                    total=total, initial=total - len(todo), desc=params.run_label, unit="cell", disable=not progress
                )
                await measure_in_rounds(runner, todo, store, bar, params.repeats, control if decode_todo else None)
                bar.close()
    records = list(latest_by_round(store.load()).values())
    latest = combine_rounds(records)  # one row per cell: the median of its rounds
    if (spent := matrix_overhead(m.to_dict() for m in records)) is not None:
        RunDocument.load(out).model_copy(update={"overhead": spent}).save(out)
        if progress:
            tqdm.write(f"overhead: {overhead_line(spent)}", file=sys.stderr)
    if disturbed := disturbed_count_text(m.disturbed for m in latest):  # said as each cell's warning is
        tqdm.write(
            f"{disturbed} after their retries: flagged in the reports, their numbers left out of service "
            "levels, best-of figures and comparisons",
            file=sys.stderr,
        )
    return latest


class _Runner:
    """Holds a run's prompts and warm state; measures one planned key at a time."""

    def __init__(
        self,
        params: RunParams,
        server: ServerInfo,
        run_id: str,
        api: ServerAPI,
        client: StreamClient,
        store: ResultStore,
        earlier: Sequence[Measurement],
        gpu: GpuSampler | None = None,
        embedder: EmbeddingClient | None = None,
    ) -> None:
        self.params, self.server, self.run_id, self.gpu = params, server, run_id, gpu
        self.embedder = embedder  # endpoint embeddings: what sends its cells' requests
        self.api, self.client, self.store = api, client, store
        self.prompts: dict[tuple[int, int | None], str] = {}
        # Prompts already sent for a context's prefill (a resumed run included): the next one must be new, so cold.
        self.prompt_versions: dict[tuple[int, int | None], int] = {}
        for m in earlier:
            if m.phase == "prefill":
                key = (m.context_tokens, None)
                self.prompt_versions[key] = self.prompt_versions.get(key, 0) + (m.attempts or 1)
        self.warm: set[int] = set()
        self.chat = params.endpoint == "chat"
        self.inputs: dict[int, str] = {}  # an embeddings run's input text per length (its placeholder unfilled)
        tools, choice = params.request_tools()  # what every decode request carries besides its prompt
        self.request_options: dict[str, Any] = {"response_format": params.request_format(), "tools": tools,
                                                "tool_choice": choice}  # fmt: skip

    async def prompt(self, ctx: int, stream: int | None = None, *, fresh: bool = False) -> str:
        """The run's prompt of this context (and stream); `fresh`: a new one, cold in the server's cache."""
        if (ctx, stream) not in self.prompts or fresh:
            self.prompt_versions[(ctx, stream)] = version = self.prompt_versions.get((ctx, stream), 0) + 1
            prefix = marker(self.run_id, format_context(ctx), stream, version)
            built = await build_prompt(self.api, self.server.model, ctx, prefix, chat=self.chat)
            self.prompts[(ctx, stream)] = built.text
        return self.prompts[(ctx, stream)]

    async def measure(self, key: tuple[str, int, int]) -> Measurement:
        """One planned measurement; an Error says how a server the toolkit launched ended, if it did."""
        m = await self._measure(key)
        if m.status == "Error" and (note := await asyncio.to_thread(exit_note, self.store.directory)):
            m = replace(m, error=redact(f"{m.error}; {note}", env_secret(self.params.api_key_env)))
        return m

    async def _measure(self, key: tuple[str, int, int]) -> Measurement:
        phase, ctx, n = key
        label = format_context(ctx)
        started = time.perf_counter()
        try:
            if phase == "embeddings":
                return self.stamp(await self.embeddings_cell(ctx, n), cell_wall_s=time.perf_counter() - started)
            if phase == "prefill":

                async def prefill_once(attempt: int) -> Measurement:
                    # A retry, or another round after a warm one, must be cold again: a new prompt.
                    prompt = await self.prompt(ctx, fresh=attempt > 1 or ctx in self.warm)
                    return await measure_prefill(self.client, self.api, model=self.server.model,
                                                 endpoint=self.params.generation_endpoint, prompt=prompt,
                                                 context_tokens=ctx, context=label)  # fmt: skip

                m, attempts, retries_s = await self._until_undisturbed(f"prefill {label}", prefill_once)
                if m.status == "Valid":
                    self.warm.add(ctx)
                return self.stamp(m, attempts=attempts, retries_s=retries_s,
                                  cell_wall_s=time.perf_counter() - started)  # fmt: skip
            budget = self.server.kv_budget_tokens
            if budget is not None and is_over_capacity(n, ctx, self.params.max_output, budget):
                return self.stamp(Measurement(phase="decode", context_tokens=ctx, context=label, concurrency=n,
                                              status="Over capacity", kv_budget_tokens=budget))  # fmt: skip
            prompts = await self.cell_prompts(ctx, n)
            spec = self.cell_spec(prompts, self.params.duration_s)
            what = f"decode {label} ×{n}"

            def measuring_again(reason: str, attempt: int) -> None:
                tqdm.write(f"{what}: window disturbed ({reason}); measuring it again", file=sys.stderr)

            m, trace = await measure_decode_cell(
                self.client, self.api, spec, context_tokens=ctx, context=label,
                use_metrics=self.server.metrics_available, retries=self.params.disturbed_retries,
                on_disturbed=measuring_again,
            )  # fmt: skip
            write_trace(self.store.directory, ctx, n, trace)  # before the record: whole or absent
            if self.gpu is not None and trace.windows:
                start, end = trace.windows[-1]
                m = replace(m, **window_telemetry(self.gpu.samples(start, end), start, end))
                m = replace(m, **energy_per_token(m.gpu_energy_w, m.total_tok_s))
                self.gpu.discard_before(end)
            if m.metrics_problem:
                tqdm.write(f"{what}: {m.metrics_problem}: judged client-side", file=sys.stderr)
            if m.disturbed:
                tqdm.write(f"{what}: window disturbed ({m.disturbed}); kept and flagged", file=sys.stderr)
            return self.stamp(m, kv_budget_tokens=budget, cell_wall_s=time.perf_counter() - started)
        except EXPECTED_FAILURES as exc:  # recorded as an Error cell, and the run goes on; a bug surfaces
            await drain(self.api, 30.0, self.server.metrics_available)
            msg = redact(f"{type(exc).__name__}: {exc}", env_secret(self.params.api_key_env))
            return self.stamp(Measurement(phase=phase, context_tokens=ctx, context=label, concurrency=n,  # type: ignore[arg-type]
                                          status="Error", error=msg))  # fmt: skip

    async def _until_undisturbed(
        self, what: str, measure_once: Callable[[int], Awaitable[Measurement]]
    ) -> tuple[Measurement, int, float]:
        """Measure again while a pause of the machine disturbed it, up to `disturbed_retries` more times.

        Returns the last measurement, the attempts, and the seconds spent on the disturbed ones.
        """
        retries_s = 0.0
        for attempt in range(1, self.params.disturbed_retries + 2):
            started = time.perf_counter()
            m = await measure_once(attempt)
            if not m.disturbed:
                break
            action = "kept and flagged" if attempt > self.params.disturbed_retries else "measuring it again"
            tqdm.write(f"{what}: request disturbed ({m.disturbed}); {action}", file=sys.stderr)
            if attempt <= self.params.disturbed_retries:
                retries_s += time.perf_counter() - started
        return m, attempt, retries_s

    async def cell_prompts(self, ctx: int, n: int) -> tuple[str, ...]:
        """The prompts of a decode cell's `n` streams at context `ctx`; a shared prompt's prefix cache warmed once."""
        if self.params.per_stream_prompts:
            return tuple([await self.prompt(ctx, i) for i in range(n)])
        text = await self.prompt(ctx)
        if ctx not in self.warm:  # warm the prefix cache once per context (prefill measured elsewhere)
            path, body = self.cell_spec((text,), 1.0).request(text, 1)  # carrying what the cells' requests carry
            warm_up = await self.client.stream(path, body)
            if warm_up.error:  # a failed stream makes the cell an Error (docs/method/cells.md), the warm-up's too
                raise CellFailure(f"warm-up request failed: {warm_up.error}")
            self.warm.add(ctx)
        return (text,) * n

    def cell_spec(self, prompts: tuple[str, ...], duration_s: float) -> CellSpec:
        """A decode cell of these prompts and window: the run's model, endpoint, output and request options."""
        return CellSpec(self.server.model, self.params.generation_endpoint, prompts, self.params.max_output,
                        duration_s, self.params.readiness_timeout_s, **self.request_options)  # fmt: skip

    async def embeddings_cell(self, ctx: int, n: int) -> Measurement:
        """One embeddings cell: `n` loops of requests of `batch_size` inputs of `ctx` tokens, each input new."""
        assert self.embedder is not None
        if ctx not in self.inputs:
            prefix = marker(self.run_id, format_context(ctx))
            self.inputs[ctx] = await input_text(self.api, self.server.model, ctx, prefix)
        spec = EmbeddingSpec(self.server.model, self.inputs[ctx], self.params.inputs_per_request(), n,
                             self.params.duration_s, self.params.readiness_timeout_s)  # fmt: skip
        label, metrics = format_context(ctx), self.server.metrics_available
        m = await measure_embeddings_cell(self.embedder, self.api, spec, context_tokens=ctx, context=label,
                                          use_metrics=metrics)  # fmt: skip
        if m.metrics_problem:
            tqdm.write(f"embeddings {m.context} ×{n}: {m.metrics_problem}", file=sys.stderr)
        return m

    def stamp(self, m: Measurement, **extra: Any) -> Measurement:
        """The run's id and the time on a measurement; its error redacted, whatever produced it."""
        error = m.error and redact(m.error, env_secret(self.params.api_key_env))
        return replace(
            m, run_id=self.run_id, started_at=datetime.now(UTC).isoformat(timespec="seconds"), error=error, **extra
        )


def run_sync(factory: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine on a fresh (uv)loop; in a thread when a loop already runs here (Jupyter)."""

    def new_loop() -> asyncio.AbstractEventLoop:
        try:
            import uvloop

            return uvloop.new_event_loop()
        except ImportError:
            return asyncio.new_event_loop()

    def run() -> T:
        with asyncio.Runner(loop_factory=new_loop) as runner:
            try:
                return runner.run(factory())  # type: ignore[arg-type]
            finally:
                runner.run(asyncio.sleep(0.05))  # let closing transports finish before the loop closes

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return run()
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = run()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, name="toolkit-run")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


async def discover_for(api: ServerAPI, params: RunParams) -> ServerInfo:
    """The server's facts, with the parameters that override them."""
    return await discover(
        api,
        model=params.model,
        max_model_len=params.max_model_len,
        kv_budget_tokens=params.kv_budget_tokens,
        api_key_env=params.api_key_env,
    )


async def preflight_async(params: RunParams, api_key: str | None) -> tuple[ServerInfo, Plan]:
    """Check parameters against the server before any load: reachability, model, key, contexts; the server's
    facts and the plan made from them."""
    async with ServerAPI(params.base_url, api_key=api_key, metrics_urls=params.server_metrics) as api:
        server = await discover_for(api, params)
        plan = make_plan(params, server.max_model_len)
        await check_endpoint(api, params, server.model, api_key)
    return server, plan


def _embedder(params: RunParams, api_key: str | None) -> AbstractAsyncContextManager[EmbeddingClient | None]:
    """An embeddings run's client (None: a generating run's, which has none)."""
    if params.endpoint != "embeddings":
        return nullcontext()
    return EmbeddingClient(params.base_url, api_key=api_key, read_timeout_s=params.read_timeout_s)


def preflight(params: RunParams, api_key: str | None) -> tuple[ServerInfo, Plan]:
    """`preflight_async`, with the key the run read (toolkit.jupyter.pipeline.prepare_run)."""
    return run_sync(lambda: preflight_async(params, api_key))


def run_matrix(params: RunParams, out_dir: str | Path, **kwargs: Any) -> list[Measurement]:
    """Synchronous entry point for notebooks and the command line."""
    return run_sync(lambda: run_matrix_async(params, out_dir, **kwargs))


__all__ = ["ParamsError", "Plan", "RunRefused", "make_plan", "run_info", "run_matrix", "run_sync"]
