"""GPU telemetry against a fake NVML module: sampling rate, the throttle verdict of a window, no NVML at all."""

from __future__ import annotations

import sys
import time

import pandas as pd
import pytest

from tests.fake_nvml import FakeNVML
from toolkit.base.schema import COLUMNS, Measurement
from toolkit.reports.extras import extras_table
from toolkit.reports.tables import THROTTLED_MARK, THROTTLED_NOTE, decode_matrix, footnotes
from toolkit.servers import gpu
from toolkit.servers.gpu import (
    HW_THERMAL_SLOWDOWN,
    SW_POWER_CAP,
    GpuSample,
    GpuSampler,
    energy_per_token,
    gpu_facts,
    load_nvml,
    telemetry,
    window_telemetry,
)

GPU_IDLE = 0x1  # a clock event reason that is neither power nor heat


def sample(t: float, gpu_index: int = 0, reasons: int = 0, power: float = 300.0, temp: float = 60) -> GpuSample:
    return GpuSample(t=t, gpu=gpu_index, sm_clock_mhz=1980, power_w=power, temp_c=temp, util_pct=97,
                     memory_used_bytes=2**30, reasons=reasons)  # fmt: skip


def test_a_reason_set_for_part_of_the_window_flags_it() -> None:
    samples = [sample(t / 4, reasons=SW_POWER_CAP if 4 <= t <= 6 else 0) for t in range(0, 40)]
    assert window_telemetry(samples, 0.5, 2.0)["gpu_throttled"] is True  # readings 1.0–1.5 s inside
    assert window_telemetry(samples, 2.0, 9.0)["gpu_throttled"] is False  # the reason ended before the window
    heat = [sample(t / 4, gpu_index=t % 2, reasons=HW_THERMAL_SLOWDOWN if t == 13 else 0) for t in range(40)]
    assert window_telemetry(heat, 3.0, 3.5)["gpu_throttled"] is True  # one reading of one of two GPUs


def test_never_set_or_other_reasons_do_not_flag() -> None:
    quiet = [sample(t / 4) for t in range(40)]
    assert window_telemetry(quiet, 0, 10)["gpu_throttled"] is False
    idle = [sample(t / 4, reasons=GPU_IDLE) for t in range(40)]
    assert window_telemetry(idle, 0, 10)["gpu_throttled"] is False
    assert window_telemetry(quiet, 20, 30) == dict.fromkeys(
        ("gpu_power_w", "gpu_temp_peak_c", "gpu_sm_clock_mhz", "gpu_throttled", "gpu_energy_w")
    )  # no reading inside: unknown, not "not throttled"


def test_power_is_all_gpus_together_temperature_the_peak() -> None:
    samples = [sample(t, 0, power=300 + t, temp=60 + t) for t in range(4)]
    samples += [sample(t, 1, power=100, temp=50) for t in range(4)]
    fields = window_telemetry(samples, 0, 3)
    assert fields["gpu_power_w"] == pytest.approx(301.5 + 100)
    assert fields["gpu_temp_peak_c"] == 63 and fields["gpu_sm_clock_mhz"] == 1980


def test_the_sampler_reads_every_gpu_at_least_twice_a_second_and_judges_windows() -> None:
    fake = FakeNVML(count=2)
    with GpuSampler(fake) as sampler:  # the default interval
        time.sleep(1.2)
        counts = pd.Series([s.gpu for s in sampler.samples()]).value_counts()
    assert set(counts.index) == {0, 1} and counts.min() >= 2 * 1.2, counts

    fake = FakeNVML(count=2)
    with GpuSampler(fake, interval_s=0.05) as sampler:
        start = time.perf_counter()
        time.sleep(0.3)
        fake.throttle(SW_POWER_CAP, gpu=1)  # for part of the window, on one GPU
        time.sleep(0.3)
        fake.throttle(0)
        time.sleep(0.3)
        end = time.perf_counter()
        time.sleep(0.1)
        start2 = time.perf_counter()
        time.sleep(0.6)
        end2 = time.perf_counter()
    first = window_telemetry(sampler.samples(start, end), start, end)
    assert first["gpu_throttled"] is True
    assert first["gpu_power_w"] == pytest.approx(300 + 310) and first["gpu_temp_peak_c"] == 61
    assert window_telemetry(sampler.samples(start2, end2), start2, end2)["gpu_throttled"] is False
    sampler.discard_before(start2)
    assert min(s.t for s in sampler.samples()) >= start2


