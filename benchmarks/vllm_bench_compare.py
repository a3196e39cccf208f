"""The toolkit's rate step side by side with `vllm bench serve` on the same server, at the same rates and lengths,
in interleaved rounds, each ratio with its interval.

Starts the embedded vLLM (tiny model, CPU) unless `--base-url` is given, then for each of `--rates`, runs
`--rounds` rounds of the same load through each side, the order alternating from round to round (A B C, C B A,
...):
- `vllm`: `vllm bench serve --backend vllm --dataset-name random --random-input-len 128 --random-output-len 64
  --random-range-ratio 0 --ignore-eos --request-rate R --burstiness 1 --num-prompts N` (vLLM's own benchmark
  from `.venv-vllm`, offline, the tiny model's tokenizer; called through `vllm.benchmarks.serve` because this
  wheel's `vllm` console script cannot find its own distribution name), its result saved as JSON;
- `cli`: `python -m toolkit rates` with one Poisson step of N requests at R, 128 in / 64 out, `completions`;
- `notebook`: notebooks/rate_sweep.ipynb executed by papermill with the same parameters.
Both tools rescale their drawn gaps so that the schedule holds R exactly. Per round and side it prints output
throughput, median TTFT, TPOT and ITL; then, per rate and toolkit path, each ratio toolkit / vllm bench as the
geometric mean of the rounds' ratios with its 95 % t interval over the rounds
(`toolkit.method.paired.paired_ratio`). One line per rate and path: `vllm_bench_compare: rate=… path=…
output_tok_s=<ratio>±<half width> ttft_p50=… tpot_p50=… itl_p50=… rounds=…`.

Usage: flock /tmp/vllm.lock .venv/bin/python benchmarks/vllm_bench_compare.py [--rates 2,4] [--requests 40]
    [--rounds 5] [--paths cli,notebook] [--fault-server MS]

`--fault-server MS` puts the tests' fault server in vLLM's place: it answers every request the same way
whatever the client (first token after about 2 ms, then one every MS ms), so a TTFT ratio away from 1 there is
the tools' own timing, not the server's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
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
KEYS = ("output_tok_s", "ttft_p50_ms", "tpot_p50_ms", "itl_p50_ms")


def vllm_bench(base_url: str, model: str, args: argparse.Namespace, rate: float, seed: int, folder: Path
               ) -> dict[str, float]:  # fmt: skip
    cmd = [str(VLLM_PYTHON), "-c", BENCH, "--backend", "vllm", "--base-url", base_url, "--model", model,
           "--tokenizer", str(TOKENIZER), "--dataset-name", "random", "--random-input-len", str(args.input_tokens),
           "--random-output-len", str(args.output_tokens), "--random-range-ratio", "0", "--ignore-eos",
           "--request-rate", str(rate), "--burstiness", "1", "--num-prompts", str(args.requests),
           "--seed", str(seed), "--num-warmups", "0", "--disable-tqdm", "--save-result", "--result-dir",
           str(folder), "--result-filename", f"vllm-{rate:g}-{seed}.json"]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "NO_PROXY": "127.0.0.1,localhost"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    path = folder / f"vllm-{rate:g}-{seed}.json"
    if done.returncode != 0 or not path.exists():
        raise RuntimeError(f"vllm bench serve failed ({done.returncode}):\n{done.stderr[-2000:]}")
    data = json.loads(path.read_text())
    if data["completed"] != args.requests:
        raise RuntimeError(f"vllm bench serve completed {data['completed']} of {args.requests} requests")
    return {"output_tok_s": data["output_throughput"], "ttft_p50_ms": data["median_ttft_ms"],
            "tpot_p50_ms": data["median_tpot_ms"], "itl_p50_ms": data["median_itl_ms"],
            "completed": data["completed"]}  # fmt: skip


def toolkit_values(base_url: str, args: argparse.Namespace, rate: float, seed: int) -> dict[str, object]:
    return {"base_url": base_url, "endpoint": "completions", "rates": [rate], "requests_per_step": args.requests,
            "input_tokens": args.input_tokens, "output_tokens": args.output_tokens, "seed": seed}  # fmt: skip


def toolkit_cli(base_url: str, args: argparse.Namespace, rate: float, seed: int, folder: Path) -> dict[str, float]:
    """`python -m toolkit rates`, one step."""
    out = folder / f"cli-{rate:g}-{seed}"
    cmd = [sys.executable, "-m", "toolkit", "rates", "--base-url", base_url, "--endpoint", "completions",
           "--rates", f"{rate:g}", "--requests", str(args.requests), "--input-tokens", str(args.input_tokens),
           "--output-tokens", str(args.output_tokens), "--seed", str(seed), "--out", str(out)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"toolkit rates failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return step_figures(out)


def toolkit_notebook(base_url: str, args: argparse.Namespace, rate: float, seed: int, folder: Path
                     ) -> dict[str, float]:  # fmt: skip
    """notebooks/rate_sweep.ipynb executed by papermill, one step."""
    from toolkit.jupyter.execute import execute

    out = folder / f"notebook-{rate:g}-{seed}"
    out.mkdir()
    values = {name.upper(): value for name, value in toolkit_values(base_url, args, rate, seed).items()}
    execute("rate_sweep", out, {**values, "DURATION_S": None, "RESULTS_DIR": str(out), "MEASURE": True})
    return step_figures(out)


def step_figures(out: Path) -> dict[str, float]:
    from toolkit.rates.files import read_steps

    (row,) = read_steps(out)
    return {"output_tok_s": row["output_tok_s"], "ttft_p50_ms": row["ttft_p50_ms"],
            "tpot_p50_ms": row["tpot_p50_ms"], "itl_p50_ms": row["itl_p50_ms"],
            "completed": row["completed"]}  # fmt: skip


SIDES = {"vllm": None, "cli": toolkit_cli, "notebook": toolkit_notebook}


def rounds(base_url: str, model: str, args: argparse.Namespace, rate: float, folder: Path
           ) -> list[dict[str, dict[str, float]]]:  # fmt: skip
    """`args.rounds` rounds at `rate`, each side once a round, the order reversed every other round."""
    sides = ["vllm", *args.paths]
    results = []
    for k in range(args.rounds):
        row: dict[str, dict[str, float]] = {}
        for who in sides if k % 2 == 0 else sides[::-1]:
            run = SIDES[who]
            row[who] = vllm_bench(base_url, model, args, rate, k, folder) if run is None else run(
                base_url, args, rate, k, folder)  # fmt: skip
        results.append(row)
        print(f"rate {rate:g} round {k + 1}: " + "; ".join(
            f"{who} out {row[who]['output_tok_s']:.1f} tok/s, TTFT p50 {row[who]['ttft_p50_ms']:.1f} ms, "
            f"TPOT p50 {row[who]['tpot_p50_ms']:.2f} ms, ITL p50 {row[who]['itl_p50_ms']:.2f} ms, "
            f"{row[who]['completed']:.0f} ok" for who in sides),
            flush=True)  # fmt: skip
    return results


def final(results: list[dict[str, dict[str, float]]], rate: float, path: str) -> str:
    """Each ratio path / vllm bench over the rounds, with its interval (paired by round)."""
    from toolkit.method.paired import paired_ratio

    shown = []
    for key in KEYS:
        ratio = paired_ratio([r["vllm"][key] for r in results], [r[path][key] for r in results])
        text = "-" if ratio is None else f"{ratio.interval.value:.3f}±{ratio.interval.half_width:.3f}"
        shown.append(f"{key.removesuffix('_ms')}={text}")
        if ratio is not None:
            p = ratio.p_value
            print(f"rate {rate:g} {path:>8} / vllm bench {key:>13}: {text} (p {p:.3f})")
    return f"vllm_bench_compare: rate={rate:g} path={path} {' '.join(shown)} rounds={len(results)}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base-url", help="a running server (default: start the embedded vLLM)")
    ap.add_argument("--model", default="tiny-llama", help="served model name (default tiny-llama)")
    ap.add_argument("--rates", default="2,4", help="requests/s, below the server's capacity (default 2,4)")
    ap.add_argument("--requests", type=int, default=40, help="requests per run (default 40)")
    ap.add_argument("--input-tokens", type=int, default=128)
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--paths", default="cli,notebook", help="the toolkit's paths: cli, notebook (default both)")
    ap.add_argument("--fault-server", type=float, metavar="MS", help="instead of vLLM: the tests' fault server "
                    "(tests/faultserver.py), first token after ~2 ms, then one every MS ms, whatever the client: "
                    "what differs between the tools there is their own timing")  # fmt: skip
    args = ap.parse_args()
    args.paths = [p for p in args.paths.split(",") if p]
    if unknown := sorted(set(args.paths) - {"cli", "notebook"}):
        ap.error(f"--paths: {unknown[0]!r}; allowed: cli, notebook")
    rates = [float(r) for r in args.rates.split(",")]
    with contextlib.ExitStack() as stack:
        base_url = args.base_url
        if args.fault_server is not None:
            from tests.faultserver import MODEL, FaultServer

            base_url, args.model = (
                stack.enter_context(FaultServer(token_interval_s=args.fault_server / 1000)).base_url,
                MODEL,
            )
        elif base_url is None:
            from toolkit.servers.embedded.server import EmbeddedServer, ServerConfig

            print("starting the embedded vLLM ...", flush=True)
            base_url = stack.enter_context(EmbeddedServer(ServerConfig(max_model_len=4096))).base_url
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="vllm-bench-compare-")))
        lines = []
        for rate in rates:
            results = rounds(base_url, args.model, args, rate, folder)
            lines += [final(results, rate, path) for path in args.paths]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
