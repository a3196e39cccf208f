"""One rate step: from an idle server, send the step's requests on schedule, sample the server, judge the records.

The server's gauges (running, waiting, KV use) are sampled during the step; its prompt and generation token
counters are read before the first send and after the server has finished the step's last request, and set
against the client's sums of the same tokens (docs/method/rates.md, Open-loop rates).
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from toolkit.loadgen.client import StreamClient
from toolkit.loadgen.conversations import ConversationPlan, PlannedTurn, send_conversations
from toolkit.loadgen.embeddings import EmbeddingClient, send_embeddings
from toolkit.loadgen.open_loop import PlannedRequest, send_open_loop
from toolkit.matrix.decode import drain
from toolkit.matrix.lora_info import lora_adapters_seen
from toolkit.matrix.prometheus import (
    EXTERNAL_HITS,
    EXTERNAL_QUERIES,
    GENERATION_TOKENS,
    PREFIX_HITS,
    PREFIX_QUERIES,
    PROMPT_TOKENS,
    PROMPT_TOKENS_BY_SOURCE,
    MetricsSnapshot,
    delta,
    endpoint_growth,
    histogram_split,
    labelled_growth,
)
from toolkit.matrix.sampler import Sampler, Samples
from toolkit.matrix.server_api import ServerAPI
from toolkit.method.breakdown import breakdown_row, request_split
from toolkit.method.class_figures import class_figures, mix_total
from toolkit.method.embeddings import embedding_figures, is_embeddings, summarize_embedding_step
from toolkit.method.goodput import CLASS_COLUMN, MODEL_COLUMN, StepSummary, steady_mask, summarize_step
from toolkit.method.prefix_cache import expected_conversation_hit_rate, measured_hit_rate
from toolkit.rates.files import records_frame
from toolkit.rates.params import RateParams
from toolkit.rates.ray_clients import LEAD_S, RaySenders, send_on_ray
from toolkit.results.documents.step import RateStep
from toolkit.servers.request_log import log_size, requests_since

SAMPLE_INTERVAL_S = 0.5  # server gauges at 2 Hz: each scrape costs the sending loop a little


@dataclass(frozen=True)
class StepPlan:
    """What a step sends: its index, offered rate, whether the search added it, due times and requests."""

    index: int
    rate: float
    searched: bool
    due: list[float]
    requests: list[PlannedRequest]
    expected_hit_rate: float | None = None  # a shared-prefix step's, from its construction (method.prefix_cache)
    conversations: list[list[PlannedTurn]] | None = None  # a conversation step's, one per due time (not `requests`)
    control_of: int | None = None  # a cold control step: the step whose prompt lengths and times it repeats cold
    turns: tuple[list[int], list[int]] | None = None  # a cold control's turn and history tokens, per request
    classes: list[str] | None = None  # a class sweep's: each request's class (toolkit.rates.classes)
    models: list[str] | None = None  # a model mix's: each request's model (toolkit.rates.model_mix)


@dataclass(frozen=True)
class StepTools:
    """What every step of a sweep uses."""

    params: RateParams
    api: ServerAPI
    client: StreamClient
    metrics: bool  # the server answers /metrics
    model: str  # as the server names it
    block_size: int | None = None  # the server's KV block (tokens), for the hit rate a workload should see
    ray: RaySenders | None = None  # when the step is sent from several client processes on a Ray cluster
    embedder: EmbeddingClient | None = None  # endpoint embeddings: what sends the step's requests


async def run_step(tools: StepTools, plan: StepPlan) -> tuple[pd.DataFrame, RateStep]:
    """Run one step: its records (`RECORD_COLUMNS`) and its steps.jsonl line."""
    params, api = tools.params, tools.api
    if params.drain:
        await drain(api, params.drain_timeout_s, tools.metrics)
    before = await api.metrics_or_none() if tools.metrics else None
    log = None if params.server_log is None else Path(params.server_log)
    log_mark = None if log is None else (log, log_size(log))  # where the server's log ends before the step
    lead = 0.0 if tools.ray is None else LEAD_S  # Ray tasks start from a common time a little ahead
    start, start_wall = time.perf_counter() + lead, time.time() + lead
    async with Sampler(api, interval_s=SAMPLE_INTERVAL_S, use_metrics=tools.metrics) as sampler:
        if plan.conversations is not None:
            talk = ConversationPlan(
                params.generation_endpoint, tools.model, params.think_time_s or 0.0, params.conversation_warmup(),
                params.max_in_flight,
            )  # fmt: skip
            records = await send_conversations(tools.client, talk, plan.conversations, plan.due, start=start)
        elif tools.embedder is not None:
            records = await send_embeddings(
                tools.embedder, plan.requests, plan.due, max_in_flight=params.max_in_flight, start=start
            )
        elif tools.ray is None:
            records = await send_open_loop(
                tools.client, plan.requests, plan.due, max_in_flight=params.max_in_flight, start=start
            )
        else:
            records = await asyncio.to_thread(
                send_on_ray, tools.ray, params, plan.requests, plan.due, start_wall, (params.seed, plan.index, 2)
            )
        end = time.perf_counter()
    # The counters move as the engine finishes its work: read them once it runs nothing.
    await drain(api, params.drain_timeout_s, tools.metrics)
    after = await api.metrics_or_none() if tools.metrics else None
    end_wall = time.time()
    frame = records_frame(records, plan.index, plan.rate)
    if plan.turns is not None:  # a cold control keeps the turn and history of the request it repeats
        frame["turn"], frame["history_tokens"] = plan.turns
    if plan.classes is not None:
        frame[CLASS_COLUMN] = [plan.classes[i] for i in frame["request"]]
    if plan.models is not None:
        frame[MODEL_COLUMN] = [plan.models[i] for i in frame["request"]]
    if params.warmup_s:
        frame["warmup"] |= frame["scheduled_s"] < frame["scheduled_s"].min() + params.warmup_s
    summarize = summarize_embedding_step if is_embeddings(frame) else summarize_step
    summary = summarize(frame, params.service_level(), params.steady_trim, params.percentiles)
    expected = plan.expected_hit_rate
    if plan.conversations is not None:
        sent = frame[frame["output_tokens"] > 0]
        expected = expected_conversation_hit_rate(
            list(sent["turn"]), list(sent["history_tokens"]), list(sent["input_tokens"]), tools.block_size
        )
    figures = server_figures(sampler.samples, start, end, before, after)
    figures["lora_adapters"] = lora_adapters_seen(after, start_wall, end_wall)  # a LoRA server's; else None
    figures["server_log_requests"] = None if log_mark is None else logged(*log_mark)
    row = step_row(replace(plan, expected_hit_rate=expected), params, summary, frame, figures)
    return frame, row


def server_figures(
    samples: Samples, start: float, end: float, before: MetricsSnapshot | None, after: MetricsSnapshot | None
) -> dict[str, Any]:
    """The server's queue and KV use during the step, and its token counters' growth over it (None: unknown): the
    GPU prefix cache's hit rate and, where a KV connector exports one, its external tier's beside it, and the prompt
    tokens by where their KV came from (`vllm:prompt_tokens_by_source`)."""
    gauges = samples.server_between(start, end)
    running = [r for _, r, _ in gauges]
    waiting = [w for _, _, w in gauges]
    kv = [u for t, u in samples.kv_usage if start <= t <= end]
    prompt, generated = delta(before, after, PROMPT_TOKENS), delta(before, after, GENERATION_TOKENS)
    hits, queries = delta(before, after, PREFIX_HITS), delta(before, after, PREFIX_QUERIES)
    external = delta(before, after, EXTERNAL_HITS), delta(before, after, EXTERNAL_QUERIES)
    by_source = labelled_growth(before, after, PROMPT_TOKENS_BY_SOURCE)
    shares = endpoint_growth(before, after, GENERATION_TOKENS)  # several /metrics endpoints: each one's growth
    return {
        "server_running_max": max(running) if running else None,
        "server_waiting_max": max(waiting) if waiting else None,
        "server_waiting_mean": sum(waiting) / len(waiting) if waiting else None,
        "kv_usage_max": max(kv) if kv else None,
        "server_prompt_tokens": None if prompt is None else int(prompt),
        "server_generation_tokens": None if generated is None else int(generated),
        "endpoint_generation_tokens": None if shares is None else [None if g is None else int(g) for g in shares],
        "prefix_cache_hit_rate": measured_hit_rate(hits, queries),
        "external_prefix_cache_hit_rate": measured_hit_rate(*external),
        "prompt_tokens_by_source": None if by_source is None else {k: int(v) for k, v in by_source.items()},
        "histograms": histogram_split(before, after),
    }


def step_row(
    plan: StepPlan, params: RateParams, summary: StepSummary, frame: pd.DataFrame, server: dict[str, Any]
) -> RateStep:
    """The step's steps.jsonl line, keys in the documented order (`endpoint_generation_tokens` only when several
    `/metrics` endpoints were scraped: each one's generated tokens, in the order of `server_metrics`;
    `lora_adapters` only from a server exporting vllm:lora_requests_info: the adapters it ran and queued during the
    step, toolkit.matrix.lora_info; `server_log_requests` only with a `server_log`: the requests it received
    during the step, for its base model and by adapter, toolkit.servers.request_log; `items`,
    `items_s` and `input_tok_s` only for an embeddings step: toolkit.method.embeddings; `classes` only for a class
    sweep's: each class's figures against its own level, toolkit.method.class_figures; `models` only for a model
    mix's: each model's figures against the sweep's level)."""
    lag_p99 = summary.percentiles.get("lag_p99_ms")
    timed = plan.rate != math.inf  # all at once has no schedule to hold: its lag is the time to send them all
    embeddings = is_embeddings(frame)
    # the server read these prompts (a refused request has no tokens; an embedding has none out)
    prefilled = frame["error"].isna() if embeddings else frame["output_tokens"] > 0
    shares = server.get("endpoint_generation_tokens")
    classes = None if params.classes is None else step_classes(params, frame)
    structured, tooled = carrying(params, frame, "response_format"), carrying(params, frame, "tools")
    models = None if MODEL_COLUMN not in frame else step_models(params, frame)
    log_counts = server.get("server_log_requests")
    row = {
        "step": plan.index,
        "searched": plan.searched,
        "arrival": params.arrival,
        "burstiness": params.burstiness,
        **summary.row(),
        **(embedding_figures(frame, summary) if embeddings else {}),
        "lag_flagged": timed and lag_p99 is not None and lag_p99 > params.lag_flag_ms,
        "server_running_max": server["server_running_max"],
        "server_waiting_max": server["server_waiting_max"],
        "server_waiting_mean": server["server_waiting_mean"],
        "kv_usage_max": server["kv_usage_max"],
        "server_prompt_tokens": server["server_prompt_tokens"],
        "server_generation_tokens": server["server_generation_tokens"],
        **({} if shares is None else {"endpoint_generation_tokens": shares}),
        **({} if server.get("lora_adapters") is None else {"lora_adapters": server["lora_adapters"]}),
        **({} if log_counts is None else {"server_log_requests": log_counts}),
        "client_prompt_tokens": int(frame.loc[prefilled, "input_tokens"].sum()),
        "client_generation_tokens": int(frame["output_tokens"].sum()),
        "prefix_cache_hit_rate": server["prefix_cache_hit_rate"],
        "external_prefix_cache_hit_rate": server["external_prefix_cache_hit_rate"],
        "prompt_tokens_by_source": server["prompt_tokens_by_source"],
        "expected_hit_rate": plan.expected_hit_rate,
        "client_cached_tokens": client_cached_tokens(frame),
        "workload": "cold-control" if plan.control_of is not None else params.workload or "cold",
        "control_of": plan.control_of,
        "warmup_requests": int(frame["warmup"].sum()),
        "schema_valid_share": None if structured is None else schema_valid_share(structured),
        "invalid_reply": None if structured is None else first_invalid_reply(structured),
        "tool_called_share": None if tooled is None else completed_share(tooled, "tool_called"),
        "tool_args_valid_share": None if tooled is None else completed_share(tooled, "tool_args_valid"),
        **breakdown_row(request_split(frame), server["histograms"], steady_mask(frame, params.steady_trim)),
        **({} if classes is None else {"classes": classes}),
        **({} if models is None else {"models": models}),
    }
    if classes is not None:  # the step meets its level when each class meets its own
        row.update(mix_total(classes))
    return RateStep.of(row)


