"""GPUs through NVML: what is installed, and telemetry sampled while a run measures.

All NVML calls go through the module given (`pynvml` from the `gpu` extra, or a fake in the tests), so the
same code runs against both. Without NVML there is no GPU telemetry and the run goes on.
"""

from __future__ import annotations

import contextlib
import importlib
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

NVML_CLOCK_SM = 1
NVML_TEMPERATURE_GPU = 0
# Clock event (throttle) reasons that mean power or heat held the clocks down (nvmlClocksEventReason*).
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8
SW_THERMAL_SLOWDOWN = 0x20
HW_THERMAL_SLOWDOWN = 0x40
HW_POWER_BRAKE_SLOWDOWN = 0x80
POWER_OR_HEAT = SW_POWER_CAP | HW_SLOWDOWN | SW_THERMAL_SLOWDOWN | HW_THERMAL_SLOWDOWN | HW_POWER_BRAKE_SLOWDOWN
SAMPLE_INTERVAL_S = 0.25  # 4 Hz per GPU
NO_TELEMETRY = "no GPU telemetry"


def load_nvml(name: str = "pynvml") -> tuple[Any | None, str]:
    """The initialised NVML module, or None and why not (not installed, no driver, no GPU)."""
    try:
        nvml = importlib.import_module(name)
        nvml.nvmlInit()
    except Exception as exc:  # ImportError, NVMLError_LibraryNotFound, NVMLError_DriverNotLoaded, ...
        return None, f"{type(exc).__name__}: {exc}"
    return nvml, ""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _call(fn: Callable[..., Any] | None, *args: Any) -> Any:
    """One NVML query, None where the GPU (or this NVML version) does not support it."""
    if fn is None:
        return None
    try:
        return fn(*args)
    except Exception:
        return None


def _handles(nvml: Any) -> list[Any]:
    return [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]


def cuda_version(code: int | None) -> str | None:
    """NVML's CUDA driver version 12040 as ``12.4``."""
    return None if not code else f"{code // 1000}.{code % 1000 // 10}"


def gpu_facts(nvml: Any | None) -> dict[str, Any]:
    """The GPUs (name, memory), the driver and its CUDA version; no devices without NVML."""
    if nvml is None:
        return {"devices": [], "driver": None, "cuda": None}
    devices = []
    for handle in _handles(nvml):
        memory = _call(nvml.nvmlDeviceGetMemoryInfo, handle)
        devices.append(
            {
                "name": _text(nvml.nvmlDeviceGetName(handle)),
                "memory_bytes": None if memory is None else int(memory.total),
            }
        )
    driver = _call(nvml.nvmlSystemGetDriverVersion)
    cuda = _call(getattr(nvml, "nvmlSystemGetCudaDriverVersion_v2", None) or nvml.nvmlSystemGetCudaDriverVersion)
    return {"devices": devices, "driver": None if driver is None else _text(driver), "cuda": cuda_version(cuda)}


@dataclass(frozen=True)
class GpuSample:
    """One reading of one GPU; `t` on the client's clock (time.perf_counter), None where unsupported."""

    t: float
    gpu: int
    sm_clock_mhz: float | None
    power_w: float | None
    temp_c: float | None
    util_pct: float | None
    memory_used_bytes: int | None
    reasons: int | None  # clock event (throttle) reason bits
    energy_mj: int | None = None  # total energy since the driver loaded (Volta and newer), millijoules


def read_gpus(nvml: Any, handles: list[Any], t: float) -> list[GpuSample]:
    """One sample of every GPU."""
    reasons_fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
    )
    sm = getattr(nvml, "NVML_CLOCK_SM", NVML_CLOCK_SM)
    gpu_temp = getattr(nvml, "NVML_TEMPERATURE_GPU", NVML_TEMPERATURE_GPU)
    samples = []
    for i, handle in enumerate(handles):
        power_mw = _call(nvml.nvmlDeviceGetPowerUsage, handle)
        util = _call(nvml.nvmlDeviceGetUtilizationRates, handle)
        memory = _call(nvml.nvmlDeviceGetMemoryInfo, handle)
        samples.append(
            GpuSample(
                t=t,
                gpu=i,
                sm_clock_mhz=_call(nvml.nvmlDeviceGetClockInfo, handle, sm),
                power_w=None if power_mw is None else power_mw / 1000,
                temp_c=_call(nvml.nvmlDeviceGetTemperature, handle, gpu_temp),
                util_pct=None if util is None else util.gpu,
                memory_used_bytes=None if memory is None else int(memory.used),
                reasons=_call(reasons_fn, handle),
                energy_mj=_call(getattr(nvml, "nvmlDeviceGetTotalEnergyConsumption", None), handle),
            )
        )
    return samples


