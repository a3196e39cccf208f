"""The rate sweep runner: discover the server, run every listed step, then the search; write as each step ends.

`run_rates(params)` is what a notebook calls (synchronous; in a thread of its own under Jupyter's running loop)
and what `python -m toolkit rates` runs. The folder's lock is held throughout; a stop (Ctrl-C) loses only the
step in progress, and `resume=True` measures what is missing: the same parameters continue the same sweep.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import secrets as random_ids
import threading
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.base.api_keys import api_key_from_env
from toolkit.base.errors import ParamsError, RunRefused
from toolkit.base.folder_lock import hold
from toolkit.base.text import printable
from toolkit.loadgen.arrivals import schedule
from toolkit.loadgen.client import StreamClient
from toolkit.loadgen.embeddings import EmbeddingClient, probe_embeddings
from toolkit.matrix.discovery import ServerInfo, discover
from toolkit.matrix.environment import run_info
from toolkit.matrix.heap import frozen_heap
from toolkit.matrix.runner import run_sync
from toolkit.matrix.server_api import ServerAPI
from toolkit.params import RunParams
from toolkit.rates.classes import TrafficClass, check_class_models
from toolkit.rates.files import (
    STEPS_FILE,
    as_written,
    rates_dir,
    read_step_records,
    read_steps,
    read_sweep,
    update_sweep,
    write_step,
    write_sweep,
)
from toolkit.rates.inputs import load_inputs
from toolkit.rates.lengths import check_lengths
from toolkit.rates.model_mix import check_mix_models
from toolkit.rates.params import Lengths, RateParams, rate_text
from toolkit.rates.prompt_sources import prompt_source
from toolkit.rates.ray_clients import ray_senders
from toolkit.rates.replay import Replay
from toolkit.rates.search import next_probe, search_result
from toolkit.rates.step import StepPlan, StepTools, run_step
from toolkit.rates.step_lines import step_lines
from toolkit.rates.workload import Workload
from toolkit.reports.rate_tables import binding_text, too_few_text
from toolkit.results.rate_runs import has_rates
from toolkit.results.run_document import RunDocument
from toolkit.results.step_row import SweepStep
from toolkit.results.store import RUN_FILE, check_writable, nothing_to_resume
from toolkit.servers.autogroups import protected_from_autogroups
from toolkit.servers.launch import launch_info

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Say", "default_out", "rates_run_info", "run_rates"]

Say = Callable[[str], None]


def default_out(params: RateParams, outputs: str | Path = "outputs") -> Path:
    """The run folder: `results_dir`, or outputs/<run_label>/<UTC timestamp>/."""
    if params.results_dir:
        return Path(params.results_dir)
    return Path(outputs) / params.run_label / datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


def run_rates(params: RateParams, *, say: Say = print, resume: bool = False) -> Path:
    """Run the sweep into its run folder (returned); every finished step is on disk when this returns or stops.

    `resume`: continue the sweep the folder holds (its finished steps kept, the rest measured); RunRefused naming
    what differs when it was run with other parameters. Without a sweep there, a new one.
    """
    out = default_out(params)
    stop = _Stoppable()
    with hold(out):
        if resume and not has_rates(out):
            say(nothing_to_resume(out, "rate sweep", "sweep"))
        try:
            run_sync(lambda: stop.run(_sweep(params, out, say, resume)))
        except KeyboardInterrupt:  # under Jupyter the sweep runs in a thread: stop it before the lock is let go
            stop.cancel()
            raise
    return out


class _Stoppable:
    """The sweep's task, so that an interrupt that reaches only the waiting thread can cancel it."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.task: asyncio.Task[Any] | None = None
        self.done = threading.Event()

    async def run(self, work: Coroutine[Any, Any, None]) -> None:
        self.loop, self.task = asyncio.get_running_loop(), asyncio.current_task()
        try:
            await work
        finally:
            self.done.set()

    def cancel(self, timeout_s: float = 30.0) -> None:
        if self.loop is not None and self.task is not None and not self.done.is_set():
            self.loop.call_soon_threadsafe(self.task.cancel)
            self.done.wait(timeout_s)


def _lengths_text(spec: int | Lengths) -> str:
    if isinstance(spec, int):
        return f"{spec:,}"
    spread = ""
    if spec.dist == "normal":
        spread = f" mean {spec.mean:g} std {spec.std:g}"
    elif spec.dist == "lognormal":
        spread = f" mean {spec.mean:g} sigma {spec.sigma:g}"
    return f"{spec.dist}{spread} in [{spec.min:,}, {spec.max:,}]"


