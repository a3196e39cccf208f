"""Conversation workloads against the fault server: each turn re-sends the history, failures end a conversation,
warm-up turns stay out of the summary, a cold control repeats the step's lengths and times."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.faultserver import FaultServer
from toolkit.params import ParamsError
from toolkit.rates.files import read_records, read_steps
from toolkit.rates.params import make_rate_params
from toolkit.rates.runner import run_rates

pytestmark = pytest.mark.component


def talk(server: FaultServer, tmp_path: Path, **values: Any) -> Path:
    base = {"base_url": server.base_url, "requests_per_step": 4, "rates": [20], "input_tokens": 30,
            "output_tokens": 5, "workload": "conversation", "turns": 3, "endpoint": "completions",
            "results_dir": str(tmp_path / "run")}  # fmt: skip
    return run_rates(make_rate_params(base | values), say=lambda line: None)


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_each_turn_sends_the_history_with_the_replies_the_server_returned(tmp_path: Path, endpoint: str) -> None:
    with FaultServer(token_interval_s=0.002) as server:
        out = talk(server, tmp_path, endpoint=endpoint, think_time_s=0.05)
        asked = [e["prompt"] for e in server.completion_requests()]
    records = read_records(out).sort_values("request")
    assert list(records["turn"]) == [1, 2, 3] * 4 and records["error"].isna().all()
    prompts = [p if isinstance(p, str) else " | ".join(m["content"] for m in p) for p in asked]
    for conversation in range(4):
        mine = [p for p in prompts if f"request {conversation:06d}]" in p]
        assert len(mine) == 3  # the first turn's marker stays at the head of every later turn
        assert mine[0] in mine[1] and mine[1] in mine[2]
        assert " tok tok tok tok tok" in mine[1]  # the reply the server returned is part of the history
    if endpoint == "chat":
        last = [p for p in asked if isinstance(p, list) and len(p) == 5]
        assert len(last) == 4 and [m["role"] for m in last[0]] == ["user", "assistant"] * 2 + ["user"]
    by_turn = records.set_index(["request"])
    for first in range(0, 12, 3):
        one, two = by_turn.loc[first], by_turn.loc[first + 1]
        assert two["history_tokens"] == one["input_tokens"] + one["output_tokens"]
        assert two["scheduled_s"] >= one["last_token_s"] + 0.05  # due a think time after the reply ended
    assert list(records["warmup"]) == [True, False, False] * 4
    (row,) = read_steps(out)
    assert row["workload"] == "conversation" and row["requests"] == 12 and row["warmup_requests"] == 4
    assert row["steady_requests"] <= 8  # the first turns are kept in the records but not summed


def test_a_failed_turn_ends_its_conversation_and_the_others_go_on(tmp_path: Path) -> None:
    with FaultServer(token_interval_s=0.002) as server:
        server.set_fault("500", after=5, times=1)
        out = talk(server, tmp_path, rates=[4])
    records = read_records(out)
    failed = records[records["error"].notna()]
    assert len(failed) == 1 and "500" in failed["error"].iloc[0]
    conversation, turn = divmod(int(failed["request"].iloc[0]), 3)
    theirs = records[records["request"] // 3 == conversation]
    assert theirs["turn"].max() == turn + 1  # nothing sent after the failed turn
    others = records[records["request"] // 3 != conversation]
    assert len(others) == 9 and others["error"].isna().all()


def test_max_in_flight_is_users_holding_a_conversation_each(tmp_path: Path) -> None:
    with FaultServer(token_interval_s=0.01) as server:
        out = talk(server, tmp_path, rates=["inf"], max_in_flight=2)
    records = read_records(out)
    spans = records.groupby(records["request"] // 3).agg(start=("sent_s", "min"), end=("last_token_s", "max"))
    at_once = [((spans["start"] <= t) & (spans["end"] > t)).sum() for t in spans["start"]]
    assert max(at_once) == 2 and len(spans) == 4


def test_a_cold_control_repeats_the_lengths_and_times_without_the_history(tmp_path: Path) -> None:
    with FaultServer(token_interval_s=0.002) as server:
        out = talk(server, tmp_path, cold_control=True)
        asked = [e["prompt"] for e in server.completion_requests()]
    rows = read_steps(out)
    assert [(r["step"], r["workload"], r["control_of"]) for r in rows] == [
        (0, "conversation", None), (1, "cold-control", 0)]  # fmt: skip
    records = read_records(out)
    talked, control = records[records["step"] == 0], records[records["step"] == 1]
    assert sorted(talked["input_tokens"]) == sorted(control["input_tokens"])
    assert sorted(talked["turn"]) == sorted(control["turn"])
    assert sorted(talked["scheduled_s"].round(6)) == sorted(control["scheduled_s"].round(6))
    assert all("step 001 request" in p for p in asked[12:])  # cold: each its own prefix, no history
    assert rows[1]["expected_hit_rate"] == 0.0


def test_conversation_options_apply_to_conversations_only() -> None:
    with pytest.raises(ParamsError, match="turns, think_time_s: apply to workload conversation only"):
        make_rate_params({"turns": 3, "think_time_s": 1})
    with pytest.raises(ParamsError, match="conversation needs turns"):
        make_rate_params({"workload": "conversation"})
    with pytest.raises(ParamsError, match="takes no replay, trace or ray_address"):
        make_rate_params({"workload": "conversation", "turns": 2, "trace": "t.jsonl", "trace_format": "mooncake"})


def test_old_sweeps_without_turns_read_as_single_turns(tmp_path: Path) -> None:
    with FaultServer(token_interval_s=0.002) as server:
        out = talk(server, tmp_path, workload=None, turns=None)
    path = out / "rates" / "step-000.parquet"
    pd.read_parquet(path).drop(columns=["turn", "history_tokens", "cached_tokens", "warmup"]).to_parquet(path)
    records = read_records(out)
    assert (records["turn"] == 1).all() and not records["warmup"].any() and records["cached_tokens"].isna().all()


def test_sharegpt_conversations_are_sent_turn_by_turn(tmp_path: Path) -> None:
    sharegpt = Path(__file__).parents[1] / "fixtures" / "rates" / "sharegpt.json"
    with FaultServer(token_interval_s=0.002) as server:
        out = talk(server, tmp_path, dataset=str(sharegpt), endpoint="chat", requests_per_step=2, turns=5)
        asked = [e["prompt"] for e in server.completion_requests()]
    records = read_records(out)
    # entries a1 (one human turn) and a3 (two), in the seeded order; a2 has no reply and is skipped, as by vllm
    assert sorted(records["turn"]) == [1, 1, 2] and records["error"].isna().all()
    (second,) = [m for m in asked if len(m) == 3]
    assert [m["role"] for m in second] == ["user", "assistant", "user"]
    assert second[0]["content"].endswith("Name three prime numbers.") and second[2]["content"] == "And three more?"
    assert second[1]["content"] == " tok tok tok tok tok"  # the server's reply, not the dataset's


def test_think_times_drawn_per_turn(tmp_path: Path) -> None:
    with FaultServer(token_interval_s=0.002) as server:
        out = talk(server, tmp_path, think_time_s=0.05, think_time_dist="exponential")
    records = read_records(out).sort_values("request").reset_index(drop=True)
    later = records[records["turn"] > 1]
    waits = [float(later.loc[i, "scheduled_s"] - records.loc[i - 1, "last_token_s"]) for i in later.index]
    assert all(w >= 0 for w in waits) and len({round(w, 4) for w in waits}) == len(waits)  # drawn, not one value
    with pytest.raises(ParamsError, match="think_time_dist: exponential needs think_time_s"):
        make_rate_params({"workload": "conversation", "turns": 2, "think_time_dist": "exponential"})


def test_a_stop_before_a_cold_control_resumes_with_that_control(tmp_path: Path) -> None:
    with FaultServer(token_interval_s=0.002) as server:
        out = talk(server, tmp_path, rates=[20, 40], cold_control=True)
        steps = out / "rates" / "steps.jsonl"
        steps.write_text(steps.read_text().splitlines()[0] + "\n")  # stopped after step 0, before its control
        for later in (1, 2, 3):
            (out / "rates" / f"step-{later:03d}.parquet").unlink()
        base = {"base_url": server.base_url, "requests_per_step": 4, "rates": [20, 40], "input_tokens": 30,
                "output_tokens": 5, "workload": "conversation", "turns": 3, "endpoint": "completions",
                "cold_control": True, "results_dir": str(out)}  # fmt: skip
        run_rates(make_rate_params(base), say=lambda line: None, resume=True)
    rows = read_steps(out)
    assert [(r["step"], r["workload"], r["control_of"], r["offered_rate"]) for r in rows] == [
        (0, "conversation", None, 20), (1, "cold-control", 0, 20), (2, "conversation", None, 40),
        (3, "cold-control", 2, 40)]  # fmt: skip
    records = read_records(out)
    lengths = {step: sorted(records[records["step"] == step]["input_tokens"]) for step in (0, 1)}
    assert lengths[0] == lengths[1]  # the control from step 0's stored records