class GpuSampler:
    """Samples every GPU every `interval_s` in a background thread; keeps the readings for the window verdicts."""

    def __init__(
        self, nvml: Any, interval_s: float = SAMPLE_INTERVAL_S, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.nvml, self.interval_s, self.clock = nvml, interval_s, clock
        self.handles = _handles(nvml)
        self._samples: deque[GpuSample] = deque()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpu-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = self.clock()
            batch = read_gpus(self.nvml, self.handles, started)
            with self._lock:
                self._samples.extend(batch)
            self._stop.wait(max(0.0, self.interval_s - (self.clock() - started)))

    def samples(self, start: float = float("-inf"), end: float = float("inf")) -> list[GpuSample]:
        with self._lock:
            return [s for s in self._samples if start <= s.t <= end]

    def discard_before(self, t: float) -> None:
        """Forget readings older than `t` (the run keeps only what the next verdict can need)."""
        with self._lock:
            while self._samples and self._samples[0].t < t:
                self._samples.popleft()

    def start(self) -> GpuSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def __enter__(self) -> GpuSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def telemetry(warn: Callable[[str], None]) -> Iterator[GpuSampler | None]:
    """A running sampler while the block runs, or None after one warning ("no GPU telemetry …")."""
    nvml, why = load_nvml()
    if nvml is None:
        warn(f"{NO_TELEMETRY} ({why})")
        yield None
        return
    try:
        with GpuSampler(nvml) as sampler:
            yield sampler
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def installed_gpus() -> dict[str, Any]:
    """gpu_facts of this machine (no devices without NVML)."""
    nvml, _ = load_nvml()
    try:
        return gpu_facts(nvml)
    except Exception as exc:  # a driver that answers the count but not the details
        return {"devices": [], "driver": None, "cuda": None, "error": f"{type(exc).__name__}: {exc}"}
    finally:
        if nvml is not None:
            with contextlib.suppress(Exception):
                nvml.nvmlShutdown()


def _mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def window_telemetry(samples: Iterable[GpuSample], start: float, end: float) -> dict[str, Any]:
    """The decode cell's GPU fields from the readings inside its window [start, end] (pure).

    Power is the mean over the window of all GPUs' draw together; temperature the peak of any GPU; the SM clock
    the mean over GPUs and readings; throttled: any GPU's power or thermal reason bit set in any reading.
    """
    inside = [s for s in samples if start <= s.t <= end]
    if not inside:
        return {
            "gpu_power_w": None,
            "gpu_temp_peak_c": None,
            "gpu_sm_clock_mhz": None,
            "gpu_throttled": None,
            "gpu_energy_w": None,
        }
    per_gpu_power = [_mean(s.power_w for s in inside if s.gpu == g) for g in sorted({s.gpu for s in inside})]
    temps = [s.temp_c for s in inside if s.temp_c is not None]
    reasons = [s.reasons for s in inside if s.reasons is not None]
    return {
        "gpu_power_w": sum(p for p in per_gpu_power if p is not None)
        if any(p is not None for p in per_gpu_power)
        else None,
        "gpu_temp_peak_c": max(temps) if temps else None,
        "gpu_sm_clock_mhz": _mean(s.sm_clock_mhz for s in inside),
        "gpu_throttled": any(r & POWER_OR_HEAT for r in reasons) if reasons else None,
        "gpu_energy_w": energy_power_w(inside),
    }


def energy_power_w(inside: list[GpuSample]) -> float | None:
    """All GPUs' mean draw from their energy counters: each GPU's energy between its first and last reading in
    the window over the time between them, summed; None when a GPU has no counter or fewer than two readings."""
    total = 0.0
    for g in sorted({s.gpu for s in inside}):
        readings = [s for s in inside if s.gpu == g]
        first, last = readings[0], readings[-1]
        if first.energy_mj is None or last.energy_mj is None or last.t <= first.t:
            return None
        total += (last.energy_mj - first.energy_mj) / 1000 / (last.t - first.t)
    return total


def energy_per_token(energy_w: float | None, total_tok_s: float | None) -> dict[str, Any]:
    """Joules per output token and output tokens per joule of a decode cell (None without either number)."""
    if not energy_w or not total_tok_s:
        return {"joules_per_token": None, "tokens_per_joule": None}
    return {"joules_per_token": energy_w / total_tok_s, "tokens_per_joule": total_tok_s / energy_w}
