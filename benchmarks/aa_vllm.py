"""A/A against the embedded vLLM: the same configuration compared with itself, plain and interleaved.

One embedded vLLM (this session, its own process group) and one small matrix (512 × 1, 2 streams, 3 s windows,
a 1 s drift control). Each compare is `toolkit interleave` with both sides the same server and configuration,
`--rounds` rounds (A B, B A, …): the paired report (toolkit.reports.interleaved) gives the interleaved verdict,
and round 1's two runs compared as ordinary runs (toolkit.reports.compare.ratio_table) the plain one. Nothing
differs, so every cell marked significant is a false mark; the family correction should keep compares with
any mark near 5 %.

    .venv/bin/python benchmarks/aa_vllm.py [--compares 10] [--rounds 4]

Each compare's line quotes its report's minimum detectable effect (interleaved.md, at 80 % power from the rounds'
own spread). Last line: `aa_vllm: compares=… rounds=… plain_any_marked=<k>/<n> interleaved_any_marked=<k>/<n>
plain_median_ratio_hw=… interleaved_median_ratio_hw=… minutes=…`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

MATRIX = {"contexts": ["512"], "concurrency": [1, 2], "duration_s": 3, "max_output": 256,
          "readiness_timeout_s": 30, "control_window_s": 1}  # fmt: skip
QUANTITIES = ("total_tok_s", "per_request_tok_s", "ttft_ms")


def plain(out: Path) -> tuple[bool, list[float]]:
    """Round 1's two runs as an ordinary compare: (any cell marked, the ratios' half-widths)."""
    from toolkit.batch.interleave import round_folder
    from toolkit.reports.compare import ratio_table
    from toolkit.results.runs import load_runs

    frame = load_runs([round_folder(out, "A", 1), round_folder(out, "B", 1)], ["A", "B"])
    table = ratio_table(frame[frame["phase"] == "decode"], "A", "B")
    marked = any(bool(v) for q in QUANTITIES for v in table[f"{q}_significant"] if v is not None)
    return marked, [float(v) for v in table["total_tok_s_ratio_hw"].dropna()]


def interleaved(out: Path) -> tuple[bool, list[float]]:
    from toolkit.batch.interleave import TABLE

    table = pd.read_csv(out / TABLE)
    marked = any(bool(v) for q in QUANTITIES for v in table[f"{q}_significant"].fillna(False))
    return marked, [float(v) for v in table["total_tok_s_ratio_hw"].dropna()]


def detectable_line(out: Path) -> str:
    """The interleaved report's own minimum-detectable-effect line, as a user reads it."""
    from toolkit.batch.interleave import REPORT

    lines = [x for x in (out / REPORT).read_text().splitlines() if x.startswith("Minimum detectable effect")]
    return lines[0] if lines else "no minimum detectable effect in the report"


def main() -> None:
    from toolkit.batch.interleave import run_interleaved
    from toolkit.params import make_params
    from toolkit.servers.embedded.server import EmbeddedServer, ServerConfig

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compares", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=4)  # as `toolkit interleave`
    args = parser.parse_args()
    started = time.monotonic()
    results = []
    with EmbeddedServer(ServerConfig(max_model_len=4096)) as server:
        params = make_params({"base_url": server.base_url, **MATRIX})
        for c in range(args.compares):
            out = Path(tempfile.mkdtemp(prefix="aa-vllm-"))
            run_interleaved({"A": params, "B": params}, args.rounds, out, say=lambda line: None)
            results.append((plain(out), interleaved(out)))
            (p_marked, _), (i_marked, _) = results[-1]
            shown = {True: "MARKED", False: "none"}
            elapsed = time.monotonic() - started
            print(f"compare {c + 1}: plain {shown[p_marked]}, interleaved {shown[i_marked]} ({elapsed:.0f} s; {out})\n"
                  f"  {detectable_line(out)}", flush=True)  # fmt: skip
    n = len(results)
    plain_marks = sum(p for (p, _), _ in results)
    inter_marks = sum(i for _, (i, _) in results)
    plain_hw = statistics.median(h for (_, hws), _ in results for h in hws)
    inter_hw = statistics.median(h for _, (_, hws) in results for h in hws)
    print(f"aa_vllm: compares={n} rounds={args.rounds} plain_any_marked={plain_marks}/{n} "
          f"interleaved_any_marked={inter_marks}/{n} plain_median_ratio_hw={plain_hw:.3f} "
          f"interleaved_median_ratio_hw={inter_hw:.3f} minutes={(time.monotonic() - started) / 60:.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
