"""vLLM's Prometheus metrics: parse a `/metrics` text into a snapshot, read values old and new names.

Pure: parsing uses prometheus_client's text parser; fetching lives in `server_api.py`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

# Current name first, then the names older vLLM versions used.
RUNNING = ("vllm:num_requests_running",)
WAITING = ("vllm:num_requests_waiting",)
GENERATION_TOKENS = ("vllm:generation_tokens_total",)
PROMPT_TOKENS = ("vllm:prompt_tokens_total",)
PREFIX_QUERIES = ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
PREFIX_HITS = ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
PREEMPTIONS = ("vllm:num_preemptions_total",)
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
REQUEST_SUCCESS = ("vllm:request_success_total",)
# Per engine step and request, on the engine's clock: independent of how outputs are batched into chunks.
ITL_SUM = ("vllm:inter_token_latency_seconds_sum", "vllm:time_per_output_token_seconds_sum")
ITL_COUNT = ("vllm:inter_token_latency_seconds_count", "vllm:time_per_output_token_seconds_count")
# Speculative decoding (vLLM >= 0.8): drafts proposed, tokens drafted, drafted tokens the target model accepted.
SPEC_DRAFTS = ("vllm:spec_decode_num_drafts_total",)
SPEC_DRAFT_TOKENS = ("vllm:spec_decode_num_draft_tokens_total",)
SPEC_ACCEPTED_TOKENS = ("vllm:spec_decode_num_accepted_tokens_total",)
CACHE_CONFIG = "vllm:cache_config_info"
LORA_INFO = "vllm:lora_requests_info"  # a LoRA server's adapters running and waiting (toolkit.matrix.lora_info)
# Per request, in the API process: from its arrival there to its first token there (the engine's part and the
# hand-over between the two processes; not the HTTP exchange before it, nor the stream after).
API_TTFT = ("vllm:time_to_first_token_seconds_sum", "vllm:time_to_first_token_seconds_count")
# Per finished request, on the engine's clock: queued to scheduled, scheduled to first token, first token to last.
QUEUE_TIME = ("vllm:request_queue_time_seconds_sum", "vllm:request_queue_time_seconds_count")
PREFILL_TIME = ("vllm:request_prefill_time_seconds_sum", "vllm:request_prefill_time_seconds_count")
DECODE_TIME = ("vllm:request_decode_time_seconds_sum", "vllm:request_decode_time_seconds_count")
# A KV connector's external tier (LMCache, CPU offloading, another instance: vLLM >= 0.11), in prompt tokens like
# the GPU prefix cache's: it is queried for what the GPU cache missed. 0 (or absent) without a connector.
EXTERNAL_QUERIES = ("vllm:external_prefix_cache_queries_total",)
EXTERNAL_HITS = ("vllm:external_prefix_cache_hits_total",)
# Prompt tokens by where their KV came from, one series per `source` label: local_compute, local_cache_hit,
# external_kv_transfer (vLLM's PromptTokenStats.ALL_SOURCES).
PROMPT_TOKENS_BY_SOURCE = ("vllm:prompt_tokens_by_source_total",)
SOURCE_LABEL = "source"


ENDPOINT_LABEL = "endpoint"  # what `merge_snapshots` adds to each sample: "0", "1", … in the order scraped
EXPORTED_ENDPOINT_LABEL = "exported_endpoint"  # a scraped sample's own `endpoint` label, kept under this name


@dataclass(frozen=True)
class MetricsSnapshot:
    """All samples of one scrape: sample name -> list of (labels, value).

    `endpoints`: 0 for one server's scrape; N for N servers' scrapes merged (`merge_snapshots`), each sample then
    labelled with its endpoint's index (`ENDPOINT_LABEL`)."""

    samples: dict[str, list[tuple[dict[str, str], float]]] = field(default_factory=dict)
    endpoints: int = 0

    def value(self, names: tuple[str, ...]) -> float | None:
        """Sum over label sets of the first of `names` present (None if none is): across merged endpoints, their
        counters and their running and waiting requests add up."""
        for name in names:
            if name in self.samples:
                return sum(v for _, v in self.samples[name])
        return None

    def highest(self, names: tuple[str, ...]) -> float | None:
        """The highest sample over label sets of the first of `names` present (None if none is): a share such as
        KV cache usage, which does not add up across engines or endpoints."""
        for name in names:
            if name in self.samples:
                return max((v for _, v in self.samples[name]), default=None)
        return None

    def labels(self, name: str) -> dict[str, str]:
        """Labels of the first sample of an info metric such as `vllm:cache_config_info` (merged endpoints: the
        first endpoint's that has it, without the endpoint label)."""
        found = self.samples.get(name) or []
        if not found:
            return {}
        labels = dict(found[0][0])
        if self.endpoints:
            labels.pop(ENDPOINT_LABEL, None)
            if EXPORTED_ENDPOINT_LABEL in labels:
                labels[ENDPOINT_LABEL] = labels.pop(EXPORTED_ENDPOINT_LABEL)
        return labels

    def part(self, index: int) -> MetricsSnapshot:
        """The samples of merged endpoint `index`, as its own scrape gave them (one server's scrape: itself)."""
        if not self.endpoints:
            return self
        mark = str(index)
        samples: dict[str, list[tuple[dict[str, str], float]]] = {}
        for name, series in self.samples.items():
            for labels, value in series:
                if labels.get(ENDPOINT_LABEL) == mark:
                    samples.setdefault(name, []).append((_unmarked(labels), value))
        return MetricsSnapshot(samples)


