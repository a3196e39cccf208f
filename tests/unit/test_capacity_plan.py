"""The capacity plan against hand computations, and its section from a rate sweep."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest

from tests.rate_folders import write_rate_sweep
from toolkit.base.errors import ParamsError
from toolkit.cli import main
from toolkit.method.capacity_plan import (
    CapacityTarget,
    ClassCapacity,
    binding_capacity,
    class_capacities,
    plan_capacity,
)
from toolkit.method.goodput import highest_rate_meeting
from toolkit.params import make_params
from toolkit.reports.capacity_views import (
    capacity_classes,
    capacity_markdown,
    capacity_plan,
    class_brackets,
    target_from,
)
from toolkit.results.rate_runs import RateSweep, load_rate_sweep

PEERS = Path(__file__).resolve().parents[1] / "fixtures" / "peers"


def test_replicas_gpus_and_cost_by_hand() -> None:
    # 3.0 req/s meets, 4.0 fails; 20 % headroom: 2.4 req/s per server. 50 req/s: 50 / 2.4 = 20.83 -> 21 servers
    # (50 / (4.0 * 0.8) = 15.6 -> 16 if the true rate were 4.0). 8 GPUs each: 168 GPUs. 100 output tokens per
    # request: 5,000 tok/s, 29.76 tok/s per GPU. At 3.0 per GPU-hour: 504 per hour for 18 M tokens: 28.0 per M.
    plan = plan_capacity(3.0, 4.0, 100.0, CapacityTarget(50.0, 3.0, gpus_per_server=8, headroom=0.2))
    assert plan.usable_rate == pytest.approx(2.4)
    assert (plan.replicas, plan.replicas_fewest) == (21, 16)
    assert plan.tok_s_per_gpu == pytest.approx(5000 / 168)
    assert plan.cost_per_million_tokens == pytest.approx(168 * 3.0 / (5000 * 3600) * 1e6)
    assert plan.cost_per_million_tokens == pytest.approx(28.0)


def test_the_demo_plan_for_ten_times_its_highest_rate_by_hand() -> None:
    # make demo (this session): the search's bracket 12 req/s meets, 48 fails; 16 output tokens a request.
    # 10 × 12 = 120 req/s; 20 % headroom: 9.6 req/s a server -> 120 / 9.6 = 12.5 -> 13 servers (at 48: 120 / 38.4
    # = 3.1 -> 4); 1,920 output tok/s over 13 GPUs = 147.7 each; 13 GPUs at 2.0 an hour for 1,920 tok/s × 3,600 s =
    # 6.912 M tokens an hour: 26 / 6.912 = 3.762 per million output tokens.
    target = CapacityTarget(None, 2.0, gpus_per_server=1, headroom=0.2, target_multiple=10)
    plan = plan_capacity(12.0, 48.0, 16.0, target)
    assert plan.target_rps == 120.0 and (plan.replicas, plan.replicas_fewest) == (13, 4)
    assert plan.tok_s_per_gpu == pytest.approx(1920 / 13)
    assert plan.cost_per_million_tokens == pytest.approx(3.762, abs=5e-4)


def test_an_exact_multiple_is_not_rounded_up_and_no_failure_leaves_the_range_open() -> None:
    plan = plan_capacity(2.5, None, 10.0, CapacityTarget(20.0, None, headroom=0.2))  # 20 / 2.0 = 10 exactly
    assert (plan.replicas, plan.replicas_fewest, plan.cost_per_million_tokens) == (10, None, None)


@pytest.mark.parametrize(
    ("low", "target", "error"),
    [(0.0, CapacityTarget(1.0), "no rate was shown to meet"), (2.0, CapacityTarget(1.0, headroom=1.0), "headroom")],
)
def test_a_plan_that_cannot_be_made_says_why(low: float, target: CapacityTarget, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        plan_capacity(low, None, 10.0, target)


def test_the_section_from_a_sweep_traces_its_figures(tmp_path: Path) -> None:
    folder = write_rate_sweep(tmp_path / "run", rates=(1.0, 2.0, 4.0, 8.0), capacity=5.0)
    sweep = load_rate_sweep(folder)
    target = CapacityTarget(40.0, 2.0, gpus_per_server=4)
    plan, sources = capacity_plan(sweep, target)
    met = [(r, m) for r, m in zip(sweep.steps["offered_rate"], sweep.steps["slo_met"], strict=True)]
    passing = max(r for r, m in met if m and all(mm for rr, mm in met if rr <= r))
    assert plan.rate_low == passing
    done = sweep.records[sweep.records["error"].isna() & (sweep.records["output_tokens"] > 0)]
    assert plan.tokens_per_request == pytest.approx(done["output_tokens"].mean())
    assert plan.replicas == math.ceil(40.0 / (passing * 0.8))
    text = capacity_markdown(sweep, target)
    assert text.startswith("## Capacity plan\n") and "rates/steps.jsonl" in text and "rates/step-*.parquet" in text
    assert "steps.jsonl" in sources["bracket"]


def test_the_params_block_is_typed_and_read_back_from_run_json() -> None:
    params = make_params({"capacity": {"target_rps": 10, "price_per_gpu_hour": 2.5, "gpus_per_server": 8}})
    assert params.capacity is not None
    assert target_from({"capacity": params.capacity.model_dump()}) == CapacityTarget(10.0, 2.5, 8, 0.2)
    assert target_from({"params": {}}) is None
    with pytest.raises(ParamsError, match=r"^capacity: .*give one of target_rps \(req/s\) and target_multiple"):
        make_params({"capacity": {"target_rps": 10, "target_multiple": 2}})


def test_the_command_prints_the_plan(capsys: pytest.CaptureFixture[str]) -> None:
    # the toolkit's own step at 4 req/s met (no limits): 40 req/s at 3.2 usable -> 13 servers of 8 GPUs
    assert main(["capacity", str(PEERS / "toolkit-4rps"), "--target-rps", "40", "--price-per-gpu-hour", "3",
                 "--gpus-per-server", "8"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "13 (13 or fewer" in out and "104" in out
    assert f"{104 * 3 / (40 * 16 * 3600) * 1e6:,.4g} at 3 per GPU-hour" in out  # 16 output tokens per request


def test_a_folder_without_a_sweep_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["capacity", str(tmp_path), "--target-rps", "1"]) == 2
    assert (
        capsys.readouterr().err.strip() == f"error: run_dir: {tmp_path} holds no rate sweep (no rates/ folder); "
        "run `rates` first"
    )


@pytest.mark.parametrize(
    "options",
    [["--target-rps", "inf"], ["--target-rps", "1e-300"], ["--target-rps", "nan"], ["--target-rps", "-4"],
     ["--target-rps", "40", "--price-per-gpu-hour", "-3"], ["--target-rps", "40", "--price-per-gpu-hour", "nan"]],
)  # fmt: skip
def test_an_impossible_target_or_price_is_one_line(options: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """inf overflowed and 1e-300 divided by zero (tracebacks); a negative or NaN price was taken."""
    assert main(["capacity", str(PEERS / "toolkit-4rps"), *options]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: target-rps or target-multiple from 1e-06 to 1e+09, a price from 0 to 1e+09, headroom in [0, 1), "
        "gpus-per-server 1 or more"
    )


def _class_sweep(search: dict | None) -> RateSweep:
    """A class sweep at 2, 4, 8 req/s: chat meets its level at every rate (undecided at 8 with a search), rag only
    at 2; the mix therefore only at 2."""
    chat = [{"requests": 10, "slo_fraction": 1.0, "slo_met": True, "slo_verdict": v} for v in ("meets", "meets",
            "undecided" if search else "meets")]  # fmt: skip
    rag = [{"requests": 10, "slo_fraction": f, "slo_met": f == 1.0, "slo_verdict": "meets" if f == 1.0 else "fails"}
           for f in (1.0, 0.5, 0.2)]  # fmt: skip
    steps = pd.DataFrame({"step": [0, 1, 2], "offered_rate": [2.0, 4.0, 8.0], "slo_met": [True, False, False],
                          "classes": [{"chat": c, "rag": r} for c, r in zip(chat, rag, strict=True)]})  # fmt: skip
    records = pd.DataFrame({"error": [None] * 4, "output_tokens": [10, 20, 30, 40]})
    return RateSweep(Path("."), {"search": search} if search else {}, steps, records)


@pytest.mark.parametrize("searched", [False, True])
def test_a_class_sweeps_plan_names_the_binding_class_and_each_classs_replicas(searched: bool) -> None:
    """Each class's own bracket of the mix's rates (chat: meets up to 8, or 4 where the search left 8 undecided;
    rag: 2, fails at 4), the replicas it alone needs at 10 req/s with 20 % headroom, and the class needing most."""
    search = {"bracket": [2.0, 4.0], "binding": {"class": "rag", "rate": 4.0}} if searched else None
    sweep, target = _class_sweep(search), CapacityTarget(10.0)
    plan, _ = capacity_plan(sweep, target)
    assert plan.rate_low == 2.0 and plan.replicas == math.ceil(10 / 1.6) == 7 and plan.tokens_per_request == 25
    chat_low = 4.0 if searched else 8.0
    assert class_brackets(sweep) == {"chat": (chat_low, None), "rag": (2.0, 4.0)}
    chat, rag = capacity_classes(sweep, plan, target)
    assert (chat.name, chat.replicas, rag.name, rag.replicas) == ("chat", math.ceil(10 / (chat_low * 0.8)), "rag", 7)
    assert binding_capacity([chat, rag]) == rag
    text = capacity_markdown(sweep, target)
    assert "| Binding class | rag |" in text and "| Class rag | 7 replicas (meets up to 2 req/s of the mix, fails at" \
        " 4 req/s) |" in text  # fmt: skip
    assert ("the search's binding class: rag" in text) is searched
    assert f"| Class chat | {chat.replicas} replicas (meets up to {chat_low:g} req/s of the mix) |" in text


def test_a_class_that_met_at_no_rate_binds_and_another_sweep_has_no_class_rows() -> None:
    none = ClassCapacity("rag", None, 2.0, None)
    assert binding_capacity([ClassCapacity("chat", 8.0, None, 2), none]) == none
    assert binding_capacity([]) is None
    assert class_capacities({"a": (4.0, 8.0), "b": (None, 2.0)}, 10.0, 0.5) == [
        ClassCapacity("a", 4.0, 8.0, 5), ClassCapacity("b", None, 2.0, None)]  # fmt: skip
    plain = RateSweep(Path("."), {}, pd.DataFrame({"step": [0], "offered_rate": [2.0], "slo_met": [True]}),
                      pd.DataFrame({"error": [None], "output_tokens": [10]}))  # fmt: skip
    assert class_brackets(plain) == {} and "Binding class" not in capacity_markdown(plain, CapacityTarget(10.0))


def test_the_command_names_a_class_sweeps_binding_class(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = write_rate_sweep(tmp_path / "run", rates=(1.0, 2.0, 4.0, 8.0), capacity=5.0)
    steps_file = folder / "rates" / "steps.jsonl"
    rows = [json.loads(line) for line in steps_file.read_text().splitlines()]
    for row in rows:  # chat meets at every rate; rag exactly where the mix does
        row["classes"] = {
            "chat": {"requests": 6, "slo_fraction": 1.0, "slo_met": True},
            "rag": {"requests": 6, "slo_fraction": row["slo_fraction"], "slo_met": row["slo_met"]},
        }
    steps_file.write_text("".join(json.dumps(row) + "\n" for row in rows))
    low, high = highest_rate_meeting([(r["offered_rate"], r["slo_met"]) for r in rows])
    assert low is not None and high is not None  # the synthetic server's capacity lies between two rates
    assert main(["capacity", str(folder), "--target-rps", "40"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"Binding class\s+rag\s", out)
    assert re.search(rf"Class rag\s+{math.ceil(40 / (low * 0.8))} replicas \(meets up to {low:g} req/s of the mix, "
                     rf"fails at {high:g} req/s\)", out)  # fmt: skip
    assert re.search(r"Class chat\s+7 replicas \(meets up to 8 req/s of the mix\)", out)  # 40 / 6.4, rounded up


def test_an_embeddings_sweeps_plan_counts_the_tokens_it_embedded() -> None:
    """Nothing is generated: per request, per GPU and per cost, the input tokens embedded. Meeting at 4 req/s,
    failing at 8; 64 and 192 tokens a completed request (mean 128); 10 req/s without headroom: 3 replicas of
    1 GPU, 1,280 / 3 = 426.7 input tok/s per GPU; at 2 per GPU-hour, 3 × 2 / (1,280 × 3,600) × 10⁶ = 1.302 per
    million input tokens."""
    steps = pd.DataFrame({"step": [0, 1], "offered_rate": [4.0, 8.0], "slo_met": [True, False]})
    records = pd.DataFrame({"error": [None, None, "timeout"], "input_tokens": [64, 192, 999],
                            "output_tokens": [0, 0, 0]})  # fmt: skip
    sweep = RateSweep(Path("."), {"endpoint": "embeddings"}, steps, records)
    target = CapacityTarget(10.0, price_per_gpu_hour=2.0, headroom=0.0)
    plan, sources = capacity_plan(sweep, target)
    assert (plan.token_kind, plan.tokens_per_request, plan.replicas) == ("input", 128.0, 3)
    assert plan.tok_s_per_gpu == pytest.approx(1280 / 3)
    assert plan.cost_per_million_tokens == pytest.approx(3 * 2.0 / (1280 * 3600) * 1e6)
    assert "mean input tokens of the sweep's 2 completed requests" in sources["tokens"]
    text = capacity_markdown(sweep, target)
    assert "| Input tokens per request | 128.0 |" in text and "Cost per million input tokens" in text
    assert "Output tokens per request" not in text and "output tok/s" not in text
