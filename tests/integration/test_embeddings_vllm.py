"""An embeddings rate sweep against the real embedded vLLM serving `tiny-embedding` (issue 46): two rates of
batches of 4 inputs; the server's prompt-token counter agrees with what its replies counted."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from toolkit.rates.files import read_records, read_steps
from toolkit.rates.params import make_rate_params
from toolkit.rates.runner import run_rates
from toolkit.servers.embedded.server import EmbeddedServer

RATES = [5.0, 20.0]
BATCH, TOKENS, REQUESTS = 4, 64, 20


def test_an_embeddings_sweep_counts_its_inputs_and_agrees_with_the_server_counter(
    embedding_server: EmbeddedServer, tmp_path: Path
) -> None:
    params = make_rate_params({
        "base_url": embedding_server.base_url, "endpoint": "embeddings", "batch_size": BATCH, "rates": RATES,
        "arrival": "constant", "requests_per_step": REQUESTS, "input_tokens": TOKENS, "slo_e2e_ms": 1000,
        "results_dir": str(tmp_path),
    })  # fmt: skip
    lines: list[str] = []
    out = run_rates(params, say=lines.append)
    print("\n".join(lines))  # the sweep's figures, for the record (run with -s)
    steps = {row["offered_rate"]: row for row in read_steps(out)}
    assert sorted(steps) == RATES
    for row in steps.values():
        assert row["failed"] == 0 and row["items"] == BATCH * REQUESTS and row["items_s"] > 0
        assert row["input_tok_s"] > 0 and row["input_tokens"] == row["client_prompt_tokens"]
        # cold inputs of 64 tokens each, as the server's tokenizer counts them (the prefixes' digits vary a little)
        assert row["input_tokens"] == pytest.approx(BATCH * REQUESTS * TOKENS, rel=0.05)
        assert row["server_prompt_tokens"] == pytest.approx(row["client_prompt_tokens"], rel=0.02)
        assert 0 < row["e2e_p50_ms"] <= row["e2e_p90_ms"] and row["e2e_sched_p50_ms"] >= row["e2e_p50_ms"]
        assert row["e2e_p50_low_ms"] is not None
        assert all(row[f"{name}_p50_ms"] is None for name in ("ttft", "tpot", "itl", "ttft_sched"))
        assert row["server_generation_tokens"] == 0
    records = read_records(out)
    assert (records["items"] == BATCH).all() and records["first_token_s"].isna().all()
    assert not math.isnan(records["last_token_s"].min())