def _unmarked(labels: dict[str, str]) -> dict[str, str]:
    own = {k: v for k, v in labels.items() if k not in (ENDPOINT_LABEL, EXPORTED_ENDPOINT_LABEL)}
    if EXPORTED_ENDPOINT_LABEL in labels:
        own[ENDPOINT_LABEL] = labels[EXPORTED_ENDPOINT_LABEL]
    return own


def merge_snapshots(snapshots: Sequence[MetricsSnapshot]) -> MetricsSnapshot:
    """Several servers' scrapes (replicas behind one gateway, prefill and decode instances) as one snapshot: each
    sample gains the label `endpoint` = its scrape's index ("0", "1", … in the order given; a sample's own
    `endpoint` label becomes `exported_endpoint`), so that `value` sums counters and gauges across them,
    `highest` takes the highest share, `labels` the first endpoint's info and `part(i)` gives one back."""
    if not snapshots:
        raise ValueError("no scrape to merge")
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for index, snapshot in enumerate(snapshots):
        for name, series in snapshot.samples.items():
            for labels, value in series:
                marked = {k: v for k, v in labels.items() if k != ENDPOINT_LABEL}
                if ENDPOINT_LABEL in labels:
                    marked[EXPORTED_ENDPOINT_LABEL] = labels[ENDPOINT_LABEL]
                samples.setdefault(name, []).append(({**marked, ENDPOINT_LABEL: str(index)}, value))
    return MetricsSnapshot(samples, endpoints=len(snapshots))


# Every family the toolkit reads (counters without their `_total`, so `_created` lines come along too).
USED_FAMILIES: tuple[str, ...] = tuple(
    {name.removesuffix("_total") for group in (RUNNING, WAITING, GENERATION_TOKENS, PROMPT_TOKENS, PREFIX_QUERIES,
                                               PREFIX_HITS, PREEMPTIONS, KV_USAGE, REQUEST_SUCCESS, ITL_SUM,
                                               ITL_COUNT, SPEC_DRAFTS, SPEC_DRAFT_TOKENS, SPEC_ACCEPTED_TOKENS,
                                               QUEUE_TIME, PREFILL_TIME, DECODE_TIME, API_TTFT, EXTERNAL_QUERIES,
                                               EXTERNAL_HITS, PROMPT_TOKENS_BY_SOURCE)
     for name in group} | {CACHE_CONFIG, LORA_INFO}
)  # fmt: skip


_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def foreign_metrics(snapshot: MetricsSnapshot, text: str) -> str | None:
    """None when a scrape is vLLM's (it holds the running-requests gauge); else what it holds instead, in a few
    words: a gateway or proxy in front of vLLM answers `/metrics` with its own metrics."""
    if snapshot.value(RUNNING) is not None:
        return None
    names = []
    for line in text.splitlines():
        found = _METRIC_NAME.match(line) if line and not line.startswith("#") else None
        if found and found.group(0) not in names:
            names.append(found.group(0))
    held = f"{len(names)} other metric(s), e.g. {', '.join(names[:3])}" if names else "no metric"
    return f"no {RUNNING[0]} ({held})"


