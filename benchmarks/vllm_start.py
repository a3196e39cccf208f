"""Where a launched embedded vLLM's start-up goes, and what `--distributed-executor-backend uni` changes.

vLLM on CPU runs three Python processes by default (API server, engine core, one `mp` executor worker), each
importing torch and vLLM one after the other; `uni` runs the worker inside the engine core. Variants are launched
in alternation (A B B A ...) so the machine's drift falls on both. Each launch: seconds to a healthy /health, then
one 256-token stream (its decode tok/s, client side), then seconds to stop the process group.

    .venv/bin/python benchmarks/vllm_start.py --rounds 3

The last line: `vllm_start: mp=<median s> uni=<median s> ratio=<uni/mp> decode_mp=<tok/s> decode_uni=<tok/s>`.
"""

from __future__ import annotations

import argparse
import statistics
import time

import httpx

from toolkit.method.paired import alternating_order
from toolkit.servers.embedded.models import vllm_env
from toolkit.servers.embedded.server import SERVED_MODEL_NAME, ServerConfig, ensure_model, free_port, launch_command
from toolkit.servers.managed import ManagedServer

BACKENDS = {"A": "mp", "B": "uni"}


def one_launch(backend: str) -> dict[str, float]:
    """Start, one stream, stop: the three durations."""
    port = free_port()
    command = [a for a in launch_command(ServerConfig(max_model_len=4096), port, ensure_model())
               if a not in ("--distributed-executor-backend", "uni", "mp")]  # fmt: skip
    command += ["--distributed-executor-backend", backend]
    log_path = ensure_model().parent / "logs" / f"start-{backend}-{port}.log"
    server = ManagedServer(command, base_url=f"http://127.0.0.1:{port}", env=vllm_env(1), log_path=log_path,
                           name="vLLM")  # fmt: skip
    started = time.monotonic()
    server.start()
    healthy = time.monotonic() - started
    body = {"model": SERVED_MODEL_NAME, "prompt": "hello " * 200, "max_tokens": 256, "min_tokens": 256,
            "ignore_eos": True, "stream": True}  # fmt: skip
    first = last = None
    tokens = 0
    with httpx.stream("POST", f"{server.base_url}/v1/completions", json=body, timeout=120) as reply:
        for line in reply.iter_lines():
            if line.startswith("data: {"):
                last = time.monotonic()
                first = first or last
                tokens += 1
    stop_from = time.monotonic()
    server.stop()
    stopped = time.monotonic() - stop_from
    decode = (tokens - 1) / (last - first) if first and last and last > first else float("nan")
    return {"start_s": healthy, "decode_tok_s": decode, "stop_s": stopped}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (each launches both variants)")
    args = parser.parse_args()
    seen: dict[str, list[dict[str, float]]] = {"mp": [], "uni": []}
    for round_index, side in alternating_order(args.rounds):
        backend = BACKENDS[side]
        row = one_launch(backend)
        seen[backend].append(row)
        print(f"round {round_index} {backend:3s} start {row['start_s']:5.1f} s  decode {row['decode_tok_s']:6.1f} "
              f"tok/s  stop {row['stop_s']:4.1f} s", flush=True)  # fmt: skip
    med = {b: {k: statistics.median(r[k] for r in rows) for k in rows[0]} for b, rows in seen.items()}
    print(f"vllm_start: mp={med['mp']['start_s']:.1f} uni={med['uni']['start_s']:.1f} "
          f"ratio={med['uni']['start_s'] / med['mp']['start_s']:.2f} decode_mp={med['mp']['decode_tok_s']:.1f} "
          f"decode_uni={med['uni']['decode_tok_s']:.1f} stop_mp={med['mp']['stop_s']:.1f} "
          f"stop_uni={med['uni']['stop_s']:.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
