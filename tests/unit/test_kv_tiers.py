"""KV tiers (issue 45): a KV connector's external tier beside the GPU prefix cache, from two `/metrics` scrapes.

The names and labels are vLLM 0.32's (v1/metrics/loggers.py): `vllm:external_prefix_cache_queries/hits` (tokens,
like the GPU cache's), `vllm:prompt_tokens_by_source{source=local_compute|local_cache_hit|external_kv_transfer}`.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from toolkit.base.errors import RateSweepError
from toolkit.matrix.prometheus import (
    PROMPT_TOKENS_BY_SOURCE,
    USED_FAMILIES,
    cached_prompt_tokens,
    labelled_growth,
    merge_snapshots,
    parse_metrics,
    used_lines,
)
from toolkit.matrix.sampler import Samples
from toolkit.rates.step import server_figures
from toolkit.reports.number_format import MISSING
from toolkit.reports.rate_tables import HITS_COLUMN, steps_table
from toolkit.reports.workload_views import CACHE_COLUMNS, EXTERNAL_COLUMN, cache_shown, cache_table
from toolkit.results.step_row import SweepStep, validated_step

SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")


def scrape(
    local: tuple[float, float] = (0, 0),
    external: tuple[float, float] | None = None,
    by_source: dict[str, float] | None = None,
    engines: int = 1,
) -> str:
    """A vLLM /metrics text: GPU prefix cache (queries, hits), the external tier's (None: no such family, as before
    vLLM had it) and prompt tokens by source, each split evenly over `engines` engines like a DP server's."""
    lines: list[str] = []

    def counter(name: str, value: float, extra: str = "") -> None:
        lines.extend(f'{name}{{engine="{e}",model_name="m"{extra}}} {value / engines}' for e in range(engines))

    lines += ["# HELP vllm:num_requests_running x", "# TYPE vllm:num_requests_running gauge"]
    counter("vllm:num_requests_running", 0)
    for name, value in zip(("queries", "hits"), local, strict=True):
        lines += [f"# HELP vllm:prefix_cache_{name}_total x", f"# TYPE vllm:prefix_cache_{name}_total counter"]
        counter(f"vllm:prefix_cache_{name}_total", value)
    if external is not None:
        for name, value in zip(("queries", "hits"), external, strict=True):
            lines += [f"# HELP vllm:external_prefix_cache_{name}_total x",
                      f"# TYPE vllm:external_prefix_cache_{name}_total counter"]  # fmt: skip
            counter(f"vllm:external_prefix_cache_{name}_total", value)
    if by_source is not None:
        lines += ["# HELP vllm:prompt_tokens_by_source_total x", "# TYPE vllm:prompt_tokens_by_source_total counter"]
        for source, value in by_source.items():
            counter("vllm:prompt_tokens_by_source_total", value, f',source="{source}"')
    return "\n".join(lines) + "\n"


def figures(before: str | None, after: str | None) -> dict[str, Any]:
    parsed = [None if text is None else parse_metrics(text) for text in (before, after)]
    return server_figures(Samples(), 0.0, 1.0, *parsed)


# ---- the per-source deltas -------------------------------------------------------------------------------------


def test_prompt_tokens_by_source_grow_per_source_summed_over_engines() -> None:
    before = parse_metrics(scrape(by_source=dict(zip(SOURCES, (100, 40, 0), strict=True)), engines=2))
    after = parse_metrics(scrape(by_source=dict(zip(SOURCES, (160, 240, 96), strict=True)), engines=2))
    assert labelled_growth(before, after, PROMPT_TOKENS_BY_SOURCE) == {
        "external_kv_transfer": 96.0, "local_cache_hit": 200.0, "local_compute": 60.0}  # fmt: skip
    assert labelled_growth(after, after, PROMPT_TOKENS_BY_SOURCE) == dict.fromkeys(SOURCES, 0.0)
    # The lines survive the cut to the families read (`used_lines`), and the _created ones come along.
    assert any(family.startswith("vllm:prompt_tokens_by_source") for family in USED_FAMILIES)
    assert "vllm:external_prefix_cache_hits_total" in used_lines(scrape(external=(5, 1)))


def test_absent_missing_or_broken_by_source_counters_give_none() -> None:
    full = parse_metrics(scrape(by_source=dict.fromkeys(SOURCES, 10.0)))
    bare = parse_metrics(scrape())  # an older vLLM: no such family
    assert labelled_growth(bare, bare, PROMPT_TOKENS_BY_SOURCE) is None
    assert labelled_growth(bare, full, PROMPT_TOKENS_BY_SOURCE) is None
    assert labelled_growth(None, full, PROMPT_TOKENS_BY_SOURCE) is None
    went_back = parse_metrics(scrape(by_source={**dict.fromkeys(SOURCES, 10.0), "local_compute": 4.0}))
    assert labelled_growth(full, went_back, PROMPT_TOKENS_BY_SOURCE) is None
    gone = parse_metrics(scrape(by_source={"local_compute": 30.0, "local_cache_hit": 10.0}))
    assert labelled_growth(full, gone, PROMPT_TOKENS_BY_SOURCE) is None
    # A source first shown after the first scrape grew from 0.
    fewer = parse_metrics(scrape(by_source={"local_compute": 10.0}))
    grown = labelled_growth(fewer, full, PROMPT_TOKENS_BY_SOURCE)
    assert grown == {"local_compute": 0.0, "local_cache_hit": 10.0, "external_kv_transfer": 10.0}


