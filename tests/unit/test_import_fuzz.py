"""Fuzz of `import-results`' readers (issue 40): damaged vllm bench serve, GuideLLM and AIPerf files never raise out
of the toolkit, every refusal is one line naming the file, and whatever is accepted is finite and in range.

Each reader gets CASES files, seeded (tests/file_fuzz.py), made from the real files in tests/fixtures/peers cut to a
few requests so that a case costs milliseconds: a field replaced by a value of another type, NaN, an infinity, a
huge or negative number or deep nesting (two fields at times), or the whole text cut short, nested 200,000 deep or
made not UTF-8. A file is read as `import-results` reads it (`read_peer_result`), and every accepted one is
summarized as the import summarizes it (`step_row`).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.file_fuzz import damaged_text, damaged_value, each_case, one_line_refusal, paths, text_of
from toolkit.base.errors import ResultsError
from toolkit.rates.imported import step_row
from toolkit.results.limits import (
    MAX_DURATION_S,
    MAX_LATENCY_MS,
    MAX_RATE_RPS,
    MAX_REQUESTS,
    MAX_TEXT,
    MAX_TOKENS,
    MAX_TOKENS_PER_S,
)
from toolkit.results.peers import aiperf as aiperf_module
from toolkit.results.peers import vllm_bench as vllm_bench_module
from toolkit.results.peers.read import read_peer_result
from toolkit.results.peers.step import PeerStep

PEERS = Path(__file__).resolve().parents[1] / "fixtures" / "peers"
CASES = 1000  # per reader, in CHUNKS tests
CHUNKS = 4
REQUESTS = 4  # requests kept of each fixture
SUMMARIZED = 5  # one accepted file in five is summarized as the import summarizes it
TIMES = ("scheduled_s", "sent_s", "first_token_s", "last_token_s")


def vllm_bench() -> dict[str, Any]:
    data = json.loads((PEERS / "vllm-bench-4rps.json").read_text())
    read = {
        *vllm_bench_module.VLLM_REPORTED.values(),
        *vllm_bench_module.VLLM_DETAILED,
        "queue_times",
        "duration",
        "request_rate",
        "vllm_version",
        "model_id",
        "date",
        "burstiness",
    }  # and two fields it does not read
    kept = {key: value[:REQUESTS] if isinstance(value, list) else value for key, value in data.items() if key in read}
    return kept | {"completed": REQUESTS}


def guidellm() -> dict[str, Any]:
    data = json.loads((PEERS / "guidellm-4rps.json").read_text())
    bench = data["benchmarks"][0]
    statistics = ("mean", "percentiles")
    metrics = {name: {status: {k: v for k, v in summary.items() if k in statistics} for status, summary in
                      bench["metrics"][name].items() if status in ("successful", "total")}
               for name in ("time_to_first_token_ms", "inter_token_latency_ms", "request_latency",
                            "output_tokens_per_second", "requests_per_second")}  # fmt: skip
    for by_status in metrics.values():
        for summary in by_status.values():
            summary["percentiles"] = {q: summary["percentiles"][q] for q in ("p50", "p99")}
    saved = [{"info": {"timings": r["info"]["timings"], "error": r["info"]["error"]},
              "prompt_tokens": r["prompt_tokens"], "output_tokens": r["output_tokens"]}
             for r in bench["requests"]["successful"]]  # fmt: skip
    errored = {**saved[-1], "info": {**saved[-1]["info"], "error": "boom"}}
    return {"metadata": data["metadata"], "benchmarks": [{
        "type_": bench["type_"], "duration": bench["duration"],
        "config": {"strategy": bench["config"]["strategy"], "backend": {"model": "tiny-llama"}},
        "scheduler_metrics": {k: bench["scheduler_metrics"][k] for k in ("measure_start_time", "measure_end_time")},
        "metrics": {**metrics, "request_totals": bench["metrics"]["request_totals"]},
        "requests": {"successful": saved[: REQUESTS - 1], "errored": [errored], "incomplete": []}}]}  # fmt: skip


def aiperf() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    folder = PEERS / "aiperf-4rps"
    aggregate = json.loads((folder / "profile_export_aiperf.json").read_text())
    kept = ("aiperf_version", "output_token_throughput", "request_throughput", "time_to_first_token",
            "inter_token_latency", "inter_chunk_latency", "request_latency", "request_count", "benchmark_duration",
            "error_summary", "input_config", "start_time", "end_time")  # fmt: skip
    records = [json.loads(line) for line in (folder / "profile_export.jsonl").read_text().splitlines()[:REQUESTS]]
    metadata = ("request_start_ns", "credit_issued_ns", "benchmark_phase", "x_request_id")  # the last one unread
    metrics = (*aiperf_module.RECORD_UNITS, "inter_chunk_latency", "http_req_receiving")
    records = [{"metadata": {k: v for k, v in record["metadata"].items() if k in metadata},
                "metrics": {k: v for k, v in record["metrics"].items() if k in metrics},
                "error": record.get("error")} for record in records]  # fmt: skip
    return {key: aggregate[key] for key in kept}, records


VLLM, GUIDELLM, (AIPERF_AGGREGATE, AIPERF_RECORDS) = vllm_bench(), guidellm(), aiperf()


def limit(name: str) -> float:
    """The largest figure a step may report under `name` (our QUANTITIES)."""
    if name.endswith("_ms"):
        return MAX_LATENCY_MS
    return {"output_tok_s": MAX_TOKENS_PER_S, "request_throughput": MAX_RATE_RPS}.get(name, MAX_REQUESTS)


def finite_or_missing(values: pd.Series) -> bool:
    return bool(values.dropna().map(math.isfinite).all())


def assert_in_range(step: PeerStep, seed: int) -> None:
    """Everything an accepted file gave: finite and within its limit, and a row the import can write."""
    rate = step.offered_rate
    assert math.isnan(rate) or rate == math.inf or 0 < rate <= MAX_RATE_RPS, (seed, rate)
    for name, value in step.reported.items():
        assert value is None or (math.isfinite(value) and 0 <= value <= limit(name)), (seed, name, value)
    for name, value in step.reproduced.items():
        assert value is None or (math.isfinite(value) and value >= 0), (seed, name, value)
    assert step.duration_s is None or 0 <= step.duration_s <= MAX_DURATION_S, (seed, step.duration_s)
    assert step.model is None or (isinstance(step.model, str) and len(step.model) <= MAX_TEXT), seed
    if step.records is not None and len(step.records):
        records = step.records
        assert all(finite_or_missing(records[column]) for column in TIMES), seed
        assert records["sent_s"].min() == 0 and records["sent_s"].max() <= MAX_DURATION_S, seed
        assert records[list(TIMES)].abs().max().max() <= 3 * MAX_DURATION_S, seed
        assert records["input_tokens"].between(0, MAX_TOKENS).all(), seed
        assert records["output_tokens"].between(0, MAX_TOKENS).all(), seed
        chunks = [t for times in records["chunk_times_s"].dropna() for t in times]
        assert all(math.isfinite(t) for t in chunks), seed
        assert records["error"].dropna().map(lambda e: "\n" not in e).all(), seed
    if seed % SUMMARIZED == 0:  # what the import writes: figures finite or missing (pandas: 50 ms a step)
        _, row = step_row(0, step)
        assert all(not isinstance(v, float) or math.isfinite(v) or math.isnan(v) or k == "offered_rate"
                   for k, v in row.items()), (seed, row)  # fmt: skip


def read_or_refuse(path: Path, seed: int) -> bool:
    """Whether the file was read (and all it gave in range), after checking a refusal is one line naming it."""
    try:
        step = read_peer_result(path)
    except Exception as exc:  # any other kind is a bug: one_line_refusal says which
        one_line_refusal(exc, seed, str(path.parent))
        return False
    assert_in_range(step, seed)
    return True


def document_case(document: dict[str, Any], name: str, tmp_path: Path) -> Callable[[int, random.Random], bool]:
    places = paths(document)

    def case(seed: int, rng: random.Random) -> bool:
        path = tmp_path / name
        if rng.random() < 0.85:
            path.write_text(text_of(damaged_value(rng, document, places), rng))
        else:
            path.write_bytes(damaged_text(rng, json.dumps(document)))
        return read_or_refuse(path, seed)

    return case


def chunk(index: int) -> range:
    size = CASES // CHUNKS
    return range(index * size, (index + 1) * size)


def test_the_undamaged_files_read_whole(tmp_path: Path) -> None:
    for name, document in (("vllm.json", VLLM), ("benchmarks.json", GUIDELLM)):
        (tmp_path / name).write_text(json.dumps(document))
    (tmp_path / "profile_export_aiperf.json").write_text(json.dumps(AIPERF_AGGREGATE))
    (tmp_path / "profile_export.jsonl").write_text("".join(json.dumps(r) + "\n" for r in AIPERF_RECORDS))
    for name in ("vllm.json", "benchmarks.json", "profile_export.jsonl", "profile_export_aiperf.json"):
        step = read_peer_result(tmp_path / name)
        assert step.records is not None and len(step.records) == REQUESTS and step.offered_rate == 4.0, name
        assert_in_range(step, 0)


@pytest.mark.parametrize("part", range(CHUNKS))
def test_vllm_bench_files_damaged_every_way_are_read_or_refused_in_one_line(part: int, tmp_path: Path) -> None:
    each_case(chunk(part), document_case(VLLM, "vllm.json", tmp_path))


@pytest.mark.parametrize("part", range(CHUNKS))
def test_guidellm_files_damaged_every_way_are_read_or_refused_in_one_line(part: int, tmp_path: Path) -> None:
    each_case(chunk(part), document_case(GUIDELLM, "benchmarks.json", tmp_path))


@pytest.mark.parametrize("part", range(CHUNKS))
def test_aiperf_exports_damaged_every_way_are_read_or_refused_in_one_line(part: int, tmp_path: Path) -> None:
    aggregate_places = paths(AIPERF_AGGREGATE)
    records_places = [place for record in AIPERF_RECORDS for place in paths(record)]

    def case(seed: int, rng: random.Random) -> bool:
        folder = tmp_path / str(seed)
        folder.mkdir()
        aggregate, records = AIPERF_AGGREGATE, list(AIPERF_RECORDS)
        if rng.random() < 0.4:
            aggregate = damaged_value(rng, aggregate, aggregate_places)
        else:
            at = rng.randrange(len(records))
            records[at] = damaged_value(rng, records[at], records_places)
        (folder / "profile_export_aiperf.json").write_text(text_of(aggregate, rng))
        lines = "\n".join(text_of(record, rng) for record in records) + "\n"
        if rng.random() < 0.1:
            (folder / "profile_export.jsonl").write_bytes(damaged_text(rng, lines))
        else:
            (folder / "profile_export.jsonl").write_text(lines)
        return read_or_refuse(folder / rng.choice(("profile_export.jsonl", "profile_export_aiperf.json")), seed)

    each_case(chunk(part), case)


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [("request_rate", -4, "request_rate: -4 should be a rate above 0"),
     ("request_rate", math.nan, "request_rate: NaN should be a rate above 0"),
     ("median_ttft_ms", -5000, "median_ttft_ms: -5000 should be greater than or equal to 0"),
     ("median_tpot_ms", -6.7e10, "median_tpot_ms: -67000000000.0 should be greater than or equal to 0"),
     ("output_throughput", math.inf, "output_throughput: Infinity should be a finite number"),
     ("completed", 10**9, "completed: 1000000000 should be less than or equal to 100000000"),
     ("duration", "6.1", "duration: '6.1' should be a number"),
     ("ttfts", {"a": 1}, "ttfts: an object should be a list")],
    ids=["rate -4", "rate NaN", "TTFT -5000 ms", "TPOT -6.7e10 ms", "infinite throughput", "1e9 completed",
         "a string", "a dict"],
)  # fmt: skip
def test_implausible_vllm_bench_figures_are_refused_naming_file_line_and_field(
    field: str, value: Any, said: str, tmp_path: Path
) -> None:
    path = tmp_path / "vllm.json"
    path.write_text(json.dumps({**VLLM, field: value}))
    with pytest.raises(ResultsError) as raised:
        read_peer_result(path)
    assert str(raised.value).startswith(f"{path}:1: {said}")


def test_a_figure_of_a_pretty_printed_file_is_named_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "benchmarks.json"
    damaged = json.loads(json.dumps(GUIDELLM))
    damaged["benchmarks"][0]["requests"]["successful"][1]["info"]["timings"]["request_end"] = "later"
    text = json.dumps(damaged, indent=2)
    path.write_text(text)
    line = next(i for i, text_line in enumerate(text.splitlines(), 1) if '"later"' in text_line)
    with pytest.raises(ResultsError) as raised:
        read_peer_result(path)
    assert str(raised.value) == (f"{path}:{line}: benchmarks[0].requests.successful[1].info.timings.request_end: "
                                 "'later' should be a number")  # fmt: skip


@pytest.mark.parametrize("text", ["[" * 200_000, '{"completed": ' * 100_000, "[" + "1" * 5000 + "]"],
                         ids=["200,000 nested lists", "100,000 nested objects", "a 5,000-digit number"])  # fmt: skip
def test_a_file_nested_too_deep_or_a_number_too_long_is_refused_in_one_line(text: str, tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text(text)
    with pytest.raises(ResultsError) as raised:
        read_peer_result(path)
    assert str(raised.value).startswith(f"{path}:1: not JSON (")
    assert "nested deeper than a JSON reader follows" in str(raised.value) or "more digits" in str(raised.value)
