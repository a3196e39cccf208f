"""GuideLLM 0.8.1's and AIPerf 0.13.0's result files read into our records, on files the tools made themselves.

tests/fixtures/peers/guidellm-4rps.json and aiperf-4rps/: each tool at 4 req/s (Poisson), 24 requests of 64 prompt
and 16 output tokens, against the embedded vLLM (scripts/peer_fixtures_tools.py; the commands are in the README there).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pandas as pd
import pytest

from toolkit.base.errors import ResultsError
from toolkit.results.peers import aiperf, guidellm
from toolkit.results.peers.read import load_document
from toolkit.results.peers.step import PeerStep

PEERS = Path(__file__).resolve().parents[1] / "fixtures" / "peers"
GUIDELLM = PEERS / "guidellm-4rps.json"
AIPERF_RECORDS = PEERS / "aiperf-4rps" / "profile_export.jsonl"
AIPERF_AGGREGATE = PEERS / "aiperf-4rps" / "profile_export_aiperf.json"
FILES = [(guidellm, GUIDELLM), (aiperf, AIPERF_RECORDS), (aiperf, AIPERF_AGGREGATE)]
SOURCES = {GUIDELLM: "GuideLLM 0.8.1", AIPERF_RECORDS: "AIPerf 0.13.0", AIPERF_AGGREGATE: "AIPerf 0.13.0"}
REPRODUCED = [
    *[(guidellm, GUIDELLM, name) for name in ("ttft_p50_ms", "tpot_p50_ms", "output_tok_s", "request_throughput")],
    *[(aiperf, path, name) for path in (AIPERF_RECORDS, AIPERF_AGGREGATE) for name in ("ttft_p50_ms", "tpot_p50_ms")],
    *[(aiperf, AIPERF_RECORDS, name) for name in ("itl_p50_ms", "e2e_p50_ms", "output_tok_s", "request_throughput")],
]


def step_of(module: ModuleType, path: Path) -> PeerStep:
    step = module.read(path, load_document(path))
    assert step is not None
    return step


@pytest.mark.parametrize(("module", "path", "name"), REPRODUCED, ids=lambda value: getattr(value, "name", value))
def test_the_tools_own_figures_are_reproduced_from_their_request_data(
    module: ModuleType, path: Path, name: str
) -> None:
    step = step_of(module, path)
    reported, reproduced = step.reported[name], step.reproduced[name]
    assert reported is not None and reproduced is not None
    assert abs(reproduced / reported - 1) < 0.01, (name, reproduced, reported)


@pytest.mark.parametrize(("module", "path"), FILES, ids=lambda value: getattr(value, "name", value))
def test_every_request_is_a_complete_record(module: ModuleType, path: Path) -> None:
    step = step_of(module, path)
    records = step.records
    assert step.source == SOURCES[path] and step.offered_rate == 4.0 and step.model == "tiny-llama"
    assert records is not None and list(records["request"]) == list(range(24))
    assert records["error"].isna().all() and (records["output_tokens"] == 16).all()
    assert (records["input_tokens"] == 64).all()
    times = records[["scheduled_s", "sent_s", "first_token_s", "last_token_s"]]
    assert times.notna().all().all() and records["sent_s"].min() == 0.0 and records["sent_s"].is_monotonic_increasing
    assert (times["scheduled_s"] <= times["sent_s"]).all() and (times["sent_s"] < times["first_token_s"]).all()
    assert (times["first_token_s"] < times["last_token_s"]).all()


def test_guidellm_saves_no_chunk_times_and_gives_no_gap_itl() -> None:
    step = step_of(guidellm, GUIDELLM)
    assert step.records is not None and step.records["chunk_times_s"].isna().all()
    assert step.reported["itl_p50_ms"] is None and "itl_p50_ms" not in step.reproduced


def test_aiperf_chunks_run_from_the_first_token_to_the_last() -> None:
    records = step_of(aiperf, AIPERF_RECORDS).records
    assert records is not None
    for chunks, first, last in zip(
        records["chunk_times_s"], records["first_token_s"], records["last_token_s"], strict=True
    ):
        assert chunks[0] == first and chunks[-1] == pytest.approx(last, abs=1e-6) and chunks == sorted(chunks)


def test_aiperf_reads_the_same_run_from_either_export_file(tmp_path: Path) -> None:
    from_records, from_aggregate = step_of(aiperf, AIPERF_RECORDS), step_of(aiperf, AIPERF_AGGREGATE)
    assert from_records.records is not None and from_aggregate.records is not None
    pd.testing.assert_frame_equal(from_records.records, from_aggregate.records)
    assert from_records.reported == from_aggregate.reported and from_records.reproduced == from_aggregate.reproduced
    alone = tmp_path / AIPERF_AGGREGATE.name
    shutil.copyfile(AIPERF_AGGREGATE, alone)
    step = step_of(aiperf, alone)
    assert step.records is None and step.reproduced == {} and step.reported == from_records.reported


def copies(tmp_path: Path) -> tuple[Path, Path]:
    """AIPerf's two exports, copied where a test may damage them."""
    records, aggregate = tmp_path / AIPERF_RECORDS.name, tmp_path / AIPERF_AGGREGATE.name
    shutil.copyfile(AIPERF_RECORDS, records)
    shutil.copyfile(AIPERF_AGGREGATE, aggregate)
    return records, aggregate