def _requests_text(params: RateParams) -> str:
    if params.classes is not None:
        return "classes: " + ", ".join(f"{c.name} (weight {c.weight:g}, {_class_prompts(params, c)})"
                                       for c in params.classes)  # fmt: skip
    if params.endpoint == "embeddings":
        return (f"embeddings: {params.inputs_per_request()} input(s) of {_lengths_text(params.input_tokens)} tokens "
                "per request")  # fmt: skip
    if params.dataset:
        return f"dataset {Path(params.dataset).name}"
    return f"{_lengths_text(params.input_tokens)} in / {_lengths_text(params.output_tokens)} out tokens"


def _class_prompts(params: RateParams, c: TrafficClass) -> str:
    """A class's prompts in run.json's words: its lengths, or its dataset's name; then its shared prefixes."""
    source = prompt_source(params, c)
    if c.input_tokens is None:
        assert source.dataset is not None
        return f"dataset {Path(source.dataset).name}"
    shared = f", {source.prefixes} shared prefixes of {source.prefix_tokens:,} tokens" if source.shared_prefix else ""
    return f"{_lengths_text(c.input_tokens)} in / {_lengths_text(c.output_tokens)} out tokens{shared}"


def _mix_text(params: RateParams) -> str | None:
    """A model mix's served names and weights, as run.json's run block shows them (None: one model)."""
    mix = params.model_mix()
    return None if mix is None else ", ".join(f"{printable(n)} (weight {w:g})" for n, w in mix.items())


def _beside_a_run(out: Path, params: RateParams, server: ServerInfo) -> bool:
    """Whether `out` holds a run already (`toolkit run` measures its `rate_sweep:` after the matrix) at this URL,
    of this model (a model mix: with it among its models); RunRefused, naming what differs, when it measured another
    server."""
    if not (out / RUN_FILE).exists():
        return False
    recorded = RunDocument.load(out)
    theirs = {
        "base_url": recorded.params.base_url if recorded.params is not None else None,
        "model": recorded.server.model if recorded.server is not None else None,
    }
    ours = {"base_url": params.base_url, "model": printable(server.model)}  # as run.json holds it
    if theirs["model"] in {printable(name) for name in params.model_mix() or {}}:  # the run's model in the mix
        ours["model"] = theirs["model"]
    if diff := ", ".join(f"{k}: {theirs[k]!r} -> {ours[k]!r}" for k in ours if theirs[k] != ours[k]):
        raise RunRefused(f"out: {out} holds a run of another server ({diff}); choose another folder")
    return True


def rates_run_info(
    params: RateParams, server: ServerInfo, run_id: str, api_key: str | None, out: Path, sweep: dict[str, Any]
) -> RunDocument:
    """run.json as the matrix writes it (hardware, engine, server, environment), its run block for a sweep."""
    as_matrix = RunParams.model_validate(
        {
            "base_url": params.base_url,
            "model": server.model,
            **({} if params.endpoint == "embeddings" else {"endpoint": params.endpoint}),  # the matrix's two only
            "api_key_env": params.api_key_env,
            "run_label": params.run_label,
        }
    )
    info = run_info(as_matrix, server, run_id, api_key, launch=launch_info(out))
    per_step = f"{params.duration_s:g} s" if params.duration_s else f"{params.requests_per_step} requests"
    shown = info.run_block()
    block = {
        k: v
        for k, v in {
            "Served model": server.model,
            "Model mix": _mix_text(params),
            "Benchmark tool": shown.get("Benchmark tool"),
            "Server": shown.get("Server"),
            "Load": "Open-loop request rates",
            "Rates": ", ".join("inf" if math.isinf(r) else f"{r:g}" for r in params.rates) + " req/s",
            "Arrival": params.arrival + (f" (burstiness {params.burstiness:g})" if params.arrival == "gamma" else ""),
            "Per step": per_step,
            "Requests": _requests_text(params),
            "Prompts": "cold (a unique prefix per request)" if params.cold_prompts else "shared prefix",
            "Clients": f"{params.clients} processes on Ray at {params.ray_address}" if params.ray_address else None,
        }.items()
        if v
    }
    return RunDocument.model_validate(
        {**info.to_json(), "run": block, "kind": "rates", "params": sweep, "fingerprint": None}
    )


