"""The toolkit's rate step side by side with `vllm bench serve` on the same server, at the same rate and lengths.

Starts the embedded vLLM (tiny model, CPU) unless `--base-url` is given, then runs, in alternating order for
`--rounds` rounds, the same load through:
- `vllm bench serve --backend vllm --dataset-name random --random-input-len 128 --random-output-len 64
  --random-range-ratio 0 --ignore-eos --request-rate R --burstiness 1 --num-prompts N` (vLLM's own benchmark
  from `.venv-vllm`, offline, the tiny model's tokenizer; called through `vllm.benchmarks.serve` because this
  wheel's `vllm` console script cannot find its own distribution name), its result saved as JSON;
- `toolkit.rates.runner.run_rates` with one Poisson step of N requests at R, 128 in / 64 out, `completions`.
It prints, per round and as medians over rounds, output throughput and median TTFT and TPOT of each, and their
ratios (toolkit / vllm bench). vllm bench rescales its drawn gaps so that the last request leaves at exactly
N / R seconds; the toolkit keeps the Poisson draw as it falls (its schedule's own rate, `scheduled_rate`, varies
by about 1 / sqrt(N) around R). Below capacity the output throughput follows the rate actually sent, so the
throughput is also compared per request/s of each side's schedule (`output_tok_s_per_rate_ratio`): the
clients' difference without the draw's. Last line: `vllm_bench_compare: rate=… output_tok_s_ratio=…
output_tok_s_per_rate_ratio=… ttft_p50_ratio=… tpot_p50_ratio=…`.

Usage: flock /tmp/vllm.lock .venv/bin/python benchmarks/vllm_bench_compare.py [--rate 2] [--requests 40]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
TOKENIZER = ROOT / ".cache" / "tiny-llama"
BENCH = (
    "import sys\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "parser = FlexibleArgumentParser()\n"
    "add_cli_args(parser)\n"
    "main(parser.parse_args(sys.argv[1:]))\n"
)
KEYS = ("output_tok_s", "output_tok_s_per_rate", "ttft_p50_ms", "tpot_p50_ms")


def vllm_bench(base_url: str, model: str, args: argparse.Namespace, seed: int, folder: Path) -> dict[str, float]:
    cmd = [str(VLLM_PYTHON), "-c", BENCH, "--backend", "vllm", "--base-url", base_url, "--model", model,
           "--tokenizer", str(TOKENIZER), "--dataset-name", "random", "--random-input-len", str(args.input_tokens),
           "--random-output-len", str(args.output_tokens), "--random-range-ratio", "0", "--ignore-eos",
           "--request-rate", str(args.rate), "--burstiness", "1", "--num-prompts", str(args.requests),
           "--seed", str(seed), "--num-warmups", "0", "--disable-tqdm", "--save-result", "--result-dir",
           str(folder), "--result-filename", f"vllm-{seed}.json"]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "NO_PROXY": "127.0.0.1,localhost"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    path = folder / f"vllm-{seed}.json"
    if done.returncode != 0 or not path.exists():
        raise RuntimeError(f"vllm bench serve failed ({done.returncode}):\n{done.stderr[-2000:]}")
    data = json.loads(path.read_text())
    if data["completed"] != args.requests:
        raise RuntimeError(f"vllm bench serve completed {data['completed']} of {args.requests} requests")
    scheduled = args.rate * (args.requests - 1) / args.requests  # (n - 1) / span, the span rescaled to N / R
    return {"output_tok_s": data["output_throughput"], "ttft_p50_ms": data["median_ttft_ms"],
            "tpot_p50_ms": data["median_tpot_ms"], "completed": data["completed"],
            "output_tok_s_per_rate": data["output_throughput"] / scheduled}  # fmt: skip


def toolkit_step(base_url: str, args: argparse.Namespace, seed: int, folder: Path) -> dict[str, float]:
    from toolkit.rates.files import read_steps
    from toolkit.rates.params import make_rate_params
    from toolkit.rates.runner import run_rates

    params = make_rate_params({
        "base_url": base_url, "endpoint": "completions", "rates": [args.rate], "requests_per_step": args.requests,
        "input_tokens": args.input_tokens, "output_tokens": args.output_tokens, "seed": seed,
        "results_dir": str(folder / f"toolkit-{seed}"),
    })  # fmt: skip
    (row,) = read_steps(run_rates(params, say=lambda line: None))
    return {"output_tok_s": row["output_tok_s"], "ttft_p50_ms": row["ttft_p50_ms"],
            "tpot_p50_ms": row["tpot_p50_ms"], "completed": row["completed"],
            "lag_p99_ms": row["lag_p99_ms"],
            "output_tok_s_per_rate": row["output_tok_s"] / row["scheduled_rate"]}  # fmt: skip


def rounds(base_url: str, model: str, args: argparse.Namespace) -> list[dict[str, dict[str, float]]]:
    results = []
    with tempfile.TemporaryDirectory(prefix="vllm-bench-compare-") as tmp:
        for k in range(args.rounds):
            order = ("vllm", "toolkit") if k % 2 == 0 else ("toolkit", "vllm")
            row: dict[str, dict[str, float]] = {}
            for who in order:
                if who == "vllm":
                    row[who] = vllm_bench(base_url, model, args, k, Path(tmp))
                else:
                    row[who] = toolkit_step(base_url, args, k, Path(tmp))
            results.append(row)
            print(f"round {k + 1}: " + "; ".join(
                f"{who} out {row[who]['output_tok_s']:.1f} tok/s, TTFT p50 {row[who]['ttft_p50_ms']:.1f} ms, "
                f"TPOT p50 {row[who]['tpot_p50_ms']:.2f} ms, {row[who]['completed']:.0f} ok" for who in order),
                flush=True)  # fmt: skip
    return results


def final(results: list[dict[str, dict[str, float]]], rate: float) -> str:
    med = {who: {k: statistics.median(r[who][k] for r in results) for k in KEYS} for who in ("toolkit", "vllm")}
    ratio = {k: med["toolkit"][k] / med["vllm"][k] for k in KEYS}
    for k in KEYS:
        print(f"{k:>21}: toolkit {med['toolkit'][k]:.2f}, vllm bench {med['vllm'][k]:.2f}, ratio {ratio[k]:.3f}")
    return (f"vllm_bench_compare: rate={rate:g} output_tok_s_ratio={ratio['output_tok_s']:.3f} "
            f"output_tok_s_per_rate_ratio={ratio['output_tok_s_per_rate']:.3f} "
            f"ttft_p50_ratio={ratio['ttft_p50_ms']:.3f} tpot_p50_ratio={ratio['tpot_p50_ms']:.3f}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base-url", help="a running server (default: start the embedded vLLM)")
    ap.add_argument("--model", default="tiny-llama", help="served model name (default tiny-llama)")
    ap.add_argument("--rate", type=float, default=2.0, help="requests/s, below the server's capacity (default 2)")
    ap.add_argument("--requests", type=int, default=40, help="requests per run (default 40)")
    ap.add_argument("--input-tokens", type=int, default=128)
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    if args.base_url:
        print(final(rounds(args.base_url, args.model, args), args.rate))
        return
    from toolkit.servers.embedded.server import EmbeddedServer, ServerConfig

    print("starting the embedded vLLM ...", flush=True)
    with EmbeddedServer(ServerConfig(max_model_len=4096)) as server:
        line = final(rounds(server.base_url, args.model, args), args.rate)
    print(line)


if __name__ == "__main__":
    main()
