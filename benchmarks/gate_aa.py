"""A/A of the regression gate over a real network: two identical fault servers, fresh interleaved runs, gated.

Each of `--gates` gates measures two fault servers that both stream a token every `--interval-ms`
(tests/faultserver.py, in threads of this process) in `--rounds` interleaved rounds
(`toolkit.batch.interleave.run_interleaved`, the matrix of tests/component/test_gate.py: 64 tokens × 1 request,
0.5 s windows) and runs `vllm-speedtest gate DIR --max-regression 3%`.
No true change: a gate must never say "fail". Optionally (`--regressed-ms 11.5`) the candidate streams slower, for
the known-truth pair.

    .venv/bin/python benchmarks/gate_aa.py [--gates 20] [--rounds 4] [--interval-ms 10] [--limit '3%']
    .venv/bin/python benchmarks/gate_aa.py --gates 10 --regressed-ms 11.5 --limit '5%;20%'   # the known truth

Last lines, one per limit: `gate_aa: gates=20 … limit=3% exits=0:…,3:… lines fail=… pass=… inconclusive=…`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.faultserver import FaultServer  # noqa: E402
from toolkit.batch.interleave import run_interleaved  # noqa: E402
from toolkit.cli.entry import main as toolkit  # noqa: E402
from toolkit.params import make_params  # noqa: E402

COMMON = {"contexts": [64], "concurrency": [1], "duration_s": 0.5, "max_output": 24, "readiness_timeout_s": 5.0,
          "read_timeout_s": 5.0, "control_window_s": 0, "api_key_env": "GATE_AA_NO_KEY"}  # fmt: skip


def one_gate(
    out: Path, intervals_s: tuple[float, float], rounds: int, limits: list[str], matrix: dict[str, object]
) -> list[tuple[int, list[str]]]:
    with FaultServer(token_interval_s=intervals_s[0]) as a, FaultServer(token_interval_s=intervals_s[1]) as b:
        params = {
            label: make_params({**COMMON, **matrix, "base_url": server.base_url, "run_label": label})
            for label, server in (("base", a), ("cand", b))
        }
        run_interleaved(params, rounds, out, say=lambda _: None)
    found = []
    for limit in limits:
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            status = toolkit(["gate", str(out), "--max-regression", limit])
        found.append((status, printed.getvalue().splitlines()))
    return found


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gates", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--interval-ms", type=float, default=10.0)
    ap.add_argument("--regressed-ms", type=float, help="the candidate's interval (default: the same, an A/A)")
    ap.add_argument("--duration", type=float, default=COMMON["duration_s"], help="window, s")
    ap.add_argument("--max-output", type=int, default=COMMON["max_output"], help="tokens a request")
    ap.add_argument("--limit", default="3%", help="comma-free limits separated by ';' each gate is judged at")
    args = ap.parse_args(argv)
    intervals = (args.interval_ms / 1000, (args.regressed_ms or args.interval_ms) / 1000)
    limits = args.limit.split(";")
    matrix: dict[str, object] = {"duration_s": args.duration, "max_output": args.max_output}
    exits: dict[str, Counter[int]] = {limit: Counter() for limit in limits}
    verdicts: dict[str, Counter[str]] = {limit: Counter() for limit in limits}
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for number in range(1, args.gates + 1):
            for limit, (status, lines) in zip(limits, one_gate(Path(tmp) / f"gate{number}", intervals, args.rounds,
                                                                 limits, matrix), strict=True):  # fmt: skip
                exits[limit][status] += 1
                verdicts[limit].update(line.split(" ", 1)[0] for line in lines)
                print(f"gate {number} at {limit}: exit {status}; " + " | ".join(lines), flush=True)
    spent = time.monotonic() - started
    for limit in limits:
        print(f"gate_aa: gates={args.gates} rounds={args.rounds} window_s={args.duration:g} "
              f"max_output={args.max_output} interval_ms={args.interval_ms:g},"
              f"{args.regressed_ms or args.interval_ms:g} limit={limit} "
              f"exits={','.join(f'{k}:{v}' for k, v in sorted(exits[limit].items()))} "
              f"lines fail={verdicts[limit]['FAIL']} pass={verdicts[limit]['PASS']} "
              f"inconclusive={verdicts[limit]['INCONCLUSIVE']} seconds={spent:.0f}")  # fmt: skip


if __name__ == "__main__":
    main()
