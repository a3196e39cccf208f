"""Class sweeps of two runs side by side (issue 47's priority comparison): each class's TTFT p90 run by run at the
rates both ran, each run's scheduling policy from its recorded launch, the second run's over the first's."""

from __future__ import annotations

import json
import math
from html import escape
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from toolkit.method.goodput import CLASS_COLUMN, REQUIRED_RECORD_COLUMNS, complete_records
from toolkit.method.percentile_ratio import percentile_ratio_interval
from toolkit.reports import rate_views
from toolkit.reports.class_compare import (
    CLASS_BOUNDS_NOTE,
    class_ttft_comparison,
    run_policies,
    scheduling_policy,
    sweep_summary,
)
from toolkit.results.rate_runs import RateSweep

CLASSES = [{"name": "chat", "priority": 0}, {"name": "rag", "priority": 1}]


def _sweep(folder: Path, ttft_s: dict[tuple[str, float], list[float]], command: str | None = None) -> RateSweep:
    """A class sweep whose requests of each (class, rate) took these TTFTs from their scheduled arrival."""
    rows, steps = [], []
    for step, rate in enumerate(sorted({rate for _, rate in ttft_s})):
        steps.append({"step": step, "offered_rate": rate})
        request = 0
        for (name, at), values in ttft_s.items():
            for value in values if at == rate else []:
                due = request * 0.05
                rows.append({"step": step, "offered_rate": rate, "request": request, "scheduled_s": due,
                             "sent_s": due, "first_token_s": due + value, "last_token_s": due + value + 0.1,
                             "chunk_times_s": [], "input_tokens": 10, "output_tokens": 5, "error": None,
                             CLASS_COLUMN: name})  # fmt: skip
                request += 1
    folder.mkdir(parents=True, exist_ok=True)
    if command is not None:
        (folder / "server.json").write_text(json.dumps({"schema_version": 1, "command": command}))
    sweep = {"classes": CLASSES, "steady_trim": 0.0}
    return RateSweep(folder, sweep, pd.DataFrame(steps), complete_records(pd.DataFrame(rows)))


def _draws(seed: int, scale: float) -> list[float]:
    return [float(v) for v in np.random.default_rng(seed).exponential(scale, 30)]


def _below(k: int, n: int, p: float = 0.9) -> float:
    """P(B <= k) for B ~ Binomial(n, p): how often the order statistic x_(k+1) lies above the true percentile."""
    return math.fsum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))


def test_each_class_ttft_run_by_run_with_the_policies_and_the_ratio(tmp_path: Path) -> None:
    fcfs = {("chat", 8.0): _draws(1, 0.2), ("rag", 8.0): _draws(2, 0.5), ("chat", 16.0): _draws(3, 0.4),
            ("rag", 16.0): _draws(4, 0.9)}  # fmt: skip
    priority = {key: [v * (0.5 if key[0] == "chat" else 1.25) for v in values] for key, values in fcfs.items()}
    priority[("chat", 32.0)] = _draws(5, 1.0)  # a rate only one run has: left out
    sweeps = {"fcfs": _sweep(tmp_path / "a", fcfs, "vllm serve m --port 1"),
              "prio": _sweep(tmp_path / "b", priority, "vllm serve m --scheduling-policy priority")}  # fmt: skip
    policies = run_policies(sweeps)
    assert policies == {"fcfs": "fcfs", "prio": "priority"}
    table = class_ttft_comparison(sweeps, policies)
    assert table is not None
    assert list(table.columns) == ["Class", "Priority", "Offered req/s", "TTFT p90 · fcfs (fcfs)",
                                   "TTFT p90 · prio (priority)", "Ratio"]  # fmt: skip
    assert [tuple(r) for r in table[["Class", "Priority", "Offered req/s"]].to_numpy()] == [
        ("chat", "0", "8"), ("chat", "0", "16"), ("rag", "1", "8"), ("rag", "1", "16")]  # fmt: skip
    chat = sorted(fcfs[("chat", 8.0)])
    p90 = pd.Series(chat).quantile(0.9) * 1e3
    # 30 requests: 0.9^30 > 2.5 %, no upper bound; the low end is x_(24), the highest rank missing at most 5 %
    assert 0.9**30 > 0.025 and _below(23, 30) <= 0.05 < _below(24, 30)
    assert table.iloc[0]["TTFT p90 · fcfs (fcfs)"] == f"{p90:.0f} ms [{chat[23] * 1e3:.0f}, unbounded]"
    assert list(table["Ratio"]) == ["0.500×", "0.500×", "1.250×", "1.250×"]  # every TTFT scaled: its p90 too
    html = rate_views.class_comparison(sweeps).data  # type: ignore[union-attr]
    assert "Traffic classes, run by run" in html and "TTFT p90 · prio (priority)" in html


