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


MATRIX_LENGTHS, MATRIX_LEVELS, MATRIX_BATCH = [64, 256], [1, 4], 2


def test_an_embeddings_matrix_measures_lengths_by_concurrency_and_agrees_with_the_server_counter(
    embedding_server: EmbeddedServer, tmp_path: Path
) -> None:
    from toolkit.matrix.runner import run_matrix
    from toolkit.params import make_params

    params = make_params({
        "base_url": embedding_server.base_url, "endpoint": "embeddings", "batch_size": MATRIX_BATCH,
        "contexts": MATRIX_LENGTHS, "concurrency": MATRIX_LEVELS, "duration_s": 2.0, "control_window_s": 0,
    })  # fmt: skip
    cells = {(m.context_tokens, m.concurrency): m for m in run_matrix(params, tmp_path, progress=False)}
    for m in cells.values():
        print(
            f"{m.context} ×{m.concurrency}: {m.status} {m.items_s:.1f} ± {m.items_s_ci:.1f} items/s, "
            f"{m.input_tok_s:.0f} ± {m.input_tok_s_ci:.0f} input tok/s, e2e p50 {m.e2e_p50_ms:.1f} ms "
            f"[{m.e2e_p50_low_ms:.1f}, {m.e2e_p50_high_ms:.1f}], server {m.server_prompt_tokens} / client "
            f"{m.client_prompt_tokens} prompt tokens"
        )  # the figures, for the record (run with -s)
    assert sorted(cells) == [(n, c) for n in MATRIX_LENGTHS for c in MATRIX_LEVELS]
    for (length, _level), m in cells.items():
        assert m.phase == "embeddings" and m.status in ("Valid", "Requests queued") and m.error is None
        assert m.batch_size == MATRIX_BATCH and m.completed is not None and m.completed >= 3
        assert m.items_s is not None and m.items_s > 0 and m.items_s_ci is not None and m.sub_windows == 2  # halves
        assert m.input_tok_s == pytest.approx(m.items_s * length, rel=0.05)  # each input about `length` tokens
        assert m.input_tok_s_ci is not None and m.input_tok_s_ci >= 0
        assert m.e2e_p50_ms is not None and m.e2e_p50_low_ms is not None and m.e2e_p50_high_ms is not None
        assert m.e2e_p50_low_ms <= m.e2e_p50_ms <= m.e2e_p50_high_ms
        assert m.client_prompt_tokens is not None and m.server_prompt_tokens is not None
        assert m.server_prompt_tokens == pytest.approx(m.client_prompt_tokens, rel=0.02) and m.metrics_problem is None


def test_a_generation_matrix_against_the_embedding_server_is_refused_in_one_line(
    embedding_server: EmbeddedServer, tmp_path: Path
) -> None:
    from toolkit.base.errors import ParamsError
    from toolkit.matrix.runner import run_matrix
    from toolkit.params import make_params

    params = make_params({"base_url": embedding_server.base_url, "contexts": [64], "concurrency": [1],
                          "max_output": 8, "duration_s": 1.0})  # fmt: skip
    with pytest.raises(ParamsError, match=r"^endpoint: chat: .* serves embeddings only \(/v1/chat/completions "
                                          r"answers 404\); measure it with endpoint embeddings"):  # fmt: skip
        run_matrix(params, tmp_path / "out", progress=False)
    assert not (tmp_path / "out" / "run.json").exists()