class _Sweep:
    """A sweep in progress: plans each step, runs it, writes it, says it."""

    def __init__(
        self, tools: StepTools, workload: Workload, out: Path, say: Say, done: list[dict[str, Any]],
        replay: Replay | None = None,
    ) -> None:  # fmt: skip
        self.tools, self.workload, self.out, self.say, self.replay = tools, workload, out, say, replay
        self.rows = list(done)  # the steps a resumed sweep finished before
        self.slo = tools.params.has_slo()

    @property
    def measured(self) -> list[dict[str, Any]]:
        """The steps of the sweep itself (not its cold controls): what the listed rates and the search count."""
        return [row for row in self.rows if row.get("control_of") is None]

    async def listed(self) -> None:
        """The listed rates' steps that are not done yet (a step and its cold control are done together)."""
        done = sum(not row["searched"] for row in self.measured)
        last = self.rows[-1] if self.rows else None
        if last is not None and self.tools.params.cold_control and last.get("control_of") is None:
            # a stop between a step and its control: the control, from the step's stored records
            measured = StepPlan(last["step"], last["offered_rate"], last["searched"], [], [])
            await self._run(await self._cold_control(measured, read_step_records(self.out, last["step"])))
        rates = [self.replay.rate] if self.replay else self.tools.params.rates
        for rate in rates[done:]:
            await self.step(rate, searched=False)

    async def step(self, rate: float, searched: bool) -> None:
        params, index = self.tools.params, len(self.rows)
        count, duration = params.requests_per_step, None if params.requests_per_step else params.duration_s
        if self.replay is not None:
            due, lengths = self.replay.due, (self.replay.input_tokens, self.replay.output_tokens)
        else:
            due = schedule(
                rate,
                arrival=params.arrival,
                burstiness=params.burstiness,
                duration_s=duration,
                count=count,
                seed=(params.seed, index),
                rescale=params.rescale_schedule,
            )
            lengths = None
        if params.workload == "conversation":
            conversations = await self.workload.conversations(index, len(due))
            plan = StepPlan(index, rate, searched, due, [], conversations=conversations)
        else:
            blocks = None
            if self.replay is not None and self.replay.hash_ids is not None:
                assert self.replay.block_tokens is not None
                blocks = (self.replay.hash_ids, self.replay.block_tokens)
            requests = await self.workload.requests(index, len(due), lengths, blocks)
            plan = StepPlan(index, rate, searched, due, requests, self.workload.expected_hit_rates.get(index),
                            classes=self.workload.drawn_classes.get(index),
                            models=self.workload.drawn_models.get(index))  # fmt: skip
        frame = await self._run(plan)
        if params.cold_control:
            await self._run(await self._cold_control(plan, frame))

    async def _run(self, plan: StepPlan) -> pd.DataFrame:
        frame, step = await run_step(self.tools, plan)
        write_step(self.out, plan.index, frame, step)
        row = step.as_dict()
        self.rows.append(row)
        for line in step_lines(row, frame, self.slo):
            self.say(line)
        return frame

    async def _cold_control(self, measured: StepPlan, frame: pd.DataFrame) -> StepPlan:
        """The step's prompts again, each as long as the server counted it and at the time it was due, but cold:
        the same work without the prefix cache, beside it in the same run."""
        sent = frame[frame["input_tokens"] > 0].sort_values("scheduled_s", kind="stable")
        due = [float(t) for t in sent["scheduled_s"]]
        lengths = ([int(n) for n in sent["input_tokens"]], [max(1, int(n)) for n in sent["output_tokens"]])
        index = len(self.rows)
        requests = await self.workload.cold_requests(index, *lengths)
        turns = ([int(n) for n in sent["turn"]], [int(n) for n in sent["history_tokens"]])
        return StepPlan(index, measured.rate, False, due, requests, 0.0, control_of=measured.index, turns=turns)

    async def search(self) -> None:
        params = self.tools.params
        for _ in range(params.search_max_probes - sum(row["searched"] for row in self.measured)):
            rate = next_probe(self.measured, params.search_precision, params.goodput_target, params.search_repeats)
            if rate is None:
                break
            await self.step(rate, searched=True)
        result = search_result(self.measured, params.goodput_target)
        update_sweep(self.out, search=result)
        low, high = result["bracket"]
        above = "no rate shown to fail" if high is None else f"{high:.3g} req/s shown to fail"
        found = "no rate shown to meet it" if low is None else f"{low:.3g} req/s ({above})"
        undecided = f"; undecided: {', '.join(f'{r:.3g}' for r in result['undecided'])}" if result["undecided"] else ""
        short = too_few_text(result, params.goodput_target)
        if "binding" in result:  # a class sweep: every class judged against its own level
            binding = binding_text(result, params.goodput_target)
            found = f"with every class in its SLO: {found}{undecided}; binding: {binding}"
        else:
            found = f"shown to meet the service level: {found}{undecided}"
        self.say(f"search: highest rate {found}" + (f"; {short}" if short else ""))