def test_by_source_across_merged_endpoints_sums_and_sees_one_that_restarted() -> None:
    one = parse_metrics(scrape(by_source={"local_compute": 50.0, "external_kv_transfer": 5.0}))
    two = parse_metrics(scrape(by_source={"local_compute": 70.0, "external_kv_transfer": 25.0}))
    before, after = merge_snapshots([one, one]), merge_snapshots([two, two])
    assert labelled_growth(before, after, PROMPT_TOKENS_BY_SOURCE) == {
        "external_kv_transfer": 40.0, "local_compute": 40.0}  # fmt: skip
    # One replica restarted (its counter went back) while the other grew more: the sum hides it, the parts do not.
    big = parse_metrics(scrape(by_source={"local_compute": 200.0, "external_kv_transfer": 5.0}))
    restarted = parse_metrics(scrape(by_source={"local_compute": 1.0, "external_kv_transfer": 5.0}))
    assert labelled_growth(before, merge_snapshots([big, restarted]), PROMPT_TOKENS_BY_SOURCE) is None


# ---- a rate step's figures -------------------------------------------------------------------------------------


def test_a_step_has_the_external_hit_rate_beside_the_gpu_one_and_tokens_by_source() -> None:
    before = scrape((1000, 100), (900, 0), dict(zip(SOURCES, (900, 100, 0), strict=True)), engines=2)
    after = scrape((3000, 600), (2500, 400), dict(zip(SOURCES, (2100, 600, 400), strict=True)), engines=2)
    row = figures(before, after)
    assert row["prefix_cache_hit_rate"] == pytest.approx(500 / 2000)
    assert row["external_prefix_cache_hit_rate"] == pytest.approx(400 / 1600)  # of what the GPU cache missed
    assert row["prompt_tokens_by_source"] == {"external_kv_transfer": 400, "local_cache_hit": 500,
                                              "local_compute": 1200}  # fmt: skip
    assert all(type(v) is int for v in row["prompt_tokens_by_source"].values())


def test_no_connector_or_no_family_leaves_the_external_figures_none() -> None:
    no_query = figures(scrape((100, 0), (0, 0)), scrape((400, 100), (0, 0)))  # the family, at 0: no connector
    assert no_query["prefix_cache_hit_rate"] == pytest.approx(1 / 3)
    assert no_query["external_prefix_cache_hit_rate"] is None and no_query["prompt_tokens_by_source"] is None
    absent = figures(scrape((100, 0)), scrape((400, 100)))
    assert absent["external_prefix_cache_hit_rate"] is None and absent["prompt_tokens_by_source"] is None
    unscraped = figures(None, None)
    assert unscraped["prefix_cache_hit_rate"] is None and unscraped["external_prefix_cache_hit_rate"] is None
    assert unscraped["prompt_tokens_by_source"] is None
    went_back = figures(scrape((100, 0), (500, 300)), scrape((400, 100), (600, 20)))
    assert went_back["external_prefix_cache_hit_rate"] is None


# ---- the cold-prefill check counts both tiers ------------------------------------------------------------------


def test_cached_prompt_tokens_add_the_external_tiers_hits() -> None:
    assert cached_prompt_tokens(parse_metrics(scrape((0, 0), (0, 0))), parse_metrics(scrape((64, 0), (64, 48)))) == 48
    assert cached_prompt_tokens(parse_metrics(scrape((0, 0), (0, 0))), parse_metrics(scrape((64, 16), (48, 32)))) == 48
    assert cached_prompt_tokens(parse_metrics(scrape((0, 0))), parse_metrics(scrape((64, 16)))) == 16  # no family
    assert cached_prompt_tokens(parse_metrics(scrape((0, 0))), parse_metrics(scrape((64, 0)))) == 0
    # Unknown when the GPU counter is, or when either went back (the prefill falls back to the reply's usage).
    assert cached_prompt_tokens(None, parse_metrics(scrape((64, 0)))) is None
    assert cached_prompt_tokens(parse_metrics(scrape((0, 0), (9, 9))), parse_metrics(scrape((64, 0), (0, 0)))) is None
    assert cached_prompt_tokens(parse_metrics(scrape((0, 9))), parse_metrics(scrape((64, 0)))) is None