def used_lines(text: str, families: tuple[str, ...] = USED_FAMILIES) -> str:
    """Only the lines of the families we read: vLLM's ~600-line scrape costs ~40 ms to parse whole,
    which would block the measuring event loop at every sample."""
    keep = []
    for line in text.splitlines():
        if line.startswith("#"):  # "# HELP name ..." / "# TYPE name ..."
            parts = line.split(" ", 3)
            name = parts[2] if len(parts) > 2 else ""
        else:
            name = line
        if name.startswith(families):
            keep.append(line)
    return "\n".join(keep) + "\n"


def parse_metrics(text: str) -> MetricsSnapshot:
    """Samples of the families in `USED_FAMILIES` (a family's other samples are not read).

    ValueError, naming the sample, when the text is not Prometheus metrics or a sample read is NaN, infinite or
    negative (every one is a count, a sum of seconds or a fraction), or a series appears twice.
    """
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(used_lines(text)):
        for sample in family.samples:
            value, labels = float(sample.value), dict(sample.labels)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"sample {sample.name} is {value}")
            series = samples.setdefault(sample.name, [])
            if any(seen == labels for seen, _ in series):
                raise ValueError(f"sample {sample.name}{_label_text(labels)} appears twice")
            series.append((labels, value))
    return MetricsSnapshot(samples)


def _label_text(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}" if labels else ""


def mean_delta(
    before: MetricsSnapshot | None, after: MetricsSnapshot | None, sums: tuple[str, ...], counts: tuple[str, ...]
) -> float | None:
    """Mean of a histogram's observations made between two snapshots (None without any)."""
    total, count = delta(before, after, sums), delta(before, after, counts)
    return None if total is None or not count else total / count


def histogram_split(before: MetricsSnapshot | None, after: MetricsSnapshot | None) -> dict[str, float | None]:
    """The means, in ms, of the server's queue, prefill and decode histograms over the requests it finished between
    two scrapes, and of its API process's TTFT (`API_TTFT`) over the first tokens it made between them (None: not
    exported, or none): the breakdown's fallback, and the wire's part inside the API process
    (toolkit.method.breakdown)."""
    means = {name: mean_delta(before, after, (pair[0],), (pair[1],)) for name, pair in
             (("queue", QUEUE_TIME), ("server_ttft", PREFILL_TIME), ("decode", DECODE_TIME),
              ("api_ttft", API_TTFT))}  # fmt: skip
    return {name: None if value is None else value * 1e3 for name, value in means.items()}


def delta(before: MetricsSnapshot | None, after: MetricsSnapshot | None, names: tuple[str, ...]) -> float | None:
    """Counter difference between two snapshots (None when either is missing, or when the counter went back: a
    counter never does, so the two readings are not of one count)."""
    growth, _why = counter_growth(before, after, names)
    return growth


def counter_growth(
    before: MetricsSnapshot | None, after: MetricsSnapshot | None, names: tuple[str, ...], most: float | None = None
) -> tuple[float | None, str | None]:
    """A counter's growth between two snapshots, or (None, why) when it went back or grew by more than `most` (the
    caller says why that bound); (None, None) when either snapshot lacks it."""
    if before is None or after is None:
        return None, None
    a, b = before.value(names), after.value(names)
    if a is None or b is None:
        return None, None
    if before.endpoints > 1 and after.endpoints == before.endpoints:  # one replica restarted: not hidden by a sum
        for index in range(before.endpoints):
            if went := counter_growth(before.part(index), after.part(index), names)[1]:
                return None, f"{went} at endpoint {index}"
    if b < a:
        return None, f"{names[0]} went back by {a - b:,.0f}"
    if most is not None and b - a > most:
        return None, f"{names[0]} grew by {b - a:,.0f}"
    return b - a, None


def endpoint_growth(
    before: MetricsSnapshot | None, after: MetricsSnapshot | None, names: tuple[str, ...]
) -> list[float | None] | None:
    """A counter's growth at each merged endpoint, in order (an entry None: that endpoint's counter is missing or
    went back); None unless both snapshots merge the same several endpoints."""
    if before is None or after is None or before.endpoints < 2 or after.endpoints != before.endpoints:
        return None
    return [delta(before.part(i), after.part(i), names) for i in range(before.endpoints)]


