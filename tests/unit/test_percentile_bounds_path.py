"""benchmarks/percentile_bounds.py measures the coverage of the very bounds the reports show (issue 42): its
`quantile_bounds` is the product's, and every table that brackets a percentile computes it with that function."""

from __future__ import annotations

import numpy as np

import benchmarks.percentile_bounds as benchmark
import toolkit.method.embedding_cell as embedding_cell
import toolkit.method.quantile_bounds as product
import toolkit.method.window as window
import toolkit.reports.class_compare as class_compare
from toolkit.method.goodput import PERCENTILES, percentile_bounds


def test_the_benchmark_calls_the_products_functions_not_copies() -> None:
    assert benchmark.quantile_bounds is product.quantile_bounds
    assert benchmark.order_ranks is product.order_ranks
    assert benchmark.min_bounded_n is product.min_bounded_n
    assert benchmark.LEVEL == product.LEVEL
    # a matrix cell's TTFT and TBT p90 / p99, an embeddings cell's end-to-end percentiles, compare's class TTFT p90
    for shown in (window, embedding_cell, class_compare):
        assert shown.quantile_bounds is benchmark.quantile_bounds, shown.__name__


def test_a_rate_steps_bounds_are_the_benchmarks_on_a_fixed_sample() -> None:
    # a rate step's columns (`ttft_p99_low_ms` …, toolkit.method.goodput imports the function where it is called)
    latencies = np.random.default_rng(7).lognormal(5.0, 0.6, 400)
    found = percentile_bounds({"ttft": latencies})
    for q in PERCENTILES:
        bounds = benchmark.quantile_bounds(latencies, q)
        assert bounds.low is not None and bounds.high is not None, q  # 400 requests bound p50, p90 and p99
        assert (found[f"ttft_p{q}_low_ms"], found[f"ttft_p{q}_high_ms"]) == (bounds.low, bounds.high), q
