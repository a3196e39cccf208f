"""The matrix's measured / wall time and its split by phase."""

from __future__ import annotations

import pytest

from toolkit.method.overhead import PHASES, matrix_overhead, overhead_line


def test_no_timed_cells_has_no_overhead() -> None:
    assert matrix_overhead([{"phase": "decode", "status": "Over capacity"}]) is None


def test_phases_split_the_wall_time() -> None:
    rows = [
        {"phase": "prefill", "status": "Valid", "ttft_ms": 500.0, "cell_wall_s": 2.0, "retries_s": 0.6},
        {"phase": "decode", "status": "Valid", "measured_s": 6.0, "cell_wall_s": 20.0, "readiness_s": 3.0,
         "windows_s": 13.0, "retries_s": 6.5, "drain_s": 1.5},
        {"phase": "decode", "status": "Requests queued", "measured_s": 5.9, "cell_wall_s": 12.0,
         "readiness_s": 4.0, "windows_s": 6.5, "retries_s": 0.0, "drain_s": 1.0},
        {"phase": "decode", "status": "Error", "measured_s": 1.0, "cell_wall_s": 3.0, "drain_s": 0.5},
        {"phase": "decode", "status": "Over capacity"},
    ]  # fmt: skip
    spent = matrix_overhead(rows)
    assert spent is not None
    assert spent["wall_s"] == pytest.approx(37.0)
    assert spent["measured_s"] == pytest.approx(0.5 + 6.0 + 5.9)  # the Error cell measured nothing
    assert spent["ratio"] == pytest.approx(12.4 / 37.0)
    assert spent["prefill_s"] == pytest.approx(1.4) and spent["retries_s"] == pytest.approx(7.1)
    assert spent["readiness_s"] == pytest.approx(7.0) and spent["windows_s"] == pytest.approx(13.0)
    assert spent["drain_s"] == pytest.approx(3.0)
    assert sum(spent[f"{k}_s"] for k in PHASES) == pytest.approx(spent["wall_s"])
    line = overhead_line(spent)
    assert line.startswith("measured 12.4 s of 37.0 s wall (0.34): prefill 1.4 s, readiness 7.0 s")
    assert line.endswith("other 5.5 s")
