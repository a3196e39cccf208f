"""The GPU telemetry path (toolkit/servers/gpu.py) against a real NVIDIA GPU under a known load.

The tests drive gpu.py through a fake NVML (tests/fake_nvml.py); this checks the same code against the real
driver: an idle window, a window of bf16 matrix multiplies (torch), and an idle window after, each read with
`window_telemetry` from one `telemetry()` sampler exactly as the decode matrix reads its cells. It prints one
JSON document and says which expectations held:

- the facts (`installed_gpus`) name the GPU, its memory, the driver and the CUDA version;
- the sampler keeps its 4 Hz per GPU (within 20 %), and one `read_gpus` costs little (median reported);
- under load the power and utilisation rise well above idle (power at least 1.5x, utilisation at least 90 %);
- the energy counter's mean power agrees with the sampled power within 15 % over the load window.

Needs a machine with an NVIDIA GPU, nvidia-ml-py and torch:

    PYTHONPATH=. python benchmarks/gpu_telemetry_real.py --load-s 20 --out gpu-telemetry.json
"""

from __future__ import annotations

import argparse
import functools
import json
import operator
import statistics
import sys
import time
from typing import Any

from toolkit.servers.gpu import SAMPLE_INTERVAL_S, installed_gpus, read_gpus, telemetry, window_telemetry


def matmul_load(seconds: float, size: int) -> dict[str, float]:
    """bf16 matrix multiplies on GPU 0 for `seconds`; the achieved TFLOP/s."""
    import torch

    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    start, count = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        for _ in range(20):
            a @ b
        torch.cuda.synchronize()
        count += 20
    elapsed = time.perf_counter() - start
    return {"matmuls": count, "seconds": elapsed, "tflop_s": 2 * size**3 * count / elapsed / 1e12}


def read_cost_ms(nvml: Any, handles: list[Any], repeats: int = 50) -> float:
    """Median wall time of one `read_gpus` of every GPU."""
    costs = []
    for _ in range(repeats):
        started = time.perf_counter()
        read_gpus(nvml, handles, started)
        costs.append((time.perf_counter() - started) * 1000)
    return statistics.median(costs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle-s", type=float, default=4.0)
    parser.add_argument("--load-s", type=float, default=20.0)
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--out", default="")
    args = parser.parse_args()

    facts = installed_gpus()
    warnings: list[str] = []
    with telemetry(warnings.append) as sampler:
        if sampler is None:
            print(json.dumps({"facts": facts, "warnings": warnings}))
            return 1
        t0 = time.perf_counter()
        time.sleep(args.idle_s)
        t1 = time.perf_counter()
        load = matmul_load(args.load_s, args.size)
        t2 = time.perf_counter()
        time.sleep(args.idle_s)
        t3 = time.perf_counter()
        cost = read_cost_ms(sampler.nvml, sampler.handles)
        samples = sampler.samples()
    # The first and last second of the load window hold the ramp up and down: the verdicts read its middle.
    idle = window_telemetry(samples, t0 + 0.5, t1)
    busy = window_telemetry(samples, t1 + 1.0, t2 - 1.0)
    after = window_telemetry(samples, t2 + 1.0, t3)
    gpus = len(sampler.handles)
    rate_hz = len([s for s in samples if t0 <= s.t <= t3]) / gpus / (t3 - t0)
    middle = [s for s in samples if t1 + 1.0 <= s.t <= t2 - 1.0]
    busy_util = [s.util_pct for s in middle if s.gpu == 0 and s.util_pct is not None]
    busy_reasons = functools.reduce(operator.or_, (s.reasons for s in middle if s.reasons is not None), 0)
    checks = {
        "facts name a GPU, driver and CUDA": bool(facts["devices"]) and bool(facts["driver"]) and bool(facts["cuda"]),
        "sampler within 20 % of 4 Hz": abs(rate_hz - 1 / SAMPLE_INTERVAL_S) <= 0.2 / SAMPLE_INTERVAL_S,
        "load power >= 1.5x idle": (busy["gpu_power_w"] or 0) >= 1.5 * (idle["gpu_power_w"] or float("inf")),
        "load utilisation >= 90 %": bool(busy_util) and statistics.median(busy_util) >= 90,
        "energy power within 15 % of sampled": busy["gpu_energy_w"] is not None
        and abs(busy["gpu_energy_w"] - busy["gpu_power_w"]) <= 0.15 * busy["gpu_power_w"],
    }
    document = {
        "facts": facts,
        "load": load,
        "windows": {"idle": idle, "load": busy, "after": after},
        "load_reason_bits": hex(busy_reasons),
        "load_utilisation_median_pct": statistics.median(busy_util) if busy_util else None,
        "sample_rate_hz_per_gpu": rate_hz,
        "read_gpus_median_ms": cost,
        "samples": len(samples),
        "checks": checks,
        "warnings": warnings,
    }
    text = json.dumps(document, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as out:
            out.write(text + "\n")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
