"""Conversations and a Mooncake trace against the real embedded vLLM (issue 30, must show): later turns find their
history in the prefix cache and start sooner than the same prompts sent cold, side by side in one run; requests
of a trace that share hash_ids hit the cache."""

from __future__ import annotations

from pathlib import Path

from toolkit.rates.files import read_records, read_steps
from toolkit.rates.params import make_rate_params
from toolkit.rates.runner import run_rates
from toolkit.servers.embedded.server import EmbeddedServer

TRACE = Path(__file__).parents[1] / "fixtures" / "traces" / "mooncake.jsonl"


def test_later_turns_hit_their_history_and_start_sooner_than_cold(
    constrained_server: EmbeddedServer, tmp_path: Path
) -> None:
    """6 conversations of 3 turns (new messages of 400 tokens, replies of 32), then the same prompt lengths at the
    same times, cold: turn 3 sends ~900 tokens of history, 7 whole blocks of 128 the cache should hold."""
    params = make_rate_params({
        "base_url": constrained_server.base_url, "endpoint": "completions", "rates": [1.0], "arrival": "constant",
        "requests_per_step": 6, "input_tokens": 400, "output_tokens": 32, "workload": "conversation", "turns": 3,
        "cold_control": True, "results_dir": str(tmp_path),
    })  # fmt: skip
    lines: list[str] = []
    out = run_rates(params, say=lines.append)
    talked, control = read_steps(out)
    records = read_records(out)
    ours, cold = records[records["step"] == 0], records[records["step"] == 1]
    later = ours[ours["turn"] > 1]
    ttft = lambda frame, turn: float(((frame["first_token_s"] - frame["sent_s"])[frame["turn"] == turn]).median())  # noqa: E731
    print("\n".join(lines), talked["prefix_cache_hit_rate"], talked["expected_hit_rate"],
          {t: (ttft(ours, t), ttft(cold, t)) for t in (1, 2, 3)})  # fmt: skip
    assert talked["completed"] == 18 and control["completed"] == 18 and control["workload"] == "cold-control"
    # per request, from the replies' usage: later turns found more than half of their prompt cached
    assert later["cached_tokens"].sum() / later["input_tokens"].sum() > 0.5
    assert ours.loc[ours["turn"] == 1, "cached_tokens"].fillna(0).sum() == 0  # first turns are cold
    # per step, from the server's counters, beside the construction's expectation
    assert abs(talked["prefix_cache_hit_rate"] - talked["expected_hit_rate"]) <= 0.10, talked
    assert control["prefix_cache_hit_rate"] is not None and control["prefix_cache_hit_rate"] < 0.05
    assert ttft(ours, 3) < ttft(cold, 3)  # the same prompt length, its history cached against cold


def test_a_mooncake_trace_shares_its_hash_blocks_in_the_cache(
    constrained_server: EmbeddedServer, tmp_path: Path
) -> None:
    params = make_rate_params({
        "base_url": constrained_server.base_url, "endpoint": "completions", "trace": str(TRACE),
        "trace_format": "mooncake", "results_dir": str(tmp_path),
    })  # fmt: skip
    lines: list[str] = []
    (row,) = read_steps(run_rates(params, say=lines.append))
    print("\n".join(lines), row["prefix_cache_hit_rate"], row["expected_hit_rate"])
    assert row["completed"] == 12 and row["lag_p99_ms"] < 50
    assert row["expected_hit_rate"] > 0.3  # 7 of 12 requests repeat blocks of 512 tokens sent before them
    assert abs(row["prefix_cache_hit_rate"] - row["expected_hit_rate"]) <= 0.10, row
    records = read_records(tmp_path).sort_values("scheduled_s")
    repeated = records.iloc[[3, 9]]  # requests 0 and 1 sent these blocks
    assert (repeated["cached_tokens"] >= 1024).all()
