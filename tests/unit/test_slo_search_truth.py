"""The SLO search against a simulated server whose true highest rate is known (benchmarks/slo_search.py)."""

from __future__ import annotations

from benchmarks.slo_search import held, search, true_highest_rate


def test_the_searched_bracket_holds_the_true_highest_rate_within_1_percent_in_eight_of_ten_searches() -> None:
    truth = true_highest_rate(steps=60)
    results = [search(seed) for seed in range(10)]
    # Over 100 searches (benchmarks/README.md) 0.70 held it strictly and 0.94 within 1 % of it; these ten seeds
    # include two of the six that missed by more (a "meets" at 15.6 req/s: a step without a burst).
    assert sum(held(r, truth, slack=0.01) for r in results) >= 8, (truth, results)
    # The previous judgement, each step by its point fraction, held it far less often on the same seeds.
    assert sum(held(search(seed, by_interval=False), truth) for seed in range(10)) <= 5
