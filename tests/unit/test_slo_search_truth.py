"""The SLO search against a simulated server whose true highest rate is known (benchmarks/slo_search.py)."""

from __future__ import annotations

from benchmarks.slo_search import held, search, true_highest_rate


def test_the_searched_bracket_holds_the_true_highest_rate_in_nine_of_ten_searches() -> None:
    truth = true_highest_rate(steps=60)
    results = [search(seed) for seed in range(10)]
    # Over 100 searches (benchmarks/README.md) the bracket held it in 0.93 (0.70 before a rate's "meets" needed a
    # second step: one step without a burst met the level at 15.6 req/s, above the truth).
    holding = sum(held(r, truth) for r in results)
    assert holding >= 9, (truth, results)
    # Each step judged by its point fraction instead, the same searches held it less often.
    assert sum(held(search(seed, by_interval=False), truth) for seed in range(10)) < holding