def test_gpu_facts_through_the_injected_module() -> None:
    facts = gpu_facts(FakeNVML(count=2))
    assert facts == {"devices": [{"name": "NVIDIA H200", "memory_bytes": 141 * 2**30}] * 2, "driver": "570.86.15",
                     "cuda": "12.8"}  # fmt: skip
    assert gpu_facts(None) == {"devices": [], "driver": None, "cuda": None}


def test_the_real_import_path_takes_the_fake_or_says_why_not(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNVML(count=1)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    nvml, why = load_nvml()
    assert nvml is fake and fake.inits == 1 and why == ""
    said: list[str] = []
    with telemetry(said.append) as sampler:
        assert isinstance(sampler, GpuSampler)
    assert said == [] and fake.shutdowns == 1

    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed
    with telemetry(said.append) as sampler:
        assert sampler is None
    assert len(said) == 1 and said[0].startswith(gpu.NO_TELEMETRY + " (")


def test_throttled_cells_are_marked_in_the_matrix_with_a_footnote() -> None:
    cells = [Measurement("decode", 8192, "8K", n, "Valid", total_tok_s=100.0 * n, ttft_ms=50.0, gpu_power_w=650.0,
                         gpu_temp_peak_c=71.0, gpu_sm_clock_mhz=1755.0, gpu_throttled=n == 2)
             for n in (1, 2)]  # fmt: skip
    frame = pd.DataFrame([m.to_dict() for m in cells], columns=list(COLUMNS))
    matrix = decode_matrix(frame)
    assert THROTTLED_MARK not in matrix.loc["8K", 1] and matrix.loc["8K", 2].endswith(" · " + THROTTLED_MARK)
    assert THROTTLED_NOTE in footnotes(frame)
    extras = extras_table(frame)
    assert extras["GPU power"].tolist() == ["650 W"] * 2 and extras["GPU throttled"].tolist() == ["no", "yes"]
    assert extras["GPU temperature peak"].tolist() == ["71 °C"] * 2 and extras["GPU SM clock"][0] == "1,755 MHz"
    quiet = frame.assign(gpu_throttled=False)
    assert THROTTLED_NOTE not in footnotes(quiet)


def test_energy_comes_from_the_counter_per_gpu_and_gives_joules_per_token() -> None:
    # GPU 0 draws 400 W by its energy counter while its power samples read 300 W: the counter decides.
    samples = [GpuSample(t=t, gpu=0, sm_clock_mhz=1980, power_w=300.0, temp_c=60, util_pct=97,
                         memory_used_bytes=0, reasons=0, energy_mj=int(400_000 * t)) for t in range(5)]  # fmt: skip
    samples += [GpuSample(t=t + 0.5, gpu=1, sm_clock_mhz=1980, power_w=100.0, temp_c=50, util_pct=97,
                          memory_used_bytes=0, reasons=0, energy_mj=int(100_000 * t)) for t in range(4)]  # fmt: skip
    fields = window_telemetry(samples, 0, 4)
    assert fields["gpu_energy_w"] == pytest.approx(500.0)
    assert energy_per_token(fields["gpu_energy_w"], 1000.0) == {"joules_per_token": 0.5, "tokens_per_joule": 2.0}
    assert energy_per_token(None, 1000.0) == {"joules_per_token": None, "tokens_per_joule": None}
    no_counter = [sample(t / 4) for t in range(40)]  # GPUs before Volta: no energy counter
    assert window_telemetry(no_counter, 0, 10)["gpu_energy_w"] is None
