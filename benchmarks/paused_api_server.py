"""After vLLM's API server is paused (SIGSTOP 2.5 s, as a busy machine sometimes freezes it), how many windows
does a decode cell stay disturbed, by request length?

One embedded vLLM (the session's main configuration). Each round measures one decode cell (256-token context,
1 stream, 6 s windows, up to 8 retries) with `run_matrix`, pauses the API server 1.5 s after the first request
runs, and reads the cell's attempts and, from its trace, how many tokens each request streamed before its longest
silence. Request lengths alternate round by round (A B B A ...). Seen on vLLM 0.32 CPU (2026-12-07): with 3,776
tokens a request, some rounds streamed each later request's first ~200 tokens and held the rest until it ended,
8-9 s silent, so every window of the cell was disturbed for a minute.

    .venv/bin/python benchmarks/paused_api_server.py --rounds 4

The last line: `paused_api_server: <tokens>=<rounds measured again once>/<rounds> max_attempts_<tokens>=<n> ...`.
"""

from __future__ import annotations

import argparse
import os
import signal
import tempfile
import threading
import time
from pathlib import Path

import httpx

from toolkit.matrix.prometheus import RUNNING, parse_metrics
from toolkit.matrix.runner import run_matrix
from toolkit.matrix.traces import load_trace
from toolkit.method.paired import alternating_order
from toolkit.method.status import STALL_MIN_S
from toolkit.params import make_params
from toolkit.servers.embedded.server import EmbeddedServer, ServerConfig

KEY_ENV = "VLLM_API_KEY"
LENGTHS = {"A": 3776, "B": 256}  # the first: the longest that a 256-token context leaves in 4,096


def streamed_before_hold(out: Path) -> int:
    """The most tokens any request streamed before its longest silence, among requests silent for longer than the
    stall limit (`STALL_MIN_S`); 0 when none was."""
    tokens = load_trace(out, 256, 1)
    tokens = tokens[tokens.kind == "token"].sort_values("t_s")
    most = 0
    for _, request in tokens.groupby("request"):
        gaps = request.t_s.diff()
        if len(request) > 1 and gaps.max() > STALL_MIN_S:
            most = max(most, int(request.tokens.iloc[int(gaps.fillna(0).to_numpy().argmax()) - 1]))
    return most


def one_round(server: EmbeddedServer, max_output: int, out: Path) -> tuple[int, int]:
    """The cell's attempts and the tokens streamed before a hold, after one 2.5 s pause of the API server."""
    params = make_params({"base_url": server.base_url, "contexts": ["256"], "concurrency": [1], "duration_s": 6,
                          "max_output": max_output, "readiness_timeout_s": 60, "disturbed_retries": 8,
                          "control_window_s": 0, "api_key_env": KEY_ENV})  # fmt: skip
    box: dict[str, list] = {}
    runner = threading.Thread(target=lambda: box.update(cells=run_matrix(params, out, phases=("decode",),
                                                                         progress=False)))  # fmt: skip
    runner.start()
    deadline = time.monotonic() + 120
    while not parse_metrics(httpx.get(server.base_url + "/metrics", timeout=10).text).value(RUNNING):
        if time.monotonic() > deadline or not runner.is_alive():
            raise SystemExit("error: the cell's first request never ran")
        time.sleep(0.1)
    time.sleep(1.5)
    assert server.process is not None
    os.kill(server.process.pid, signal.SIGSTOP)
    time.sleep(2.5)
    os.kill(server.process.pid, signal.SIGCONT)
    runner.join(600)
    (cell,) = box["cells"]
    return cell.attempts, streamed_before_hold(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds (each measures both lengths)")
    args = parser.parse_args()
    key = "sk-benchmark-paused-0001"
    os.environ[KEY_ENV] = key
    seen: dict[int, list[int]] = {length: [] for length in LENGTHS.values()}
    server = EmbeddedServer(ServerConfig(max_model_len=4096), api_key=key).start()
    try:
        with tempfile.TemporaryDirectory(prefix="paused-") as work:
            for index, (round_index, side) in enumerate(alternating_order(args.rounds)):
                length = LENGTHS[side]
                attempts, held_after = one_round(server, length, Path(work) / f"cell-{index}")
                seen[length].append(attempts)
                print(f"round {round_index} {length:5d} tokens: attempts {attempts}, longest silence after "
                      f"{held_after} streamed tokens", flush=True)  # fmt: skip
    finally:
        server.stop()
    parts = [f"{length}={sum(a == 2 for a in runs)}/{len(runs)} max_attempts_{length}={max(runs)}"
             for length, runs in seen.items()]  # fmt: skip
    print("paused_api_server: " + " ".join(parts))


if __name__ == "__main__":
    main()