def logged(log: Path, mark: int) -> dict[str, Any] | None:
    """The requests the server's log received since `mark`: `base` (the base model's) and `adapters` (by name);
    None when the log cannot be read now (the step's records are kept whatever its log)."""
    try:
        received = requests_since(log, mark)
    except OSError:
        return None
    return {"base": received.base, "adapters": received.adapters}


def step_classes(params: RateParams, frame: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """A class sweep's step, class by class: each class's figures against its own service level, and the shares
    of its completed replies that kept to its response format or called a tool, as the step's, where its requests
    carried one (its own or the sweep's)."""
    assert params.classes is not None
    levels = {c.name: c.service_level(params.goodput_target) for c in params.classes}
    weights = {c.name: c.weight for c in params.classes}
    figures = class_figures(frame, levels, weights, params.steady_trim, params.percentiles)
    for c in params.classes:
        kinds, mine = params.kinds(c), frame[frame[CLASS_COLUMN] == c.name]
        if kinds.response_format is not None:
            figures[c.name]["schema_valid_share"] = schema_valid_share(mine)
        if kinds.tools is not None:
            figures[c.name]["tool_called_share"] = completed_share(mine, "tool_called")
            figures[c.name]["tool_args_valid_share"] = completed_share(mine, "tool_args_valid")
    return figures


def carrying(params: RateParams, frame: pd.DataFrame, kind: str) -> pd.DataFrame | None:
    """The step's records of the requests that carried `kind` (response_format or tools): every one when the
    sweep's requests did, a class sweep's classes' whose requests did (their own or the sweep's); None: none did."""
    if params.classes is None:
        return frame if getattr(params, kind) is not None else None
    names = [c.name for c in params.classes if getattr(params.kinds(c), kind) is not None]
    return frame[frame[CLASS_COLUMN].isin(names)] if names else None


def step_models(params: RateParams, frame: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """A model mix's step, model by model: each model's figures (rates, latencies, goodput) against the sweep's
    service level, and its drawn share beside its weight's."""
    mix = params.model_mix()
    assert mix is not None
    level = params.service_level()
    return class_figures(frame, dict.fromkeys(mix, level), mix, params.steady_trim, params.percentiles, MODEL_COLUMN)


def schema_valid_share(frame: pd.DataFrame) -> float | None:
    """Of the step's completed requests (as `request_latencies` counts them, warm-up too), the share whose reply
    kept to the response format (`schema_valid`); None when none completed."""
    return completed_share(frame, "schema_valid")


def first_invalid_reply(frame: pd.DataFrame) -> str | None:
    """Why the step's first reply (in request order) that broke the response format broke it, with its start (the
    record's `schema_problem`); None when every reply kept to it, or for records from before it was kept."""
    if "schema_problem" not in frame:
        return None
    problems = frame.sort_values("request")["schema_problem"].dropna()
    return str(problems.iloc[0]) if len(problems) else None


def completed_share(frame: pd.DataFrame, column: str) -> float | None:
    """Of the step's completed requests (as `request_latencies` counts them, warm-up too), the share whose
    `column` is true (None and NaN: not so); None when none completed."""
    completed = frame["error"].isna() & frame["first_token_s"].notna() & (frame["output_tokens"] > 0)
    checked = frame.loc[completed, column]
    valid = sum(1 for v in checked if v is not None and v == v and bool(v))  # None and NaN: not checked
    return valid / len(checked) if len(checked) else None


def client_cached_tokens(frame: pd.DataFrame) -> int | None:
    """The prompt tokens the server's replies reported found in its prefix cache, summed; None when none said."""
    reported = frame["cached_tokens"].dropna()
    return int(reported.sum()) if len(reported) else None
