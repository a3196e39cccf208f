"""A stand-in for the `pynvml` module: GPUs whose readings a test sets, answering the calls toolkit.servers.gpu makes.

Injected either directly (`GpuSampler(FakeNVML())`) or as `sys.modules["pynvml"]`, where the toolkit imports it.
"""

from __future__ import annotations

import threading
import time
import types
from types import SimpleNamespace


class NVMLError(Exception):
    """What pynvml raises; here for queries a fake GPU does not support."""


class FakeNVML(types.ModuleType):
    """`count` GPUs; `reasons[i]` (clock event reason bits), `power_w[i]`, `temp_c[i]`, `sm_mhz[i]` are settable."""

    NVML_CLOCK_SM = 1
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, count: int = 2, name: str = "NVIDIA H200", memory_gib: int = 141) -> None:
        super().__init__("pynvml")
        self.count, self.name, self.memory = count, name, memory_gib * 2**30
        self.reasons = [0] * count
        self.power_w = [300.0 + 10 * i for i in range(count)]
        self.temp_c = [60 + i for i in range(count)]
        self.sm_mhz = [1980] * count
        self.energy = True  # False: a GPU without an energy counter (before Volta)
        self._energy_mj = [0.0] * count
        self._energy_at = time.perf_counter()
        self.inits = self.shutdowns = 0
        self.reads: dict[int, int] = {}
        self._lock = threading.Lock()

    def throttle(self, bits: int, gpu: int | None = None) -> None:
        """Set the reason bits of one GPU (or all); 0 clears them."""
        for i in range(self.count) if gpu is None else [gpu]:
            self.reasons[i] = bits

    def nvmlInit(self) -> None:
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> bytes | str:
        return self.name.encode() if handle == 0 else self.name  # older pynvml answers bytes

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(total=self.memory, used=self.memory // 2, free=self.memory // 2)

    def nvmlSystemGetDriverVersion(self) -> str:
        return "570.86.15"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12080

    def nvmlDeviceGetClockInfo(self, handle: int, clock: int) -> int:
        assert clock == self.NVML_CLOCK_SM
        return self.sm_mhz[handle]

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        with self._lock:
            self.reads[handle] = self.reads.get(handle, 0) + 1
        return int(self.power_w[handle] * 1000)  # milliwatts

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        assert sensor == self.NVML_TEMPERATURE_GPU
        return self.temp_c[handle]

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=97, memory=40)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: int) -> int:
        return self.reasons[handle]

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:
        """Millijoules since 'driver load': every GPU's counter runs at its current power."""
        if not self.energy:
            raise NVMLError("Not Supported")
        with self._lock:
            now = time.perf_counter()
            for i in range(self.count):
                self._energy_mj[i] += self.power_w[i] * (now - self._energy_at) * 1000
            self._energy_at = now
            return int(self._energy_mj[handle])