@dataclass(frozen=True)
class CacheConfig:
    """KV cache facts from `vllm:cache_config_info`; a size label that is no whole number >= 1 is None, and
    `problem` says which were refused."""

    block_size: int | None
    num_blocks: int | None
    kv_cache_size_tokens: int | None
    prefix_caching: bool | None
    labels: dict[str, str]
    problem: str | None = None

    @property
    def budget_tokens(self) -> tuple[int | None, str]:
        """KV budget and where it came from, by the order of preference of docs/method/matrix.md, Capacity."""
        if self.kv_cache_size_tokens:
            return self.kv_cache_size_tokens, "kv_cache_size_tokens"
        if self.num_blocks and self.block_size:
            return self.num_blocks * self.block_size, "num_gpu_blocks × block_size"
        return None, "unknown"


SIZE_LABELS = ("kv_cache_size_tokens", "num_gpu_blocks", "block_size")  # counts of tokens or blocks: each >= 1


def _size(text: str | None) -> int | None:
    """A size label as a whole number >= 1; None when absent or when it is none (`_refused` says so)."""
    if text in (None, "", "None"):
        return None
    try:
        value = float(text)  # type: ignore[arg-type]
    except ValueError:
        return None
    return int(value) if math.isfinite(value) and value >= 1 and value.is_integer() else None


def _refused(labels: dict[str, str]) -> str | None:
    """Which size labels are given but are no whole number >= 1, in one line (None: none)."""
    bad = [f"{name} {labels[name][:40]!r} is not a whole number >= 1" for name in SIZE_LABELS
           if labels.get(name) not in (None, "", "None") and _size(labels[name]) is None]  # fmt: skip
    return f"{CACHE_CONFIG}: {', '.join(bad)}: treated as unknown" if bad else None


def cache_config(snapshot: MetricsSnapshot) -> CacheConfig:
    """The cache facts of a scrape; a size of 0 or less, or not finite, is refused (None), never used."""
    labels = snapshot.labels(CACHE_CONFIG)
    prefix = labels.get("enable_prefix_caching")
    return CacheConfig(
        block_size=_size(labels.get("block_size")),
        num_blocks=_size(labels.get("num_gpu_blocks")),
        kv_cache_size_tokens=_size(labels.get("kv_cache_size_tokens")),
        prefix_caching=None if prefix is None else prefix.lower() == "true",
        labels=labels,
        problem=_refused(labels),
    )


def labelled_growth(
    before: MetricsSnapshot | None, after: MetricsSnapshot | None, names: tuple[str, ...], label: str = SOURCE_LABEL
) -> dict[str, float] | None:
    """A labelled counter's growth between two snapshots per value of `label` (e.g. `PROMPT_TOKENS_BY_SOURCE` by
    source), summed over its other labels (engines, merged endpoints); a series the first snapshot lacks grew from 0.
    None when either snapshot lacks the counter, or any series went back or went away (the two readings are not of
    one count). Samples without `label` are not read."""
    if before is None or after is None:
        return None
    name = next((n for n in names if n in before.samples and n in after.samples), None)
    if name is None:
        return None
    growth: dict[str, float] = {}
    for value in sorted({labels[label] for labels, _ in after.samples[name] + before.samples[name] if label in labels}):
        old, new = _series(before, name, label, value), _series(after, name, label, value)
        if not new.samples:
            return None  # the series went away
        if not old.samples:  # the series appeared since: it started at 0 (prometheus_client shows a labelled child
            old = MetricsSnapshot({name: [(labels, 0.0) for labels, _ in new.samples[name]]}, new.endpoints)
        grew, _why = counter_growth(old, new, (name,))
        if grew is None:
            return None
        growth[value] = grew
    return growth


def _series(snapshot: MetricsSnapshot, name: str, label: str, value: str) -> MetricsSnapshot:
    """The samples of `name` whose `label` is `value`, as a snapshot of their own (endpoints kept)."""
    kept = [(labels, v) for labels, v in snapshot.samples[name] if labels.get(label) == value]
    return MetricsSnapshot({name: kept} if kept else {}, snapshot.endpoints)


def cached_prompt_tokens(before: MetricsSnapshot | None, after: MetricsSnapshot | None) -> float | None:
    """Prompt tokens the server found cached between two snapshots: its GPU prefix cache's hits (`PREFIX_HITS`) plus
    a KV connector's external tier's (`EXTERNAL_HITS`, 0 where not exported); both count tokens, and vLLM's
    `vllm:prompt_tokens_cached_by_source` sums to them. None when the GPU counter is unknown or either went back."""
    local = delta(before, after, PREFIX_HITS)
    external, went_back = counter_growth(before, after, EXTERNAL_HITS)
    if local is None or went_back:
        return None
    return local + (external or 0.0)