def one_line(excinfo: pytest.ExceptionInfo[ResultsError]) -> str:
    message = str(excinfo.value)
    assert "\n" not in message
    return message


def test_a_cut_guidellm_file_is_one_line_naming_it(tmp_path: Path) -> None:
    cut = tmp_path / GUIDELLM.name
    cut.write_text(GUIDELLM.read_text()[:5000])
    with pytest.raises(ResultsError) as excinfo:
        load_document(cut)
    assert one_line(excinfo).startswith(f"{cut}:1: not JSON (")


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda data: data["benchmarks"][0]["requests"]["successful"][3]["info"].pop("timings"),
         "benchmarks[0].requests.successful[3] has no info.timings; the file is damaged"),
        (lambda data: data["benchmarks"].append(data["benchmarks"][0]),
         "holds 2 benchmarks; this reads a file of one (one rate per run)"),
        (lambda data: data["metadata"].update(version=1),
         "GuideLLM report schema version 1; this reads version 2 (GuideLLM 0.8.1)"),
    ],
    ids=["no timings", "a sweep", "another schema"],
)  # fmt: skip
def test_a_damaged_guidellm_file_is_one_line_naming_it(
    tmp_path: Path, damage: Callable[[dict[str, Any]], object], message: str
) -> None:
    data = json.loads(GUIDELLM.read_text())
    damage(data)
    path = tmp_path / GUIDELLM.name
    path.write_text(json.dumps(data))
    with pytest.raises(ResultsError) as excinfo:
        guidellm.read(path, load_document(path))
    assert one_line(excinfo) == f"{path}: {message}"


def damage_line(path: Path, number: int, text: str) -> None:
    lines = path.read_text().splitlines()
    lines[number - 1] = text
    path.write_text("\n".join(lines) + "\n")


def test_an_aiperf_line_that_is_not_json_is_one_line_naming_file_and_line(tmp_path: Path) -> None:
    records, aggregate = copies(tmp_path)
    damage_line(records, 5, '{"metadata": {"request_start_ns": 1')
    with pytest.raises(ResultsError) as excinfo:
        load_document(records)
    assert one_line(excinfo).startswith(f"{records}:5: not a JSON line (")
    with pytest.raises(ResultsError) as excinfo:
        aiperf.read(aggregate, load_document(aggregate))
    assert one_line(excinfo).startswith(f"{records}:5: not a JSON line (")


def test_an_aiperf_record_with_a_damaged_figure_is_one_line_naming_file_and_line(tmp_path: Path) -> None:
    records, _ = copies(tmp_path)
    value = json.loads(records.read_text().splitlines()[2])
    value["metrics"]["time_to_first_token"]["value"] = "fast"
    damage_line(records, 3, json.dumps(value))
    with pytest.raises(ResultsError) as excinfo:
        aiperf.read(records, load_document(records))
    assert one_line(excinfo).startswith(f"{records}:3: time_to_first_token is not a number in ms: ")


def test_a_cut_aiperf_aggregate_beside_the_records_is_one_line_naming_it(tmp_path: Path) -> None:
    records, aggregate = copies(tmp_path)
    aggregate.write_text(AIPERF_AGGREGATE.read_text()[:2000])
    with pytest.raises(ResultsError) as excinfo:
        aiperf.read(records, load_document(records))
    assert one_line(excinfo).startswith(f"{aggregate}:")
    assert "not JSON (" in one_line(excinfo)


@pytest.mark.parametrize(
    ("module", "path"),
    [(guidellm, AIPERF_RECORDS), (guidellm, AIPERF_AGGREGATE), (aiperf, GUIDELLM),
     (guidellm, PEERS / "vllm-bench-4rps.json"), (aiperf, PEERS / "vllm-bench-4rps.json")],
    ids=["guidellm-aiperf-jsonl", "guidellm-aiperf-json", "aiperf-guidellm", "guidellm-vllm", "aiperf-vllm"],
)  # fmt: skip
def test_another_tools_file_is_not_read(module: ModuleType, path: Path) -> None:
    assert module.read(path, load_document(path)) is None
