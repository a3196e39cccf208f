"""GPU telemetry in a run (fault server, fake NVML injected where the toolkit imports pynvml), and a run without it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fake_nvml import FakeNVML
from tests.faultserver import FaultServer
from tests.tiny_params import tiny_params
from toolkit.matrix import decode
from toolkit.matrix.runner import run_matrix
from toolkit.params import make_params
from toolkit.reports.tables import THROTTLED_MARK, THROTTLED_NOTE, report_markdown
from toolkit.results.run_document import RunDocument
from toolkit.results.store import RUN_FILE, to_dataframe
from toolkit.servers.gpu import NO_TELEMETRY, SW_THERMAL_SLOWDOWN

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def server(fault_server: FaultServer) -> FaultServer:
    return fault_server


def _params(server: FaultServer) -> Any:
    # 1 s windows, not tiny_params' 0.5 s: energy needs two readings of each GPU inside the window (4 a second), which
    # a 0.5 s window missed once beside two busy processes (gpu_energy_w None).
    return make_params(tiny_params(base_url=server.base_url, concurrency=[1, 2], read_timeout_s=None, duration_s=1.0,
                                   api_key_env="GPU_TEST_NO_KEY", control_window_s=0.5))  # fmt: skip


def test_a_cell_whose_window_a_gpu_throttled_in_is_flagged(
    server: FaultServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeNVML(count=2)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    wait_ready = decode._wait_ready

    async def throttle_the_two_stream_cell(*args: Any) -> Any:
        ready = await wait_ready(*args)
        fake.throttle(SW_THERMAL_SLOWDOWN if args[2] == 2 else 0, gpu=1)  # from this window's start on
        return ready

    monkeypatch.setattr(decode, "_wait_ready", throttle_the_two_stream_cell)
    cells = {m.key: m for m in run_matrix(_params(server), tmp_path, progress=False)}
    one, two = cells[("decode", 64, 1)], cells[("decode", 64, 2)]
    assert one.gpu_throttled is False and two.gpu_throttled is True
    for m in (one, two):
        assert m.gpu_power_w == pytest.approx(610) and m.gpu_temp_peak_c == 61 and m.gpu_sm_clock_mhz == 1980
        # The fake's energy counters run at the same 300 + 310 W: energy per token from them, per cell.
        assert m.gpu_energy_w == pytest.approx(610, rel=0.02) and m.total_tok_s
        assert m.joules_per_token == pytest.approx(m.gpu_energy_w / m.total_tok_s)
        assert m.tokens_per_joule == pytest.approx(m.total_tok_s / m.gpu_energy_w)
    assert cells[("prefill", 64, 1)].gpu_throttled is None  # prefill has no window
    assert cells[("prefill", 64, 1)].joules_per_token is None
    assert fake.shutdowns == fake.inits  # every NVML session closed
    run = json.loads((tmp_path / RUN_FILE).read_text())
    assert run["hardware"]["GPU"] == "NVIDIA H200" and run["hardware"]["GPU count"] == "2"
    assert run["environment"]["gpus"]["driver"] == "570.86.15"
    report = report_markdown(to_dataframe(list(cells.values())), run)
    matrix = report.split("## Sustained decode", 1)[1].split("## All measurements", 1)[0]
    assert matrix.count(THROTTLED_MARK) == 1 + THROTTLED_NOTE.count(THROTTLED_MARK) and THROTTLED_NOTE in matrix


def test_without_nvml_the_run_says_so_once_and_completes(
    server: FaultServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml fails, as without the gpu extra
    params = _params(server)
    run_matrix(params, tmp_path, phases=["prefill"], attach=True, progress=False)  # as the two notebooks do
    measured = run_matrix(params, tmp_path, phases=["decode"], attach=True, progress=False)
    err = capsys.readouterr().err
    assert err.count(NO_TELEMETRY) == 1, err
    decode_cells = [m for m in measured if m.phase == "decode"]
    assert len(decode_cells) == 2 and all(m.status == "Valid" for m in decode_cells)
    assert all(m.gpu_throttled is None and m.gpu_power_w is None and m.joules_per_token is None for m in decode_cells)
    run = json.loads((tmp_path / RUN_FILE).read_text())
    assert run["hardware"]["GPU"] == "none" and run["environment"]["gpus"]["devices"] == []
    assert RunDocument.model_validate(run).run_block()["Server"] == f"found running at {server.base_url}"
