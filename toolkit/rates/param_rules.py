"""Which rate sweep parameters go together: the cross-field rules of toolkit.rates.params.RateParams, each a
ValueError in one line naming the parameters (pydantic's model validator turns it into the sweep's ParamsError)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from toolkit.base.errors import ParamsError
from toolkit.loadgen.tools import tools_problem
from toolkit.rates.prompt_sources import PromptSource, prompt_source

if TYPE_CHECKING:
    from toolkit.rates.classes import TrafficClass
    from toolkit.rates.params import RateParams

__all__ = ["check_combinations", "shared_prefix_problem"]

# what an embeddings request has no use for (no tokens are generated, no reply is streamed or parsed), and what an
# embeddings sweep does not take yet (its inputs are built here, cold, and sent from this process)
_GENERATION_ONLY = ("output_tokens", "slo_ttft_ms", "slo_tpot_ms", "response_format", "tools", "tool_choice")
_NOT_FOR_EMBEDDINGS = ("dataset", "replay", "trace", "workload", "ray_address", "classes")
# what a class sweep takes from each class instead, and what builds its own requests (classes: toolkit.rates.classes)
_PER_CLASS = ("input_tokens", "output_tokens", "slo_ttft_ms", "slo_tpot_ms", "slo_e2e_ms")
_NOT_WITH_CLASSES = ("replay", "trace")


def check_combinations(p: RateParams) -> None:
    """ValueError (one line, naming the parameters) for parameters that do not go together."""
    if p.duration_s is not None and p.requests_per_step is not None:
        raise ValueError("duration_s and requests_per_step: give one of them, not both")
    if math.inf in p.rates and p.requests_per_step is None:
        raise ValueError("rates: inf (all at once) needs requests_per_step, not a duration")
    if p.burstiness != 1.0 and p.arrival != "gamma":
        raise ValueError(f"burstiness: applies to arrival gamma only (arrival is {p.arrival})")
    if p.clients > 1 and p.ray_address is None:
        raise ValueError("clients: more than one client process needs ray_address (a Ray cluster)")
    if problem := shared_prefix_problem(prompt_source(p), p.replay):
        raise ValueError(problem)
    if p.replay is not None and (p.dataset is not None or p.search):
        raise ValueError("replay: replays one file's schedule and lengths; it takes no dataset and no search")
    _images(p)
    _embeddings(p)
    _tools(p)
    _conversation(p)
    _trace(p)
    _classes(p)
    _mix(p)
    if p.search and p.classes is None and not p.has_slo():
        raise ValueError("search: needs a service level: slo_ttft_ms, slo_tpot_ms or slo_e2e_ms")


def shared_prefix_problem(source: PromptSource, replay: str | None = None) -> str | None:
    """Why a prompt source's shared-prefix settings do not go together (one line naming them), or None."""
    if source.workload is None and any(v is not None for v in (source.prefixes, source.prefix_tokens,
                                                                 source.prefix_choice)):  # fmt: skip
        return "prefixes, prefix_tokens, prefix_choice: apply to workload shared-prefix only"
    if source.shared_prefix and (source.prefixes is None or source.prefix_tokens is None):
        return "workload: shared-prefix needs prefixes (how many) and prefix_tokens (how long)"
    if source.shared_prefix and (source.dataset is not None or replay is not None):
        return "workload: shared-prefix builds its own prompts; it takes no dataset and no replay"
    return None


def _embeddings(p: RateParams) -> None:
    if p.endpoint != "embeddings":
        if p.batch_size is not None:
            raise ValueError("batch_size: applies to endpoint embeddings only")
        return
    given = [k for k in p.model_fields_set if getattr(p, k) is not None]
    if generating := [k for k in _GENERATION_ONLY if k in given]:
        raise ValueError(f"{', '.join(generating)}: generation only; endpoint embeddings takes none (an SLO: "
                         "slo_e2e_ms)")  # fmt: skip
    if other := [k for k in _NOT_FOR_EMBEDDINGS if k in given]:
        raise ValueError(f"{', '.join(other)}: not with endpoint embeddings (its inputs are built here, cold, "
                         "and sent from this process)")  # fmt: skip


def _tools(p: RateParams) -> None:
    if problem := tools_problem(p.endpoint, p.tools, p.tool_choice, p.response_format):
        raise ValueError(problem)
    if p.tools is not None and p.workload == "conversation":
        raise ValueError("tools: apply to single requests, not to workload conversation")


def _images(p: RateParams) -> None:
    if not p.images:
        if p.image_size is not None:
            raise ValueError("image_size: needs images (how many each request carries)")
        return
    if p.endpoint != "chat":
        raise ValueError(f"images: chat only; endpoint {p.endpoint} takes none")
    if p.workload == "conversation":
        raise ValueError("images: apply to single requests, not to workload conversation")


