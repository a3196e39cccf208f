"""Request priorities on the embedded vLLM: a two-class mix with and without `--scheduling-policy priority`.

Two embedded vLLMs (`toolkit serve`'s tiny model, one `fcfs`, one `priority`) are measured in alternating rounds
(A B B A ...) with the same class sweep at one loaded rate: short chats (weight 3, priority 0) beside long prompts
(weight 1, priority 1 on the priority server; vLLM's fcfs server refuses any priority but 0, so there the long
class sends none). Each round gives each class's TTFT p90 (from the scheduled arrival); each pair of rounds a ratio
priority / fcfs, and the rounds' ratios a geometric mean with a 95 % t interval (round pairs as the unit, so the
machine's drift between pairs does not enter).

    .venv/bin/python benchmarks/class_priority.py [--rounds 4] [--rate 24] [--duration 10]

Last line: `class_priority: rate=… rounds=… chat TTFT p90 priority/fcfs …× [low, high]; rag …× [low, high]`.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scipy import stats  # noqa: E402

from toolkit.rates.files import read_steps  # noqa: E402
from toolkit.rates.params import make_rate_params  # noqa: E402
from toolkit.rates.runner import run_rates  # noqa: E402
from toolkit.servers.embedded.server import EmbeddedServer, ServerConfig, free_port  # noqa: E402

CHAT = {"name": "chat", "weight": 3, "input_tokens": 128, "output_tokens": 32, "slo_ttft_ms": 200, "priority": 0}
RAG = {"name": "rag", "weight": 1, "input_tokens": 2048, "output_tokens": 32, "slo_ttft_ms": 3000}


def one_round(server: EmbeddedServer, priority: bool, rate: float, duration_s: float, seed: int, out: Path) -> dict:
    """One class sweep of one step; each class's TTFT p90 (ms) and requests."""
    rag = {**RAG, "priority": 1} if priority else RAG
    params = make_rate_params({"base_url": server.base_url, "rates": [rate], "duration_s": duration_s,
                               "classes": [CHAT, rag], "seed": seed, "results_dir": str(out),
                               "api_key_env": "CLASS_PRIORITY_NO_KEY"})  # fmt: skip
    (row,) = read_steps(run_rates(params, say=lambda line: None))
    return {name: (c["ttft_sched_p90_ms"], c["requests"]) for name, c in row["classes"].items()}


def ratio_interval(ratios: list[float]) -> tuple[float, float, float]:
    """The geometric mean of the rounds' ratios and its 95 % t interval."""
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    half = stats.t.ppf(0.975, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--rate", type=float, default=24.0)
    parser.add_argument("--duration", type=float, default=10.0)
    args = parser.parse_args()
    ports = [free_port()]
    while len(ports) < 2:  # a free port stays free until bound: two asked at once may be the same
        ports += [p for p in [free_port()] if p not in ports]
    configs = {policy: ServerConfig(port=port, max_model_len=4096, scheduling_policy=policy)
               for policy, port in zip(("fcfs", "priority"), ports, strict=True)}  # fmt: skip
    # started side by side; the pool's threads live until the servers stop: a launched server gets SIGTERM when the
    # thread that started it ends (toolkit.servers.managed: the kernel's parent-death signal follows the thread)
    pool = ThreadPoolExecutor(2)
    servers = dict(zip(configs, pool.map(lambda c: EmbeddedServer(c).start(), configs.values()), strict=True))
    rounds: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="class-priority-") as tmp:
            for r in range(args.rounds):
                order = ("fcfs", "priority") if r % 2 == 0 else ("priority", "fcfs")
                seen = {policy: one_round(servers[policy], policy == "priority", args.rate, args.duration, r,
                                          Path(tmp) / f"{r}-{policy}") for policy in order}  # fmt: skip
                rounds.append(seen)
                print(f"round {r}: " + "; ".join(f"{p} " + ", ".join(f"{n} TTFT p90 {ms:.0f} ms ({k} req)"
                      for n, (ms, k) in seen[p].items()) for p in order), flush=True)  # fmt: skip
    finally:
        for server in servers.values():
            server.stop()
        pool.shutdown()
    figures = {}
    for name in ("chat", "rag"):
        ratios = [seen["priority"][name][0] / seen["fcfs"][name][0] for seen in rounds]
        figures[name] = ratio_interval(ratios)
    print(json.dumps({"rate": args.rate, "duration_s": args.duration, "rounds": rounds, "ratios": figures}))
    shown = [f"{name} TTFT p90 priority/fcfs {g:.3f}× [{lo:.3f}, {hi:.3f}]" for name, (g, lo, hi) in figures.items()]
    print(f"class_priority: rate={args.rate:g} rounds={args.rounds} " + "; ".join(shown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
