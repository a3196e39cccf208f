"""The hit rate a shared-prefix workload implies, how requests pick their prefix, and where the rate shows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from toolkit.base.errors import ParamsError
from toolkit.method.prefix_cache import expected_hit_rate, measured_hit_rate
from toolkit.rates.lengths import check_lengths, prefix_groups
from toolkit.rates.params import make_rate_params
from toolkit.reports.rate_tables import HITS_COLUMN, steps_table


def test_every_request_but_the_first_of_its_prefix_finds_the_prefix_whole_blocks() -> None:
    # groups 0 1 0 0 1 2: the repeats (positions 2, 3 and 4) hit; 640-token prompts, a 512-token prefix = 4 blocks
    # of 128: 3 × 512 / (6 × 640) = 0.4
    assert expected_hit_rate([0, 1, 0, 0, 1, 2], [640] * 6, 512, 128) == pytest.approx(3 * 512 / (6 * 640))
    # a 500-token prefix fills only 3 blocks of 128 (384 tokens cached)
    assert expected_hit_rate([0, 0], [600, 600], 500, 128) == pytest.approx(384 / 1200)
    assert expected_hit_rate([0, 0], [600, 600], 500, None) is None
    assert measured_hit_rate(30.0, 120.0) == 0.25 and measured_hit_rate(None, 5.0) is None
    assert measured_hit_rate(0.0, 0.0) is None


def test_uniform_and_zipf_choices() -> None:
    rng = np.random.default_rng(1)
    uniform = prefix_groups(rng, 20_000, 4, None)
    assert set(uniform) == {0, 1, 2, 3} and max(uniform.count(g) for g in range(4)) / 5_000 < 1.05
    zipf = prefix_groups(np.random.default_rng(1), 20_000, 4, "zipf")
    shares = [zipf.count(g) / 20_000 for g in range(4)]
    assert shares == pytest.approx([1 / k / (1 + 1 / 2 + 1 / 3 + 1 / 4) for k in (1, 2, 3, 4)], abs=0.01)


def test_the_workload_is_checked_in_one_line() -> None:
    with pytest.raises(ParamsError, match=r"shared-prefix needs prefixes .* and prefix_tokens"):
        make_rate_params({"workload": "shared-prefix", "prefixes": 4})
    with pytest.raises(ParamsError, match="prefixes, prefix_tokens, prefix_choice: apply to workload shared-prefix"):
        make_rate_params({"prefixes": 4})
    params = make_rate_params({"workload": "shared-prefix", "prefixes": 4, "prefix_tokens": 512, "input_tokens": 520})
    with pytest.raises(ParamsError, match=r"^input_tokens: from 520; a shared prefix of 512 tokens needs at least 16"):
        check_lengths(params, 4096)


def test_the_steps_table_shows_the_hit_rates_only_for_a_shared_prefix_sweep() -> None:
    row = {"step": 0, "offered_rate": 2.0, "achieved_rate": 2.0, "completed": 24, "failed": 0, "output_tok_s": 30.0,
           "ttft_p50_ms": 40.0, "ttft_p99_ms": None, "tpot_p50_ms": 5.0, "tpot_p99_ms": None, "goodput": 2.0,
           "slo_fraction": 1.0, "slo_met": True, "lag_p99_ms": 1.0, "server_waiting_mean": 0.0,
           "server_waiting_max": 0}  # fmt: skip
    assert HITS_COLUMN not in steps_table(pd.DataFrame([row]))
    shared = steps_table(pd.DataFrame([{**row, "prefix_cache_hit_rate": 0.62, "expected_hit_rate": 0.667}]))
    assert shared[HITS_COLUMN].tolist() == ["62.0% (66.7%)"]