def test_each_ttft_p90_shows_its_order_statistics_bounds_and_unbounded_below_36_requests(tmp_path: Path) -> None:
    """A fixed sample: 36 requests of 10, 20 … 360 ms in A, 20 of 10 … 200 ms in B, a class of 9 in both."""
    rng = np.random.default_rng(0)
    a = {("chat", 8.0): list(rng.permutation([k / 100 for k in range(1, 37)])), ("rag", 8.0): [0.5] * 9}
    b = {("chat", 8.0): list(rng.permutation([k / 100 for k in range(1, 21)])), ("rag", 8.0): [0.5] * 9}
    sweeps = {"A": _sweep(tmp_path / "a", a), "B": _sweep(tmp_path / "b", b)}
    table = class_ttft_comparison(sweeps)
    assert table is not None
    # 36 values: the maximum x_(36) misses above with 0.9^36 = 2.25 % <= 2.5 %, x_(35) with 11 %; the low end is
    # the highest rank whose miss below is at most the 5 % less 2.25 %: x_(29). p90 = x_(32.5) = 325 ms.
    assert 0.9**36 <= 0.025 < 0.9**36 + 36 * 0.9**35 * 0.1
    assert _below(28, 36) <= 0.05 - 0.9**36 < _below(29, 36)
    # 20 values: 0.9^20 = 12 % > 2.5 %, unbounded; the low end misses at most all 5 %: x_(16). p90 = x_(18.1) = 181 ms
    assert 0.9**20 > 0.025 and _below(15, 20) <= 0.05 < _below(16, 20)
    assert table.to_dict("records") == [
        {"Class": "chat", "Priority": "0", "Offered req/s": "8", "TTFT p90 · A": "325 ms [290, 360]",
         "TTFT p90 · B": "181 ms [160, unbounded]", "Ratio": "0.557×"},
        {"Class": "rag", "Priority": "1", "Offered req/s": "8", "TTFT p90 · A": "—", "TTFT p90 · B": "—",
         "Ratio": "-"},  # 9 requests: too few for a p90 (10), so no bounds either
    ]  # fmt: skip
    assert CLASS_BOUNDS_NOTE == ("In brackets the percentile's 95 % distribution-free interval, unbounded above "
                                 "from fewer than 36 requests at p90.")  # fmt: skip
    page = rate_views.class_comparison(sweeps).data  # type: ignore[union-attr]
    assert page.index("325 ms [290, 360]") < page.index(escape(CLASS_BOUNDS_NOTE))  # the note under the table


def test_nothing_without_two_class_sweeps_in_common(tmp_path: Path) -> None:
    one = {("chat", 8.0): _draws(1, 0.2)}
    assert class_ttft_comparison({"a": _sweep(tmp_path / "a", one)}) is None
    other = {("bulk", 8.0): _draws(1, 0.2)}
    assert class_ttft_comparison({"a": _sweep(tmp_path / "a", one), "b": _sweep(tmp_path / "b", other)}) is None
    plain = RateSweep(tmp_path, {}, pd.DataFrame({"step": [0], "offered_rate": [8.0]}),
                      complete_records(pd.DataFrame(columns=list(REQUIRED_RECORD_COLUMNS))))  # fmt: skip
    assert class_ttft_comparison({"a": _sweep(tmp_path / "a", one), "b": plain}) is None
    assert rate_views.class_comparison({"a": plain, "b": plain}) is None
    three = class_ttft_comparison({k: _sweep(tmp_path / k, one) for k in "abc"})
    assert three is not None and "Ratio" not in three and len(three.columns) == 6


@pytest.mark.parametrize(
    ("command", "policy"),
    [
        (None, None),
        ("vllm serve m", "fcfs"),
        ("vllm serve m --scheduling-policy priority", "priority"),
        ("vllm serve m --scheduling-policy=priority --port 8000", "priority"),
    ],
)
def test_the_policy_is_read_from_the_launch_command(command: str | None, policy: str | None) -> None:
    assert scheduling_policy(command) == policy


def test_the_summary_says_each_classs_images_where_the_classes_carry_different_ones(tmp_path: Path) -> None:
    """A class's images are its own where sweep.json holds them, else the sweep's; the line says them per class only
    where the classes differ."""
    steps = pd.DataFrame([{"step": 0, "offered_rate": 1.0, "slo_met": True}])

    def summary(**sweep: object) -> str:
        return sweep_summary(RateSweep(tmp_path, sweep, steps, pd.DataFrame()))

    mixed = [{"name": "chat", "images": 0}, {"name": "vision", "images": 2, "image_size": "448x448"}, {"name": "rest"}]
    assert summary(images=1, classes=mixed).endswith(
        " Each request carried, by class: chat none; vision 2 images of 448x448 pixels; rest 1 image of 224x224 "
        "pixels (synthetic PNGs)."
    )
    alike = [{"name": "a"}, {"name": "b", "images": 1, "image_size": "224x224"}]
    assert summary(images=1, classes=alike).endswith(" Each request carried 1 image of 224x224 pixels (synthetic "
                                                     "PNGs).")  # fmt: skip
    assert "image" not in summary(images=0, classes=[{"name": "a"}, {"name": "b", "images": 0}])


def test_the_ratio_shows_its_bootstrap_interval_from_36_requests_a_side(tmp_path: Path) -> None:
    """60 requests a class in each run: the ratio carries percentile_ratio_interval's bracket over the same TTFTs
    (in ms or s alike: a ratio); with 30 in one run it stays a point figure."""
    fcfs = {("chat", 8.0): [float(v) for v in np.random.default_rng(6).exponential(0.2, 60)]}
    prio = {("chat", 8.0): [float(v) for v in np.random.default_rng(7).exponential(0.1, 60)]}
    table = class_ttft_comparison({"A": _sweep(tmp_path / "a", fcfs), "B": _sweep(tmp_path / "b", prio)})
    assert table is not None
    a, b = fcfs[("chat", 8.0)], prio[("chat", 8.0)]
    interval = percentile_ratio_interval(a, b, 90)
    assert interval is not None and interval[0] < 0.5 < interval[1]  # the true ratio of the two p90s
    point = pd.Series(b).quantile(0.9) / pd.Series(a).quantile(0.9)
    assert table.iloc[0]["Ratio"] == f"{point:.3f}× [{interval[0]:.2f}, {interval[1]:.2f}]"
    few = {("chat", 8.0): prio[("chat", 8.0)][:30]}
    table = class_ttft_comparison({"A": _sweep(tmp_path / "c", fcfs), "B": _sweep(tmp_path / "d", few)})
    assert table is not None and "[" not in table.iloc[0]["Ratio"]