def _conversation(p: RateParams) -> None:
    talk = {"turns": p.turns, "think_time_s": p.think_time_s, "think_time_dist": p.think_time_dist,
            "warmup_turns": p.warmup_turns, "cold_control": p.cold_control or None}  # fmt: skip
    if p.workload != "conversation" and (given := [k for k, v in talk.items() if v is not None]):
        raise ValueError(f"{', '.join(given)}: apply to workload conversation only")
    if p.workload != "conversation":
        return
    if p.turns is None:
        raise ValueError("workload: conversation needs turns (how many per conversation)")
    if p.think_time_dist == "exponential" and not p.think_time_s:
        raise ValueError("think_time_dist: exponential needs think_time_s (its mean, > 0)")
    if p.replay is not None or p.trace is not None or p.ray_address is not None:
        raise ValueError("workload: conversation sends its own turns from this process; it takes no replay, "
                         "trace or ray_address")  # fmt: skip
    if p.response_format is not None:
        raise ValueError("response_format: applies to single requests, not to workload conversation")


def _trace(p: RateParams) -> None:
    window = {"time_scale": p.time_scale, "trace_start_s": p.trace_start_s,
              "trace_duration_s": p.trace_duration_s, "trace_block_tokens": p.trace_block_tokens}  # fmt: skip
    if p.trace is None:
        if given := [k for k, v in {"trace_format": p.trace_format, **window}.items() if v is not None]:
            raise ValueError(f"{', '.join(given)}: apply to a trace only")
        return
    if p.trace_format is None:
        raise ValueError("trace: needs trace_format: mooncake (JSONL) or azure (CSV)")
    if p.dataset is not None or p.replay is not None or p.search or p.workload is not None:
        raise ValueError("trace: replays the trace's arrivals and lengths; it takes no dataset, replay, search "
                         "or workload")  # fmt: skip
    if p.trace_block_tokens is not None and p.trace_format != "mooncake":
        raise ValueError("trace_block_tokens: applies to a Mooncake trace's hash_ids only")


def _classes(p: RateParams) -> None:
    if p.classes is None:
        return
    if given := [k for k in _PER_CLASS if k in p.model_fields_set and getattr(p, k) is not None]:
        raise ValueError(f"{', '.join(given)}: with classes, each class has its own; give them in each class")
    other = [k for k in _NOT_WITH_CLASSES if getattr(p, k) is not None]
    if other or p.workload == "conversation":
        raise ValueError(f"{', '.join(other or ['workload'])}: not with classes (a class sweep builds each class's "
                         "requests from its lengths, its dataset or its shared prefixes)")  # fmt: skip
    for c in p.classes:
        _class_kinds(p, c)
        _class_source(p, c)
    if p.search and (bare := next((c.name for c in p.classes if not c.has_slo()), None)):
        raise ValueError(f"classes.{bare}: no service level; the search needs slo_ttft_ms, slo_tpot_ms or "
                         "slo_e2e_ms in every class")  # fmt: skip


def _class_kinds(p: RateParams, c: TrafficClass) -> None:
    """A class's request kinds (its own, the sweep's where it gives none) under the sweep's rules, named by it."""
    kinds, where = p.kinds(c), f"classes.{c.name}"
    if c.tool_choice is not None and kinds.tools is None:
        raise ValueError(f"{where}.tool_choice: needs tools (a JSON file of function tools: the class's or the "
                         "sweep's)")  # fmt: skip
    if c.image_size is not None and not kinds.images:
        raise ValueError(f"{where}.image_size: needs images (how many each of its requests carries)")
    for kind, given in (("tools", kinds.tools is not None), ("images", kinds.images > 0)):
        if given and kinds.endpoint != "chat":
            raise ValueError(f"{where}: endpoint {kinds.endpoint} takes no {kind} (chat only); give it endpoint "
                             f"chat, or no {kind}")  # fmt: skip
    if kinds.tools is not None and kinds.response_format is not None:
        raise ValueError(f"{where}: tools and response_format: give one of them, not both (a class that gives "
                         "neither its own takes the sweep's)")  # fmt: skip
    if c.tools is not None or c.tool_choice is not None:
        try:
            kinds.request_tools()
        except ParamsError as exc:
            raise ValueError(f"{where}.tool_choice: {exc}") from None


def _class_source(p: RateParams, c: TrafficClass) -> None:
    """A class's prompt source (its own fields, the sweep's where it gives none) under the sweep's rules, named by
    it; its input_tokens when it has no dataset, and none beside one."""
    source, where = prompt_source(p, c), f"classes.{c.name}"
    if problem := shared_prefix_problem(source):
        raise ValueError(f"{where}: {problem}")
    if source.dataset is None and c.input_tokens is None:
        raise ValueError(f"{where}.input_tokens: required without a dataset (the class's or the sweep's)")
    if source.dataset is not None and c.input_tokens is not None:
        raise ValueError(f"{where}.input_tokens: not with a dataset (its prompts are the dataset's: the class's or "
                         "the sweep's)")  # fmt: skip


def _mix(p: RateParams) -> None:
    if p.model_mix() is None:
        return
    if p.classes is not None:
        raise ValueError("model: a mix and classes: give each class its model instead")
    if p.endpoint == "embeddings" or p.workload == "conversation":
        raise ValueError("model: a mix applies to single generation requests, not to endpoint embeddings or "
                         "workload conversation")  # fmt: skip