async def _sweep(params: RateParams, out: Path, say: Say, resume: bool) -> None:
    api_key = api_key_from_env(params.api_key_env)
    inputs = load_inputs(params)  # a bad file fails before any load
    replay = inputs.replay
    before = read_sweep(out) if resume and has_rates(out) else None
    if before is None and (rates_dir(out) / STEPS_FILE).exists():
        raise RunRefused(f"out: {out} already holds a rate sweep; choose another folder, or resume it")
    embedder = (EmbeddingClient(params.base_url, api_key=api_key, read_timeout_s=params.read_timeout_s)
                if params.endpoint == "embeddings" else None)  # fmt: skip
    async with (
        ServerAPI(params.base_url, api_key=api_key, metrics_urls=params.server_metrics) as api,
        embedder or contextlib.nullcontext(),
    ):
        server = await discover(api, model=params.served_model, api_key_env=params.api_key_env)
        if embedder is not None and (problem := await probe_embeddings(embedder, server.model)):
            raise ParamsError(f"endpoint: embeddings: {params.base_url} does not serve embeddings of "
                              f"{printable(server.model)!r} ({problem})")  # fmt: skip
        if server.cache_config_problem:  # its block size is then unknown: no expected hit rate
            say(server.cache_config_problem)
        if server.metrics_source:  # server_metrics: the /metrics of the servers behind base_url, summed
            say(server.metrics_source if server.metrics_available else f"{server.metrics_problem}: no server-side "
                "figures")  # fmt: skip
        check_lengths(params, server.max_model_len)
        if params.classes is not None:
            check_class_models(params.classes, [str(m.get("id")) for m in server.models], params.base_url)
        if (mix := params.model_mix()) is not None:  # every model of the mix served, before anything is sent
            check_mix_models(mix, [str(m.get("id")) for m in server.models], params.base_url)
        if replay and (longest := max(map(sum, zip(replay.input_tokens, replay.output_tokens, strict=True)))) > (
            server.max_model_len
        ):
            raise ParamsError(f"replay: a request of {longest} tokens; the server's max_model_len is "
                              f"{server.max_model_len}")  # fmt: skip
        check_writable(out)
        sweep = {**params.public(), "model": server.model, "results_dir": str(out)}
        if mix is not None:  # the mix's weights by served name; `model` stays the name it was discovered with
            sweep["models"] = mix
        if replay is not None:  # one step: the file's schedule, at the rate its tool was asked for
            sweep |= {"rates": [rate_text(replay.rate)], "replay_source": replay.source}
        if before is None:
            sweep["run_id"] = random_ids.token_hex(4)
            if not _beside_a_run(out, params, server):  # a matrix run's folder keeps its run.json: its server's facts
                rates_run_info(params, server, sweep["run_id"], api_key, out, sweep).save(out)
            write_sweep(out, sweep)
            done, prompts_id = [], sweep["run_id"]
        else:
            _check_same_sweep(out, before.as_dict(), as_written(sweep))
            # every line as the runner writes it: one line naming a damaged one
            done = [step.as_dict() for step in read_steps(out, SweepStep)]
            prompts_id = f"{before.run_id}-{random_ids.token_hex(2)}"  # still cold prompts
            say(f"resuming the sweep in {out}; finished steps kept: {len(done)}")
        workload = Workload(
            params, api, server.model, prompts_id, inputs.dataset, server.block_size, inputs.class_datasets
        )
        senders = ray_senders(params.ray_address, params.clients) if params.ray_address else contextlib.nullcontext()
        async with StreamClient(params.base_url, api_key=api_key, read_timeout_s=params.read_timeout_s) as client:
            with senders as ray, protected_from_autogroups(params.base_url, say), frozen_heap():
                tools = StepTools(params, api, client, server.metrics_available, server.model, server.block_size, ray,
                                  embedder)  # fmt: skip
                sweep_run = _Sweep(tools, workload, out, say, done, replay)
                await sweep_run.listed()
                if params.search and (before is None or before.search_result is None):  # its result, once it ran
                    await sweep_run.search()


def _check_same_sweep(out: Path, before: dict[str, Any], now: dict[str, Any]) -> None:
    """A resumed sweep continues only with the parameters and the model it began with: RunRefused naming the
    fields that differ (where the files go, the key's variable and how the load is sent may change)."""
    free = {"schema_version", "results_dir", "run_id", "run_label", "api_key_env", "ray_address", "clients",
            "read_timeout_s", "drain_timeout_s"}  # fmt: skip
    # the parameter, or the search's result once it ran; a sweep from before rescaling kept its draws as they fell,
    # one from before images sent none
    before = {"rescale_schedule": False, "images": 0, **before, "search": bool(before.get("search"))}
    differ = [k for k in sorted(set(before) | set(now)) if k not in free and before.get(k) != now.get(k)]
    if differ:
        changes = ", ".join(f"{k}: {before.get(k)!r} -> {now.get(k)!r}" for k in differ)
        raise RunRefused(f"out: {out} holds a sweep run with other parameters ({changes}); choose another folder")
