"""Does this machine pause? An independent probe process oversleeps while different loads run.

A probe sleeps 10 ms in a loop and records every wake-up more than 100 ms late. Side by side, in one run:
  idle       nothing else runs
  burners    two pure-Python CPU burners (both cores busy, no vLLM)
  vllm       the embedded vLLM decoding 4 streams from the toolkit's own runner (the test suite's load)
A pause that hits the probe hits every process: the server's tokens and the client's timestamps stop too.

    .venv/bin/python benchmarks/machine_pauses.py [--seconds 60] [--vllm-env NAME=VALUE ...]

`--vllm-env` adds a `vllm+env` phase: the same vLLM load with those variables in the server's environment
(for example glibc's MALLOC_MMAP_THRESHOLD_), to test a suspected cause side by side with `vllm`.

Last line: `machine_pauses: idle=<n>/<max s> burners=<n>/<max s> vllm=<n>/<max s>` (count of late wake-ups
over 100 ms, and the longest, per phase).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PROBE = """
import sys, time
end = time.monotonic() + float(sys.argv[1])
last = time.monotonic()
while time.monotonic() < end:
    time.sleep(0.01)
    now = time.monotonic()
    if now - last > 0.11:
        print(f"{now - last:.3f}", flush=True)
    last = now
"""


def probe(seconds: float, load: Callable[[float], None]) -> list[float]:
    """Run the probe for `seconds` while `load(seconds)` runs in this process; late wake-ups in seconds."""
    proc = subprocess.Popen([sys.executable, "-c", PROBE, str(seconds)], stdout=subprocess.PIPE, text=True)
    load(seconds)
    out, _ = proc.communicate()
    return [float(x) - 0.01 for x in out.split()]


def idle(seconds: float) -> None:
    time.sleep(seconds)


def burners(seconds: float) -> None:
    spin = f"import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end: pass"
    procs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(2)]
    for p in procs:
        p.wait()


def vllm_load(server_url: str) -> Callable[[float], None]:
    from toolkit.params import make_params
    from toolkit.runner import run_matrix

    def load(seconds: float) -> None:
        stop = time.monotonic() + seconds
        params = make_params({"base_url": server_url, "contexts": ["1K"], "concurrency": [4], "duration_s": 5,
                              "max_output": 1024, "disturbed_retries": 0})  # fmt: skip
        while time.monotonic() < stop - 8:
            run_matrix(params, tempfile.mkdtemp(), phases=("decode",), progress=False)
        time.sleep(max(0.0, stop - time.monotonic()))

    return load


def probe_vllm(seconds: float, extra_env: dict[str, str]) -> list[float]:
    """The probe while a fresh embedded vLLM (its environment plus `extra_env`) decodes."""
    from toolkit.embedded.server import EmbeddedServer, ServerConfig

    saved = dict(os.environ)
    os.environ.update(extra_env)  # the embedded server inherits this process's environment
    try:
        with EmbeddedServer(ServerConfig(max_model_len=4096)) as server:
            threading.Event().wait(2)
            return probe(seconds, vllm_load(server.base_url))
    finally:
        os.environ.clear()
        os.environ.update(saved)


def summary(name: str, lates: list[float]) -> str:
    return f"{name}={len(lates)}/{max(lates, default=0.0):.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--vllm-env", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args()
    extra = dict(item.split("=", 1) for item in args.vllm_env)

    results = {"idle": probe(args.seconds, idle), "burners": probe(args.seconds, burners)}
    results["vllm"] = probe_vllm(args.seconds, {})
    if extra:
        results["vllm+env"] = probe_vllm(args.seconds, extra)
    for name, lates in results.items():
        print(f"{name:8} late wake-ups > 100 ms: {len(lates):3}  total {sum(lates):6.2f} s  longest "
              f"{max(lates, default=0.0):.2f} s")  # fmt: skip
    print("machine_pauses: " + " ".join(summary(n, lates) for n, lates in results.items()))


if __name__ == "__main__":
    main()
