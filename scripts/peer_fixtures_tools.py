"""Make GuideLLM's and AIPerf's fixtures in tests/fixtures/peers/: the peers' workload, run by the tools themselves.

    .venv/bin/python scripts/peer_fixtures_tools.py [--rate 4] [--requests 24] [--out tests/fixtures/peers]

One embedded vLLM (CPU, tiny model) serves, in turn, at a Poisson rate, `--requests` random prompts of
`--input-tokens` tokens, `--output-tokens` out each (EOS ignored), streamed from /v1/completions, seed 1:
- GuideLLM (.venv-bench): its benchmarks JSON, every request's stats in it: `guidellm-<rate>rps.json`;
- AIPerf (.venv-aiperf): its per-request `profile_export.jsonl` and aggregate `profile_export_aiperf.json`,
  the rest of its artifacts (CSV, logs, inputs) left out: `aiperf-<rate>rps/`.

Each tool's command line and wall time are printed; the lines are in tests/fixtures/peers/README.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.peer_fixtures import workload_arguments  # noqa: E402
from toolkit.servers.embedded.server import MODEL_DIR, SERVED_MODEL_NAME, EmbeddedServer  # noqa: E402

GUIDELLM = ROOT / ".venv-bench" / "bin" / "guidellm"
AIPERF = ROOT / ".venv-aiperf" / "bin" / "aiperf"
LOCAL_REVISION = "0" * 40  # the fake hub cache's one snapshot
AIPERF_KEPT = ("profile_export.jsonl", "profile_export_aiperf.json")
OFFLINE = {
    "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "NO_PROXY": "127.0.0.1,localhost",
}  # fmt: skip


def run_tool(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
    """Run one tool to the end, offline, printing its command line and wall time."""
    print("$ " + " ".join([*(f"{k}={v}" for k, v in (env or {}).items()), *cmd]), flush=True)
    began = time.monotonic()
    subprocess.run(cmd, check=True, cwd=cwd, env={**os.environ, **OFFLINE, **(env or {})}, timeout=900)
    print(f"wall time: {time.monotonic() - began:.1f} s", flush=True)


def guidellm(base_url: str, args: argparse.Namespace, out: Path) -> Path:
    target = out / f"guidellm-{args.rate:g}rps.json"
    with tempfile.TemporaryDirectory() as scratch:
        saved = Path(scratch) / "benchmarks.json"
        cmd = [str(GUIDELLM), "run",
               "--backend", f"kind=openai_http,target={base_url},model={SERVED_MODEL_NAME},"
               "request_format=/v1/completions",
               "--profile", f"kind=poisson,rate={args.rate:g}",
               "--constraint", f"kind=max_requests,count={args.requests}",
               "--tokenizer", f"kind=huggingface_auto,model={MODEL_DIR}",
               "--data", f"kind=synthetic_text,prompt_tokens={args.input_tokens},output_tokens={args.output_tokens}",
               "--seed", "kind=static,value=1",
               "--output", f"kind=json,path={saved}", "--output", "kind=console",
               "--disable-console-interactive"]  # fmt: skip
        run_tool(cmd, Path(scratch))
        shutil.copyfile(saved, target)
    return target


def hub_cache(scratch: Path) -> Path:
    """A Hugging Face cache holding the tiny model's tokenizer as the repo `tiny-llama` (links to MODEL_DIR).

    AIPerf 0.13.0, offline, looks a tokenizer up in the hub cache only (Tokenizer._resolve_local_snapshot):
    a folder path fails with HFValidationError ("Repo id must be in the form 'repo_name' ...")."""
    repo = scratch / "hub" / f"models--{SERVED_MODEL_NAME}"
    snapshot = repo / "snapshots" / LOCAL_REVISION
    snapshot.mkdir(parents=True)
    for file in [MODEL_DIR / "config.json", *MODEL_DIR.glob("tokenizer*")]:
        (snapshot / file.name).symlink_to(file)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(LOCAL_REVISION)
    return scratch / "hub"


def aiperf(base_url: str, args: argparse.Namespace, out: Path) -> Path:
    folder = out / f"aiperf-{args.rate:g}rps"
    with tempfile.TemporaryDirectory() as scratch:
        artifacts = Path(scratch) / "artifacts"
        cmd = [str(AIPERF), "profile", "--model", SERVED_MODEL_NAME, "--url", base_url,
               "--endpoint-type", "completions", "--streaming", "--tokenizer", SERVED_MODEL_NAME,
               "--use-server-token-count", "--request-rate", f"{args.rate:g}", "--arrival-pattern", "poisson",
               "--request-count", str(args.requests), "--isl", str(args.input_tokens), "--isl-stddev", "0",
               "--osl", str(args.output_tokens), "--osl-stddev", "0", "--extra-inputs", "ignore_eos:true",
               "--random-seed", "1", "--ui", "none", "--no-server-metrics", "--no-gpu-telemetry",
               "--output-artifact-dir", str(artifacts)]  # fmt: skip
        run_tool(cmd, Path(scratch), {"HF_HUB_CACHE": str(hub_cache(Path(scratch)))})
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        for name in AIPERF_KEPT:
            found = sorted(artifacts.rglob(name))
            if len(found) != 1:
                raise SystemExit(f"AIPerf wrote {len(found)} files named {name} under {artifacts}; expected one")
            shutil.copyfile(found[0], folder / name)
    return folder


def main() -> None:
    args = workload_arguments(__doc__)
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    print("starting the embedded vLLM ...", flush=True)
    with EmbeddedServer() as server:
        written = [guidellm(server.base_url, args, args.out), aiperf(server.base_url, args, args.out)]
    print("wrote: " + ", ".join(str(p.relative_to(ROOT)) for p in written))


if __name__ == "__main__":
    main()