# ---- steps.jsonl -----------------------------------------------------------------------------------------------


def where(loc: Any) -> str:
    return "steps.jsonl:1"


STEP = {"step": 0, "offered_rate": 5.0, "searched": False, "requests": 10, "slo_fraction": 1.0}


def test_the_step_validator_takes_the_external_figures_and_refuses_what_no_server_counts() -> None:
    by_source = {"local_compute": 1200, "local_cache_hit": 500, "external_kv_transfer": 0}
    line = {
        **STEP,
        "prefix_cache_hit_rate": 0.25,
        "external_prefix_cache_hit_rate": 0.5,
        "prompt_tokens_by_source": by_source,
    }
    row = validated_step(line, where, SweepStep)
    assert row.external_prefix_cache_hit_rate == 0.5 and row.prompt_tokens_by_source == by_source
    validated_step({**line, "external_prefix_cache_hit_rate": None, "prompt_tokens_by_source": None}, where, SweepStep)
    validated_step(STEP, where, SweepStep)  # a line from before them
    rates: tuple[tuple[Any, str], ...] = ((1.5, "less than or equal to 1"), (-0.1, "greater than or equal to 0"),
                                          ("half", "should be a number"))  # fmt: skip
    for value, problem in rates:
        with pytest.raises(RateSweepError, match=rf"^steps\.jsonl:1: external_prefix_cache_hit_rate: .*{problem}"):
            validated_step({**line, "external_prefix_cache_hit_rate": value}, where, SweepStep)
    bad: tuple[Any, ...] = ({"local_compute": -1}, {"local_compute": 1.5}, {"local_compute": 12.0},
                            {"local_compute": True}, {"local_compute": 10**14}, {"": 3}, {"x" * 101: 3}, [1, 2],
                            "many", {f"s{i}": 1 for i in range(101)})  # fmt: skip
    for value in bad:
        with pytest.raises(RateSweepError, match=r"^steps\.jsonl:1: prompt_tokens_by_source"):
            validated_step({**line, "prompt_tokens_by_source": value}, where, SweepStep)


# ---- the views -------------------------------------------------------------------------------------------------


def _steps(external: list[float | None]) -> tuple[pd.DataFrame, pd.DataFrame]:
    steps = pd.DataFrame([{"step": i, "offered_rate": 2.0, "workload": "shared-prefix", "prefix_cache_hit_rate": 0.5,
                           "expected_hit_rate": 0.6, "external_prefix_cache_hit_rate": rate, "warmup_requests": 0}
                          for i, rate in enumerate(external)])  # fmt: skip
    records = pd.DataFrame({"step": [0, 1], "output_tokens": [8, 8], "cached_tokens": [None, None],
                            "input_tokens": [100, 100]})  # fmt: skip
    return steps, records


def test_the_cache_table_shows_the_external_hit_rate_beside_the_servers_only_when_a_step_has_one() -> None:
    steps, records = _steps([None, 0.25])
    table = cache_table(steps, records)
    columns = list(CACHE_COLUMNS)
    assert list(table) == [*columns[:4], EXTERNAL_COLUMN, *columns[4:]]
    shown = cache_shown(steps, records)
    assert shown[["server hit rate", EXTERNAL_COLUMN]].values.tolist() == [["50.0%", MISSING], ["50.0%", "25.0%"]]
    nothing: list[list[float | None]] = [[None, None], [float("nan"), float("nan")]]
    for none in nothing:  # NaN: a folder's step without the field
        steps, records = _steps(none)
        assert list(cache_table(steps, records)) == columns and EXTERNAL_COLUMN not in cache_shown(steps, records)
    bare = steps.drop(columns="external_prefix_cache_hit_rate")  # a folder from before the field
    assert list(cache_table(bare, records)) == columns


def test_the_steps_table_adds_the_external_hit_rate_where_a_step_has_one() -> None:
    row = {"offered_rate": 2.0, "achieved_rate": 2.0, "completed": 24, "failed": 0, "output_tok_s": 30.0,
           "ttft_p50_ms": 40.0, "ttft_p99_ms": None, "tpot_p50_ms": 5.0, "tpot_p99_ms": None, "goodput": 2.0,
           "slo_fraction": 1.0, "slo_met": True, "lag_p99_ms": 1.0, "server_waiting_mean": 0.0,
           "server_waiting_max": 0, "prefix_cache_hit_rate": 0.62, "expected_hit_rate": 0.667}  # fmt: skip
    table = steps_table(pd.DataFrame([{**row, "step": 0, "external_prefix_cache_hit_rate": 0.2},
                                      {**row, "step": 1, "external_prefix_cache_hit_rate": None}]))  # fmt: skip
    assert table[HITS_COLUMN].tolist() == ["62.0% (66.7%), external 20.0%", "62.0% (66.7%)"]
